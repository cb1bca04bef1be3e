//! The import rules of `docs/architecture.md`, held by test: the page's `never` block
//! is parsed, every file of `src/` is read, and each import that breaks a rule fails
//! the test with the file, the line, the import and the rule. The page's `pending`
//! block lists rules that do not hold yet: they are checked and printed, never failed
//! on, until they move to `never`.
//!
//! A room is a top-level module (`src/x.rs` or `src/x/`, and `main` for the binary).
//! An import is every path into another room: `crate::x` (in `use` trees too),
//! `booking_expire::x` (the binary's), a `super::` that climbs out of its room, and the
//! external crates the rules name (`rdkafka::…`). Comments and string literals are left
//! out; a string literal that opens with an SQL statement is what `holds SQL` means.
//!
//! A rule is one line: `SUBJECT never imports OBJECT`, `SUBJECT never holds SQL`, or
//! `no import cycles`, where SUBJECT and OBJECT are names (rooms or crates) or
//! `anything but NAMES` (rooms only). A cycle is reported once; edges a pending rule
//! forbids are left out of the cycle check while they are pending.

use std::collections::{BTreeMap, BTreeSet};

mod imports;
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

/// The rooms of the files: the first part of each one's module path.
fn rooms_of(files: &BTreeMap<String, String>) -> BTreeSet<String> {
    files
        .keys()
        .map(|path| module_of(path)[0].clone())
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

/// What breaks `rules` in `files` (path relative to `src/` → text), one message each;
/// edges that break a rule of `pending` are left out of the cycle check.
fn violations(files: &BTreeMap<String, String>, rules: &[Rule], pending: &[Rule]) -> Vec<String> {
    let rooms = rooms_of(files);
    let all: Vec<Rule> = rules.iter().chain(pending).cloned().collect();
    let crates = crates_of(&all, &rooms);
    let mut found = Vec::new();
    // Room → room → the first place that imports it.
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, source) in files {
        let room = module_of(path)[0].clone();
        if room == "lib" {
            continue;
        }
        for u in uses_of(path, source, &rooms, &crates) {
            let place = format!("src/{path}:{}: `{}`", u.line, u.text);
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
mod tests {
    use std::fs;
    use std::path::Path;

    use super::*;

    fn manifest() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    fn page_rules() -> (Vec<Rule>, Vec<Rule>) {
        let page = fs::read_to_string(manifest().join(PAGE)).unwrap();
        (
            rules_in(&page, "never").unwrap(),
            rules_in(&page, "pending").unwrap(),
        )
    }

    fn rules(lines: &[&str]) -> Vec<Rule> {
        lines.iter().map(|l| Rule::parse(l).unwrap()).collect()
    }

    fn files(sources: &[(&str, &str)]) -> BTreeMap<String, String> {
        sources
            .iter()
            .map(|(p, s)| ((*p).to_owned(), (*s).to_owned()))
            .collect()
    }

    /// The longest a file of `src/` may be: a room a reader can hold in mind.
    const MOST_LINES: usize = 450;

    #[test]
    fn no_file_of_src_is_longer_than_a_room() {
        let long: Vec<String> = crate::source::files()
            .iter()
            .map(|(path, text)| (path, text.lines().count()))
            .filter(|(_, lines)| *lines > MOST_LINES)
            .map(|(path, lines)| format!("src/{path}: {lines} lines"))
            .collect();
        assert!(
            long.is_empty(),
            "over {MOST_LINES} lines, split by concern: {long:?}"
        );
    }

    #[test]
    fn the_code_keeps_the_rules_of_the_architecture_page() {
        let (never, pending) = page_rules();
        assert!(never.iter().any(|r| r.kind == Kind::NoCycles), "{never:?}");
        let sources = crate::source::files();
        // Every name is a room or a dependency: a misspelt one would forbid nothing.
        let rooms = rooms_of(&sources);
        let manifest_text = fs::read_to_string(manifest().join("Cargo.toml")).unwrap();
        for rule in never.iter().chain(&pending) {
            let names = match &rule.kind {
                Kind::Never { subject, object } => vec![subject, object],
                Kind::NoSql { subject } => vec![subject],
                Kind::NoCycles => vec![],
            };
            for set in names {
                let (Names::Only(listed) | Names::AllBut(listed)) = set;
                for name in listed {
                    assert!(
                        rooms.contains(name) || manifest_text.contains(&format!("\n{name} = ")),
                        "{PAGE}: \"{}\" names {name}, neither a room nor a dependency",
                        rule.text
                    );
                }
            }
        }
        assert!(
            sources.contains_key("obs/metrics.rs"),
            "{:?}",
            sources.keys()
        );
        // Pending: printed, not failed on (a rule that holds now can move to `never`).
        for rule in &pending {
            let broken = violations(&sources, std::slice::from_ref(rule), &[]);
            if broken.is_empty() {
                println!(
                    "pending rule holds now, move it to never: \"{}\"",
                    rule.text
                );
            }
            for v in broken {
                println!("pending: {v}");
            }
        }
        let broken = violations(&sources, &never, &pending);
        assert!(
            broken.is_empty(),
            "{PAGE}'s rules are broken:\n{}",
            broken.join("\n")
        );
    }

    #[test]
    fn a_wrong_import_fails_naming_the_file_the_import_and_the_rule() {
        let sources = files(&[
            (
                "domain/plan.rs",
                "use chrono::Utc;\nuse crate::clock::seconds;\nuse crate::store::Backlog;\n",
            ),
            ("store/mod.rs", "pub struct Backlog;\n"),
            ("clock.rs", ""),
        ]);
        let never = rules(&["domain never imports anything but clock"]);
        assert_eq!(
            violations(&sources, &never, &[]),
            [
                "src/domain/plan.rs:3: `crate::store` (domain → store) breaks \"domain never \
              imports anything but clock\""
            ]
        );
    }

    #[test]
    fn use_groups_the_binary_super_and_named_crates_are_imports_comments_and_strings_are_not() {
        let sources = files(&[
            (
                "obs/gauges.rs",
                "use crate::{clock, cycle::CycleResult};\n\
                 // use crate::store::Backlog;\n\
                 /* crate::relay */ const S: &str = \"crate::report::x\";\n\
                 const C: char = '{';\n\
                 mod tests {\n    use super::super::super::ops::Paused;\n    use super::*;\n}\n\
                 fn f() { rdkafka::config::ClientConfig::new(); }\n",
            ),
            ("main.rs", "use booking_expire::app;\n"),
            ("app.rs", ""),
            ("clock.rs", ""),
            ("cycle.rs", ""),
            ("ops/mod.rs", ""),
        ]);
        let never = rules(&[
            "obs never imports cycle relay report ops store",
            "anything but kafka never imports rdkafka",
            "anything but main, config, reference never imports app",
            "main never imports app",
        ]);
        assert_eq!(
            violations(&sources, &never, &[]),
            [
                "src/main.rs:1: `booking_expire::app` (main → app) breaks \"main never imports app\"",
                "src/obs/gauges.rs:1: `crate::{cycle, …}` (obs → cycle) breaks \"obs never \
                 imports cycle relay report ops store\"",
                "src/obs/gauges.rs:6: `super::super::super::ops` (obs → ops) breaks \"obs never \
                 imports cycle relay report ops store\"",
                "src/obs/gauges.rs:9: `rdkafka::` (obs → rdkafka) breaks \"anything but kafka \
                 never imports rdkafka\"",
            ]
        );
    }

    #[test]
    fn a_cycle_is_named_once_with_where_each_room_imports_the_next() {
        let sources = files(&[
            ("ops/mod.rs", "use crate::report::format;\n"),
            ("report/mod.rs", "\nuse crate::ops::pause::Paused;\n"),
        ]);
        let never = rules(&["no import cycles"]);
        assert_eq!(
            violations(&sources, &never, &[]),
            [
                "ops → report → ops breaks \"no import cycles\": ops → report at \
              src/ops/mod.rs:1: `crate::report`; report → ops at src/report/mod.rs:2: \
              `crate::ops`"
            ]
        );
        // While one of its edges is pending, the cycle is too.
        let pending = rules(&["report never imports ops"]);
        assert!(violations(&sources, &never, &pending).is_empty());
    }

    #[test]
    fn sql_outside_its_room_is_found_in_string_literals() {
        let sources = files(&[
            (
                "cycle.rs",
                "fn f() { c.batch_execute(\"COMMIT AND CHAIN\"); }\n",
            ),
            ("store/outbox.rs", "const Q: &str = \"SELECT 1\";\n"),
            (
                "cli.rs",
                "/// SELECT in a comment\nconst H: &str = \"select rows\";\n",
            ),
        ]);
        let never = rules(&["anything but store never holds SQL"]);
        assert_eq!(
            violations(&sources, &never, &[]),
            [
                "src/cycle.rs:1: `\"COMMIT AND CHAIN…\"` (cycle → SQL) breaks \"anything but \
              store never holds SQL\""
            ]
        );
    }

    #[test]
    fn a_line_that_is_no_rule_is_refused() {
        assert!(Rule::parse("domain may import store").is_err());
        assert_eq!(
            Rule::parse("anything but main config never imports app")
                .unwrap()
                .kind,
            Kind::Never {
                subject: Names::AllBut(["main", "config"].map(str::to_owned).into()),
                object: Names::Only(["app"].map(str::to_owned).into()),
            }
        );
    }
}
