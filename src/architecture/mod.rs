//! The rules of `docs/architecture.md` that the compiler cannot hold, held by test: the
//! page's `never` block is parsed, every file of `src/` and of the member crates
//! (`crates/NAME/src/`) is read with syn (`graph`: each path resolved to the file that
//! defines what it names), and each import that breaks a rule fails the test with the
//! file, the line, the path and the rule. The page's `pending` block lists rules that
//! do not hold yet: they are checked and printed, never failed on, until they move to
//! `never`.
//!
//! A room is a top-level module (`src/x.rs` or `src/x/`, and `main` for the binary), or
//! a member crate (`crates/x/`, whose files are all its room's). A file imports a room
//! when one of its paths (or `use`s, re-exports too) names an item defined in one of
//! the room's files, a module of it, an external crate the rules name (`clap::…`, or a
//! name brought in from it), or a member crate's `driver` module (`ROOM::driver`, a name
//! the rules can forbid). A string literal that opens with an SQL statement (comments
//! and doc comments are no code) is what `holds SQL` means.
//!
//! A rule is one line: `SUBJECT never imports OBJECT`, `SUBJECT never holds SQL`, `no
//! import cycles`, or `no import cycles within NAMES`, where SUBJECT and OBJECT are
//! names (rooms or crates) or `anything but NAMES` (rooms only). `no import cycles` is
//! held between files (a circle of files that import each other, each tangle named by
//! its circles: `circles`) and between rooms; `within NAMES` is the circles whose files
//! all lie in those rooms, the form a pending rule takes for a tangle being untangled.
//! Edges a pending `never imports` rule forbids are left out of the rooms' cycle check.

use std::collections::{BTreeMap, BTreeSet};

mod circles;
mod graph;
mod layers;
mod map;

use graph::{Graph, Res};

/// Where the rules are written.
const PAGE: &str = "docs/architecture.md";

/// A set of names: those listed, or every room but those listed.
#[derive(Debug, Clone, PartialEq)]
enum Names {
    Only(BTreeSet<String>),
    AllBut(BTreeSet<String>),
}

impl Names {
    fn parse(text: &str) -> Names {
        let words = |t: &str| -> BTreeSet<String> {
            t.split([' ', ','])
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect()
        };
        match text.trim().strip_prefix("anything but") {
            Some(rest) => Names::AllBut(words(rest)),
            None if text.trim() == "anything" => Names::AllBut(BTreeSet::new()),
            None => Names::Only(words(text)),
        }
    }

