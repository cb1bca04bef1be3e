//! The rules between the application's rooms that neither the crates' manifests nor
//! privacy can hold, written here in code, and no circle of imports anywhere.
//!
//! A room is a top-level module of the application (`src/x.rs` or `src/x/`; `main` is
//! the binary) or a member crate (`crates/x/`); the kafka crate and its adapter
//! `src/kafka.rs` are the one room `kafka`. A file imports a room when one of its paths
//! ends in a module of it ([`crate::modules`]), an outside crate by its name (`clap`),
//! and a member crate's door for the tests (its `driver` or `testing` module) as
//! `NAME::driver` or `NAME::testing`. A string literal that opens
//! with an SQL statement is SQL. The circles are those between files, in every crate
//! and the integration tests, and between the modules under each module (its own file
//! and each child's subtree of files): the rooms at the top.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use crate::circles::{Edges, circles};
use crate::modules::{self, Target, Workspace};
use crate::source;

/// Some rooms: those named, or every room but those named (names of outside crates and
/// the members' doors for the tests are never in it).
#[derive(Clone, Copy)]
enum Rooms {
    Only(&'static [&'static str]),
    AllBut(&'static [&'static str]),
}

use Rooms::{AllBut, Only};

impl Rooms {
    fn has(self, name: &str, rooms: &BTreeSet<String>) -> bool {
        match self {
            Only(names) => names.contains(&name),
            AllBut(but) => rooms.contains(name) && !but.contains(&name),
        }
    }
}

/// Subject never imports object, and why.
const NEVER: &[(Rooms, Rooms, &str)] = &[
    (
        Only(&["shutdown"]),
        AllBut(&[]),
        "a leaf: everything may ask it",
    ),
    (
        Only(&["clock"]),
        AllBut(&["shutdown"]),
        "a Driver hands a run its clocks and the shutdown handle",
    ),
    (
        Only(&["kafka"]),
        AllBut(&["exit", "shutdown"]),
        "the adapter maps the crate's errors and answers its Stop",
    ),
    (
        Only(&["obs"]),
        Only(&["cycle", "relay", "report", "ops", "store", "kafka", "app"]),
        "obs receives plain figures and its settings from config",
    ),
    (
        Only(&["cycle"]),
        Only(&["kafka"]),
        "an outage of Kafka must not stop bookings from expiring",
    ),
    (
        AllBut(&["app"]),
        Only(&["cycle", "relay"]),
        "only app runs them; reports use the decision",
    ),
    (
        AllBut(&["main", "config"]),
        Only(&["app"]),
        "app runs a resolved command",
    ),
    (
        AllBut(&["main", "cli", "config"]),
        Only(&["clap", "clap_complete", "clap_mangen"]),
        "clap stays at the edge",
    ),
    (
        AllBut(&["main", "config"]),
        Only(&["cli"]),
        "clap's types stop at config",
    ),
    (
        Only(&["ops"]),
        Only(&["report"]),
        "what reports and operator commands share gets a room both import",
    ),
    (
        Only(&["report"]),
        Only(&["ops"]),
        "what reports and operator commands share gets a room both import",
    ),
    (
        Only(&["cycle", "relay"]),
        Only(&["ops"]),
        "the checks every writing command makes go to a room below both",
    ),
    (
        AllBut(&[]),
        Only(&["store::testing", "kafka::driver"]),
        "the re-exported drivers and the store's test door are the integration tests' own",
    ),
];

/// The rooms whose string literals may be SQL: the store (SQL and transaction control
/// live there) and this crate (its list of SQL's first words).
const SQL_IN: &[&str] = &["store", "layout"];

/// The circles known today, each being removed in a change of its own, by their files
/// (modules by their root file): a circle all of whose files one entry lists is let
/// pass. Delete an entry once its change has landed.
const BEING_REMOVED: &[&[&str]] = &[];

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

/// The room of a file: `src/x.rs` and `src/x/` are `x`, `src/main.rs` is `main`,
/// `src/lib.rs` is `lib`, `crates/x/src/` is `x`; none for the integration tests.
fn room_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("src/").or_else(|| {
        path.strip_prefix(source::CRATES)
            .and_then(|p| p.strip_prefix('/'))
    })?;
    let first = rest.split('/').next().unwrap_or(rest);
    Some(first.trim_end_matches(".rs").to_owned())
}

