//! The import rules of `docs/architecture.md`, held by test: the page's `never` block
//! is parsed, every file of `src/` and of the member crates (`crates/NAME/src/`) is
//! read, and each import that breaks a rule fails the test with the file, the line, the
//! import and the rule. The page's `pending`
//! block lists rules that do not hold yet: they are checked and printed, never failed
//! on, until they move to `never`.
//!
//! A room is a top-level module (`src/x.rs` or `src/x/`, and `main` for the binary), or
//! a member crate (`crates/x/`, whose files are all its room's). An import is every
//! path into another room: `crate::x` (in `use` trees too), `booking_expire::x` (the
//! binary's), `booking_expire_x::` (a member crate's), a `super::` that climbs out of
//! its room, and the external crates the rules name (`rdkafka::…`; a `use NAME as …`
//! too). A member crate's own `crate::` and `super::` paths stay in its room (what it
//! may import at all is its manifest's to say, and the compiler's to hold), and its
//! `booking_expire_x::` paths (or `use booking_expire_x as …`) are imports of the
//! member crate `x`'s room, as the application's are. A path on into the room's `driver`
//! module (`crate::store::driver`, `booking_expire_kafka::{driver, …}`) is an import of
//! `ROOM::driver` as well, a name the rules can forbid. Comments and string literals are left
//! out; a string literal that opens with an SQL statement is what `holds SQL` means.
//!
//! A rule is one line: `SUBJECT never imports OBJECT`, `SUBJECT never holds SQL`, or
//! `no import cycles`, where SUBJECT and OBJECT are names (rooms or crates) or
//! `anything but NAMES` (rooms only). A cycle is reported once; edges a pending rule
//! forbids are left out of the cycle check while they are pending.

use std::collections::{BTreeMap, BTreeSet};

mod imports;
mod layers;
mod map;

use imports::{module_of, uses_of};

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
    Never { subject: Names, object: Names },
    NoSql { subject: Names },
    NoCycles,
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
            Kind::NoCycles
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

/// Where a file of the workspace (its path from the root) belongs: its room, and its
/// path relative to the application's `src/` (`None` for a member crate's file).
fn room_of(path: &str) -> (String, Option<&str>) {
    if let Some(app) = path.strip_prefix("src/") {
        return (module_of(app)[0].clone(), Some(app));
    }
    let member = path
        .strip_prefix(crate::source::CRATES)
        .and_then(|p| p.strip_prefix('/'))
        .and_then(|p| p.split_once('/'))
        .map(|(name, _)| name.to_owned())
        .unwrap_or_else(|| panic!("{path}: neither in src/ nor in a member crate"));
    (member, None)
}

/// The rooms of the files: the first part of each one's module path, and the member
/// crates.
fn rooms_of(files: &BTreeMap<String, String>) -> BTreeSet<String> {
    files
        .keys()
        .map(|path| room_of(path).0)
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

/// What breaks `rules` in `files` (path from the workspace's root → text), one message each;
/// edges that break a rule of `pending` are left out of the cycle check.
fn violations(files: &BTreeMap<String, String>, rules: &[Rule], pending: &[Rule]) -> Vec<String> {
    let rooms = rooms_of(files);
    let all: Vec<Rule> = rules.iter().chain(pending).cloned().collect();
    let crates = crates_of(&all, &rooms);
    let mut found = Vec::new();
    // Room → room → the first place that imports it.
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let no_rooms = BTreeSet::new();
    for (path, source) in files {
        let (room, app) = room_of(path);
        if room == "lib" {
            continue;
        }
        // A member crate's `crate::` and `super::` paths are its own: only its SQL, the
        // other member crates it names and the named crates count.
        let uses = match app {
            Some(app) => uses_of(app, source, &rooms, &rooms, &crates),
            None => uses_of(
                &format!("{room}/{path}"),
                source,
                &no_rooms,
                &rooms,
                &crates,
            ),
        };
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
    if let Some(rule) = rules.iter().find(|r| r.kind == Kind::NoCycles) {
        for cycle in cycles(&edges) {
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
    found
}

/// The import cycles among `edges`, each once, from its smallest room and back to it.
fn cycles(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    fn walk(
        edges: &BTreeMap<String, BTreeMap<String, String>>,
        start: &str,
        path: &mut Vec<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        let here = path.last().unwrap().clone();
        for next in edges.get(&here).into_iter().flat_map(|e| e.keys()) {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_owned());
                found.push(cycle);
            } else if next.as_str() > start && !path.contains(next) {
                path.push(next.clone());
                walk(edges, start, path, found);
                path.pop();
            }
        }
    }
    let mut found = Vec::new();
    for start in edges.keys() {
        walk(edges, start, &mut vec![start.clone()], &mut found);
    }
    found
}

#[cfg(test)]
mod tests;