    /// Whether `name` is in the set (`AllBut` ranges over the rooms only).
    fn has(&self, name: &str, rooms: &BTreeSet<String>) -> bool {
        match self {
            Names::Only(names) => names.contains(name),
            Names::AllBut(but) => rooms.contains(name) && !but.contains(name),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Never {
        subject: Names,
        object: Names,
    },
    NoSql {
        subject: Names,
    },
    /// Between files and between rooms; `within`: only the circles of files all in
    /// those rooms.
    NoCycles {
        within: Option<Names>,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    text: String,
    kind: Kind,
}

impl Rule {
    fn parse(line: &str) -> Result<Rule, String> {
        let text = line.trim().to_owned();
        let kind = if text == "no import cycles" {
            Kind::NoCycles { within: None }
        } else if let Some(names) = text.strip_prefix("no import cycles within ") {
            Kind::NoCycles {
                within: Some(Names::parse(names)),
            }
        } else if let Some(subject) = text.strip_suffix(" never holds SQL") {
            Kind::NoSql {
                subject: Names::parse(subject),
            }
        } else if let Some((subject, object)) = text.split_once(" never imports ") {
            Kind::Never {
                subject: Names::parse(subject),
                object: Names::parse(object),
            }
        } else {
            return Err(format!("{PAGE}: not a rule: {text:?}"));
        };
        Ok(Rule { text, kind })
    }

    /// Whether an edge `from` → `to` breaks this rule.
    fn forbids(&self, from: &str, to: &str, rooms: &BTreeSet<String>) -> bool {
        match &self.kind {
            Kind::Never { subject, object } => {
                from != to && subject.has(from, rooms) && object.has(to, rooms)
            }
            _ => false,
        }
    }
}

/// The rules of the fenced block opened by ```` ```tag ```` in `page`.
fn rules_in(page: &str, tag: &str) -> Result<Vec<Rule>, String> {
    let open = format!("```{tag}\n");
    let start = page
        .find(&open)
        .ok_or_else(|| format!("{PAGE}: no ```{tag} block"))?
        + open.len();
    let block = &page[start..];
    let end = block
        .find("```")
        .ok_or_else(|| format!("{PAGE}: the ```{tag} block is not closed"))?;
    block[..end]
        .lines()
        .map(|l| l.split(" -- ").next().unwrap_or(l))
        .filter(|l| !l.trim().is_empty())
        .map(Rule::parse)
        .collect()
}

/// The room of a file of the workspace (its path from the root): `src/x.rs` and `src/x/`
/// are `x`, `src/main.rs` is `main`, `src/lib.rs` is `lib`, `crates/x/src/` is `x`.
fn room_of(path: &str) -> String {
    let rest = path
        .strip_prefix("src/")
        .or_else(|| {
            path.strip_prefix(crate::source::CRATES)
                .and_then(|p| p.strip_prefix('/'))
        })
        .unwrap_or_else(|| panic!("{path}: neither in src/ nor in a member crate"));
    let first = rest.split('/').next().unwrap_or(rest);
    first.trim_end_matches(".rs").to_owned()
}

/// The rooms of the files: the first part of each one's module path, and the member
/// crates.
fn rooms_of(files: &BTreeMap<String, String>) -> BTreeSet<String> {
    files
        .keys()
        .map(|path| room_of(path))
        .filter(|room| room != "lib")
        .collect()
}

/// The names the rules mention that are no room: the external crates to look for.
fn crates_of(rules: &[Rule], rooms: &BTreeSet<String>) -> BTreeSet<String> {
    rules
        .iter()
        .filter_map(|r| match &r.kind {
            Kind::Never {
                object: Names::Only(names),
                ..
            } => Some(names.iter().filter(|n| !rooms.contains(*n)).cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The statement keywords a string literal of SQL opens with.
const SQL_STARTS: &[&str] = &[
    "SELECT ",
    "INSERT INTO ",
    "UPDATE ",
    "DELETE FROM ",
    "WITH ",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT ",
    "RELEASE SAVEPOINT",
    "SET ",
    "SHOW ",
    "LISTEN ",
    "NOTIFY ",
    "LOCK TABLE",
    "CREATE ",
    "ALTER ",
    "DROP ",
    "GRANT ",
    "REVOKE ",
    "TRUNCATE ",
    "VACUUM",
];

/// One import of a room, a crate or SQL by a file.
#[derive(Debug, Clone, PartialEq)]
struct Use {
    line: usize,
    /// The room or crate (`"SQL"` for a literal of SQL, `ROOM::driver`).
    target: String,
    /// The path as written (or the literal's opening).
    text: String,
}

/// The string literals of `source` that open with an SQL statement.
fn sql_of(source: &str) -> Vec<Use> {
    use proc_macro2::TokenTree;
    let tokens = crate::source::tokens(source).expect("Rust");
    let mut found = Vec::new();
    for seq in crate::source::sequences(tokens) {
        for tree in &seq {
            let TokenTree::Literal(literal) = tree else {
                continue;
            };
            let Some(text) = crate::source::string_of(literal) else {
                continue;
            };
            let text = text.trim_start();
            if SQL_STARTS.iter().any(|s| text.starts_with(s)) {
                let opening: String = text.chars().take(30).collect();
                found.push(Use {
                    line: crate::source::line_of(tree),
                    target: "SQL".to_owned(),
                    text: format!("\"{opening}…\""),
                });
            }
        }
    }
    found.sort_by_key(|u| u.line);
    found
}

/// The rooms, crates of `crates` and drivers each file of `graph` imports, each once
/// (where it is first written), other than its own room.
fn imports_of(
    graph: &Graph,
    rooms: &BTreeSet<String>,
    crates: &BTreeSet<String>,
) -> BTreeMap<String, Vec<Use>> {
    let mut out = BTreeMap::new();
    for (file, named) in &graph.named {
        let own = room_of(file);
        let mut first: BTreeMap<String, Use> = BTreeMap::new();
        for n in named {
            let mut targets = Vec::new();
            if let Some(member) = &n.driver {
                targets.push(format!("{member}::driver"));
            }
            match &n.res {
                Res::Item(to) if !to.is_empty() => targets.push(room_of(to)),
                Res::Module(id) => targets.push(graph.room_of_module(*id)),
                Res::External(name) if crates.contains(name) => targets.push(name.clone()),
                _ => {}
            }
            for target in targets {
                let counts = target.ends_with("::driver")
                    || (target != own && (rooms.contains(&target) || crates.contains(&target)));
                if !counts || target == "lib" {
                    continue;
                }
                let u = Use {
                    line: n.line,
                    target: target.clone(),
                    text: n.text.clone(),
                };
                let kept = first.entry(target).or_insert_with(|| u.clone());
                if u.line < kept.line {
                    *kept = u;
                }
            }
        }
        let mut uses: Vec<Use> = first.into_values().collect();
        uses.sort_by(|a, b| (a.line, &a.target).cmp(&(b.line, &b.target)));
        out.insert(file.clone(), uses);
    }
    out
}

/// What breaks `rules` in `files` (path from the workspace's root → text), one message
/// each; edges that break a `never imports` rule of `pending` are left out of the
/// rooms' cycle check, and circles a `no import cycles within` rule of `pending` covers
/// out of the files' one.
fn violations(files: &BTreeMap<String, String>, rules: &[Rule], pending: &[Rule]) -> Vec<String> {
    let rooms = rooms_of(files);
    let all: Vec<Rule> = rules.iter().chain(pending).cloned().collect();
    let crates = crates_of(&all, &rooms);
    let graph = graph::graph(files);
    let imports = imports_of(&graph, &rooms, &crates);
    let mut found = Vec::new();
    // Room → room → the first place that imports it.
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, source) in files {
        let room = room_of(path);
        if room == "lib" {
            continue;
        }
        let uses = sql_of(source)
            .into_iter()
            .chain(imports[path].iter().cloned());
        for u in uses {
            let place = format!("{path}:{}: `{}`", u.line, u.text);
            for rule in rules {
                let broken = match &rule.kind {
                    Kind::NoSql { subject } => u.target == "SQL" && subject.has(&room, &rooms),
                    _ => u.target != "SQL" && rule.forbids(&room, &u.target, &rooms),
                };
                if broken {
                    found.push(format!(
                        "{place} ({room} → {}) breaks \"{}\"",
                        u.target, rule.text
                    ));
                }
            }
            let exempt = pending.iter().any(|r| r.forbids(&room, &u.target, &rooms));
            if rooms.contains(&u.target) && !exempt {
                edges
                    .entry(room.clone())
                    .or_default()
                    .entry(u.target.clone())
                    .or_insert(place);
            }
        }
    }
    let within = |names: &Option<Names>, circle: &[String]| {
        names
            .as_ref()
            .is_none_or(|n| circle.iter().all(|f| n.has(&room_of(f), &rooms)))
    };
    for rule in rules {
        let Kind::NoCycles { within: names } = &rule.kind else {
            continue;
        };
        if names.is_none() {
            for cycle in circles::every_cycle(&edges) {
                let places: Vec<String> = cycle
                    .windows(2)
                    .map(|w| format!("{} → {} at {}", w[0], w[1], edges[&w[0]][&w[1]]))
                    .collect();
                found.push(format!(
                    "{} breaks \"{}\": {}",
                    cycle.join(" → "),
                    rule.text,
                    places.join("; ")
                ));
            }
        }
        // The edges between rooms a pending rule forbids are left out, as above.
        let mut file_edges = graph.edges();
        for (from, to) in &mut file_edges {
            to.retain(|to, _| {
                let (a, b) = (room_of(from), room_of(to));
                !pending.iter().any(|r| r.forbids(&a, &b, &rooms))
            });
        }
        for circle in circles::circles(&file_edges) {
            let pended = pending.iter().any(|p| match &p.kind {
                Kind::NoCycles { within: Some(n) } => within(&Some(n.clone()), &circle),
                _ => false,
            });
            if !within(names, &circle) || (names.is_none() && pended) {
                continue;
            }
            let places: Vec<String> = circle
                .windows(2)
                .map(|w| {
                    let (line, text) = &file_edges[&w[0]][&w[1]];
                    format!("{}:{line} `{text}`", w[0])
                })
                .collect();
            found.push(format!(
                "{} breaks \"{}\": {}",
                circle.join(" → "),
                rule.text,
                places.join("; ")
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests;