/// What each file imports: room, outside crate or a member's door for the tests
/// (`NAME::driver`, `NAME::testing`) → (line, path).
fn imports_of(w: &Workspace) -> BTreeMap<String, BTreeMap<String, (usize, String)>> {
    let mut out: BTreeMap<String, BTreeMap<String, (usize, String)>> = BTreeMap::new();
    for import in &w.imports {
        let mut targets = Vec::new();
        match &import.target {
            Target::File {
                file, krate, door, ..
            } => {
                if let Some(door) = door {
                    let member = krate.trim_start_matches("booking_expire_");
                    targets.push(format!("{member}::{door}"));
                }
                targets.extend(room_of(file));
            }
            Target::External(name) => targets.push(name.clone()),
        }
        let place = (import.line, import.text.clone());
        for target in targets {
            let first = out
                .entry(import.file.clone())
                .or_default()
                .entry(target)
                .or_insert_with(|| place.clone());
            if place < *first {
                *first = place.clone();
            }
        }
    }
    out
}

/// The string literals of `text` that open with an SQL statement: (line, opening).
fn sql_of(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for seq in source::sequences(source::tokens(text).expect("Rust")) {
        for tree in &seq {
            let proc_macro2::TokenTree::Literal(literal) = tree else {
                continue;
            };
            let Some(text) = source::string_of(literal) else {
                continue;
            };
            let text = text.trim_start();
            if SQL_STARTS.iter().any(|s| text.starts_with(s)) {
                let opening: String = text.chars().take(30).collect();
                found.push((source::line_of(tree), opening));
            }
        }
    }
    found.sort();
    found
}

/// What breaks the rooms' rules in `files`, one message each.
fn broken_rules(files: &BTreeMap<String, String>, w: &Workspace) -> Vec<String> {
    let rooms: BTreeSet<String> = files
        .keys()
        .filter_map(|f| room_of(f))
        .filter(|r| r != "lib")
        .collect();
    let imports = imports_of(w);
    let mut found = Vec::new();
    for (file, text) in files {
        let Some(room) = room_of(file).filter(|r| r != "lib") else {
            continue;
        };
        for (target, (line, path)) in imports.get(file).into_iter().flatten() {
            for (subject, object, why) in NEVER {
                if *target != room && subject.has(&room, &rooms) && object.has(target, &rooms) {
                    found.push(format!(
                        "{file}:{line}: `{path}`: {room} imports {target}, which it never \
                         may: {why}"
                    ));
                }
            }
        }
        if !SQL_IN.contains(&room.as_str()) {
            for (line, opening) in sql_of(text) {
                found.push(format!(
                    "{file}:{line}: \"{opening}…\": SQL outside the store"
                ));
            }
        }
    }
    found
}

/// Every circle of imports in `w`: between files, and between the modules under each
/// module, as messages, but those whose files one entry of `allowed` lists.
fn circles_in(w: &Workspace, allowed: &[&[&str]]) -> Vec<String> {
    let mut files = Edges::new();
    // Per module (crate and path), the edges between its file and its children.
    let mut levels: BTreeMap<(String, Vec<String>), Edges> = BTreeMap::new();
    for import in &w.imports {
        let Target::File {
            file: to,
            module: false,
            ..
        } = &import.target
        else {
            continue;
        };
        if *to == import.file || import.reexport {
            continue;
        }
        let place = format!("{}:{} `{}`", import.file, import.line, import.text);
        files
            .entry(import.file.clone())
            .or_default()
            .entry(to.clone())
            .or_insert_with(|| place.clone());
        let (ka, a) = &w.module_of[&import.file];
        let (kb, b) = &w.module_of[to];
        let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        if ka != kb
            || (common == a.len() && common + 1 == b.len())
            || (common == b.len() && common + 1 == a.len())
        {
            // Another crate, or a module and its own child: seen between files.
            continue;
        }
        let node = |p: &[String]| p[..p.len().min(common + 1)].join("::");
        levels
            .entry((ka.clone(), a[..common].to_vec()))
            .or_default()
            .entry(node(a))
            .or_default()
            .entry(node(b))
            .or_insert(place);
    }
    let file_of = |krate: &str, node: &str| -> String {
        let path: Vec<String> = node
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        w.module_of
            .iter()
            .find(|(_, (k, p))| k == krate && *p == path)
            .map(|(f, _)| f.clone())
            .unwrap_or_default()
    };
    let mut found = Vec::new();
    let mut report = |circle: Vec<String>, edges: &Edges, names: Vec<String>, what: &str| {
        if allowed
            .iter()
            .any(|known| names.iter().all(|n| known.contains(&n.as_str())))
        {
            return;
        }
        let places: Vec<&str> = circle
            .windows(2)
            .map(|p| edges[&p[0]][&p[1]].as_str())
            .collect();
        found.push(format!(
            "a circle of {what}: {}: {}",
            circle.join(" → "),
            places.join("; ")
        ));
    };
    for circle in circles(&files) {
        report(circle.clone(), &files, circle, "files");
    }
    for ((krate, _), edges) in &levels {
        for circle in circles(edges) {
            let names: Vec<String> = circle.iter().map(|n| file_of(krate, n)).collect();
            // A circle of single files is one of files too, reported above.
            let subtrees = circle.iter().any(|n| {
                let prefix = format!("{n}::");
                w.module_of
                    .values()
                    .any(|(k, p)| k == krate && p.join("::").starts_with(&prefix))
            });
            if subtrees {
                report(circle.clone(), edges, names, &format!("modules of {krate}"));
            }
        }
    }
    found
}

/// The crates the domain may list: it is pure (no I/O, no clock, no log), so that every
/// layer may import it and time and ids come in as arguments.
const DOMAIN_LISTS: &[&str] = &["chrono", "serde", "serde_json", "uuid"];

/// The names of the dependencies (of any kind) a `Cargo.toml` lists.
fn listed(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line.trim_matches(['[', ']']).ends_with("dependencies");
        } else if in_deps
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once('=')
        {
            names.push(name.trim().to_owned());
        }
    }
    names
}

#[test]
fn the_domain_lists_only_pure_crates() {
    let path = source::root().join("crates/domain/Cargo.toml");
    let manifest = std::fs::read_to_string(path).unwrap();
    let impure: Vec<String> = listed(&manifest)
        .into_iter()
        .filter(|name| !DOMAIN_LISTS.contains(&name.as_str()))
        .collect();
    assert!(
        impure.is_empty(),
        "crates/domain/Cargo.toml lists {impure:?}: the domain is pure and lists only \
         {DOMAIN_LISTS:?}"
    );
    let toml = "[package]\nname = \"x\"\n[dependencies]\nchrono = { workspace = true }\n\
                # log = 1\n[dev-dependencies]\ntokio = \"1\"\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n";
    assert_eq!(listed(toml), ["chrono", "tokio", "libc"]);
}

/// The workspace's source (`src/`, `crates/*/src/`) and its modules, read once: the
/// rooms and their rules.
fn workspace() -> &'static (BTreeMap<String, String>, Workspace) {
    static READ: OnceLock<(BTreeMap<String, String>, Workspace)> = OnceLock::new();
    READ.get_or_init(|| {
        let files = source::files();
        let w = modules::read(&files);
        (files, w)
    })
}

/// Every crate of the workspace, read once: the source's, the integration tests'
/// (`tests/`, `crates/*/tests/`) and the build scripts', for the circles.
fn every_crate() -> &'static Workspace {
    static READ: OnceLock<Workspace> = OnceLock::new();
    READ.get_or_init(|| modules::read(&source::all_files()))
}

#[test]
fn the_rooms_keep_their_rules() {
    let (files, w) = workspace();
    let broken = broken_rules(files, w);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn no_circle_of_imports_between_files_or_modules() {
    let found = circles_in(every_crate(), BEING_REMOVED);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter()
            .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
            .collect()
    }

    /// The store's circle as it stands: error.rs names DbRejection through
    /// expiration's re-export, expiration calls error::fail and schema::status_type,
    /// schema names error. No two files import each other; the modules do.
    fn store_circle() -> BTreeMap<String, String> {
        files(&[
            (
                "crates/store/src/lib.rs",
                "mod error;\nmod expiration;\nmod schema;\npub use error::fail;\n",
            ),
            (
                "crates/store/src/error.rs",
                "use super::expiration::DbRejection;\npub fn fail(_: DbRejection) {}\n",
            ),
            (
                "crates/store/src/expiration/mod.rs",
                "mod write;\npub use write::DbRejection;\n\
                 pub fn prepare() {\n    crate::error::fail(todo!());\n    crate::schema::status_type();\n}\n",
            ),
            (
                "crates/store/src/expiration/write.rs",
                "pub struct DbRejection;\n",
            ),
            (
                "crates/store/src/schema.rs",
                "use crate::error;\npub fn status_type() {\n    error::fail(todo!());\n}\n",
            ),
        ])
    }

    #[test]
    fn a_circle_of_modules_through_a_re_export_is_found_unless_allowed() {
        let w = modules::read(&store_circle());
        assert_eq!(
            circles_in(&w, &[]),
            [
                "a circle of modules of booking_expire_store: error → expiration → error: \
                 crates/store/src/error.rs:1 `super::expiration::DbRejection`; \
                 crates/store/src/expiration/mod.rs:4 `crate::error::fail`",
                "a circle of modules of booking_expire_store: error → expiration → schema → \
                 error: crates/store/src/error.rs:1 `super::expiration::DbRejection`; \
                 crates/store/src/expiration/mod.rs:5 `crate::schema::status_type`; \
                 crates/store/src/schema.rs:3 `error::fail`",
            ]
        );
        let allowed: &[&[&str]] = &[&[
            "crates/store/src/error.rs",
            "crates/store/src/expiration/mod.rs",
            "crates/store/src/schema.rs",
        ]];
        assert!(circles_in(&w, allowed).is_empty());
    }

    #[test]
    fn a_circle_of_files_is_found_and_a_re_export_is_none() {
        let w = modules::read(&files(&[
            (
                "src/lib.rs",
                "mod a;\nmod b;\npub use a::A;\npub use b::B;\n",
            ),
            ("src/a.rs", "pub struct A(crate::B);\n"),
            (
                "src/b.rs",
                "pub struct B;\nfn f() -> crate::A {\n    todo!()\n}\n",
            ),
        ]));
        assert_eq!(
            circles_in(&w, &[]),
            [
                "a circle of files: src/a.rs → src/b.rs → src/a.rs: src/a.rs:1 `crate::B`; \
              src/b.rs:2 `crate::A`"
            ]
        );
    }

    #[test]
    fn a_circle_inside_a_test_crate_is_found() {
        let w = modules::read(&files(&[
            ("tests/it/main.rs", "mod common;\nmod relay;\n"),
            (
                "tests/it/common/mod.rs",
                "mod database;\nmod process;\npub use database::*;\n",
            ),
            (
                "tests/it/common/database.rs",
                "pub struct TestDb;\nfn f() {\n    super::process::run();\n}\n",
            ),
            (
                "tests/it/common/process.rs",
                "pub fn run() {}\nfn g(_: crate::common::TestDb) {}\n",
            ),
            ("tests/it/relay.rs", "use crate::common::TestDb;\n"),
            ("crates/kafka/src/lib.rs", "pub struct Producer;\n"),
            ("crates/kafka/tests/wire.rs", "mod a;\nmod b;\n"),
            (
                "crates/kafka/tests/wire/a.rs",
                "pub fn a() {\n    super::b::b();\n}\n",
            ),
            (
                "crates/kafka/tests/wire/b.rs",
                "pub fn b() {\n    super::a::a();\n}\n",
            ),
        ]));
        assert_eq!(
            circles_in(&w, &[]),
            [
                "a circle of files: crates/kafka/tests/wire/a.rs → \
                 crates/kafka/tests/wire/b.rs → crates/kafka/tests/wire/a.rs: \
                 crates/kafka/tests/wire/a.rs:2 `super::b::b`; \
                 crates/kafka/tests/wire/b.rs:2 `super::a::a`",
                "a circle of files: tests/it/common/database.rs → \
                 tests/it/common/process.rs → tests/it/common/database.rs: \
                 tests/it/common/database.rs:3 `super::process::run`; \
                 tests/it/common/process.rs:2 `crate::common::TestDb`",
            ]
        );
    }

    #[test]
    fn a_broken_rule_names_the_file_the_line_and_the_path() {
        let files = files(&[
            (
                "src/lib.rs",
                "pub mod cli;\npub mod cycle;\npub mod kafka;\npub use booking_expire_store as store;\n",
            ),
            (
                "src/cycle/mod.rs",
                "use crate::kafka::Producer;\nfn f() {\n    let _ = \"SELECT 1\";\n    \
                 crate::store::testing::postgres::connect();\n}\n",
            ),
            ("src/kafka.rs", "pub struct Producer;\n"),
            (
                "src/cli.rs",
                "use clap::Parser;\n// SELECT in a comment is no SQL\n",
            ),
            (
                "crates/store/src/lib.rs",
                "pub mod testing {\n    pub use postgres;\n}\npub const Q: &str = \"SELECT 1\";\n",
            ),
        ]);
        let w = modules::read(&files);
        assert_eq!(
            broken_rules(&files, &w),
            [
                "src/cycle/mod.rs:1: `crate::kafka::Producer`: cycle imports kafka, which it \
                 never may: an outage of Kafka must not stop bookings from expiring",
                "src/cycle/mod.rs:4: `crate::store::testing::postgres::connect`: cycle imports \
                 store::testing, which it never may: the re-exported drivers and the store's \
                 test door are the integration tests' own",
                "src/cycle/mod.rs:3: \"SELECT 1…\": SQL outside the store",
            ]
        );
    }
}
