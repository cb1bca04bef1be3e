//! The import graph on small sources of its own: a circle of three, a re-export that is
//! none, `super::super::`, globs, a member crate's items, what is no edge.

use std::collections::BTreeMap;

use super::super::circles::circles;
use super::*;

fn files(sources: &[(&str, &str)]) -> BTreeMap<String, String> {
    sources
        .iter()
        .map(|(p, s)| ((*p).to_owned(), (*s).to_owned()))
        .collect()
}

/// Each edge as `from -> to`.
fn edges_of(sources: &[(&str, &str)]) -> Vec<String> {
    graph(&files(sources))
        .edges()
        .into_iter()
        .flat_map(|(from, to)| to.into_keys().map(move |t| format!("{from} -> {t}")))
        .collect()
}

#[test]
fn a_circle_of_three_files_is_found_in_order() {
    let sources = [
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        (
            "src/a.rs",
            "pub struct A;\npub fn f() -> crate::b::B { todo!() }\n",
        ),
        ("src/b.rs", "use crate::c::C;\npub struct B(C);\n"),
        (
            "src/c.rs",
            "pub struct C;\nfn g() { let _ = super::a::A; }\n",
        ),
    ];
    assert_eq!(
        edges_of(&sources),
        [
            "src/a.rs -> src/b.rs",
            "src/b.rs -> src/c.rs",
            "src/c.rs -> src/a.rs"
        ]
    );
    let g = graph(&files(&sources));
    assert_eq!(
        circles(&g.edges()),
        [["src/a.rs", "src/b.rs", "src/c.rs", "src/a.rs"]]
    );
    assert_eq!(
        g.edges()["src/b.rs"]["src/c.rs"],
        (1, "crate::c::C".to_owned())
    );
}

#[test]
fn a_re_export_is_no_edge_of_its_own_and_its_users_import_the_definition() {
    let sources = [
        ("src/lib.rs", "pub mod x;\n"),
        (
            "src/x/mod.rs",
            "mod child;\nmod other;\npub use child::X;\npub use self::other::Y;\n\
             pub struct Shared;\n",
        ),
        (
            "src/x/child.rs",
            "pub struct X;\nfn f(_: super::Shared) {}\n",
        ),
        (
            "src/x/other.rs",
            "use super::X;\npub struct Y;\nfn g() -> X { crate::x::X }\n",
        ),
        (
            "src/main.rs",
            "fn main() { let _ = booking_expire::x::X; }\n",
        ),
    ];
    // mod.rs re-exports X and Y and names neither itself: child.rs → mod.rs is no
    // circle.
    assert_eq!(
        edges_of(&sources),
        [
            "src/main.rs -> src/x/child.rs",
            "src/x/child.rs -> src/x/mod.rs",
            "src/x/other.rs -> src/x/child.rs",
        ]
    );
    assert!(circles(&graph(&files(&sources)).edges()).is_empty());
    // Once mod.rs uses X itself, it imports child.rs, which imports it.
    let mut used = sources.to_vec();
    used[1].1 = "mod child;\nmod other;\npub use child::X;\npub struct Shared;\nfn own(_: X) {}\n";
    assert_eq!(
        circles(&graph(&files(&used)).edges()),
        [["src/x/child.rs", "src/x/mod.rs", "src/x/child.rs"]]
    );
}

#[test]
fn super_super_and_self_climb_the_modules_and_inline_modules_count() {
    let sources = [
        ("src/a/mod.rs", "mod b;\nmod top;\n"),
        ("src/a/b/mod.rs", "mod c;\n"),
        (
            "src/a/b/c.rs",
            "fn f() -> super::super::top::T { todo!() }\n\
             mod tests {\n    fn g() { super::super::super::top::T::new(); self::h(); }\n    \
             fn h() {}\n    use super::f;\n}\n",
        ),
        (
            "src/a/top.rs",
            "pub struct T;\nimpl T { pub fn new() -> T { T } }\n",
        ),
    ];
    assert_eq!(edges_of(&sources), ["src/a/b/c.rs -> src/a/top.rs"]);
    let g = graph(&files(&sources));
    let lines: Vec<usize> = g.named["src/a/b/c.rs"]
        .iter()
        .filter(|n| n.res == Res::Item("src/a/top.rs".to_owned()))
        .map(|n| n.line)
        .collect();
    assert_eq!(lines, [1, 3]);
}

#[test]
fn a_glob_is_an_edge_to_the_files_of_the_names_taken_from_it() {
    let sources = [
        (
            "src/p/mod.rs",
            "mod t;\nmod u;\nmod v;\npub struct P;\npub use t::Q;\n",
        ),
        (
            "src/p/t.rs",
            "use super::*;\npub struct Q;\nfn f(_: P) {}\n",
        ),
        // Nothing taken from the glob: no edge.
        ("src/p/u.rs", "use super::*;\nfn f() {}\n"),
        // Q through the parent's re-export: the file that defines it.
        (
            "src/p/v.rs",
            "use super::*;\nuse crate::k::Kind::*;\nfn f(_: Q) { assert!(matches!(g(), One)); }\n",
        ),
        (
            "src/k.rs",
            "pub enum Kind { One, Two }\npub fn g() -> Kind { Kind::One }\n",
        ),
    ];
    assert_eq!(
        edges_of(&sources),
        [
            "src/p/t.rs -> src/p/mod.rs",
            "src/p/v.rs -> src/k.rs",
            "src/p/v.rs -> src/p/t.rs"
        ]
    );
    // Once the module root uses what its child defines, the two import each other.
    let mut both = sources.to_vec();
    both[0].1 = "mod t;\nmod u;\nmod v;\npub struct P;\npub use t::Q;\nfn q() -> Q { todo!() }\n";
    assert_eq!(
        circles(&graph(&files(&both)).edges()),
        [["src/p/mod.rs", "src/p/t.rs", "src/p/mod.rs"]]
    );
}

#[test]
fn a_member_crates_files_are_files_too_through_its_re_exports() {
    let sources = [
        ("src/lib.rs", "pub use booking_expire_k as k;\nmod app;\n"),
        (
            "src/app.rs",
            "use crate::k::K;\nuse booking_expire_k::Tr as _;\nfn f(_: K) { booking_expire_k::inner::make(); }\n",
        ),
        (
            "crates/k/src/lib.rs",
            "pub mod inner;\npub use inner::{K, Tr};\n",
        ),
        (
            "crates/k/src/inner.rs",
            "pub struct K;\npub trait Tr {}\npub fn make() -> K { K }\n",
        ),
    ];
    assert_eq!(edges_of(&sources), ["src/app.rs -> crates/k/src/inner.rs"]);
}

#[test]
fn a_use_of_a_module_a_mod_declaration_and_external_paths_are_no_edges() {
    let sources = [
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "use crate::b;\nuse std::fmt;\npub struct A;\nfn f() { info!(A = 1; \"x\"); fmt::Error; }\n",
        ),
        (
            "src/b.rs",
            "use crate::a::A;\npub fn g() -> A { A }\n/// [`crate::a::A`]\nconst S: &str = \"crate::a\";\n",
        ),
    ];
    assert_eq!(edges_of(&sources), ["src/b.rs -> src/a.rs"]);
    // Named through the module it is used by, the item is an edge.
    let mut named = sources.to_vec();
    named[1].1 = "use crate::b;\npub struct A;\nfn f() { b::g(); }\n";
    assert_eq!(
        circles(&graph(&files(&named)).edges()),
        [["src/a.rs", "src/b.rs", "src/a.rs"]]
    );
}

#[test]
fn paths_in_macros_are_read_as_expressions_or_as_tokens() {
    let sources = [
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("src/a.rs", "fn f() { assert_eq!(crate::b::one(), 1); }\n"),
        ("src/b.rs", "pub fn one() -> u8 { 1 }\n"),
        (
            "src/c.rs",
            "fn f() { info!(Count = n, Rows:% = crate::b::one(); \"{}\", x); }\n",
        ),
    ];
    assert_eq!(
        edges_of(&sources),
        ["src/a.rs -> src/b.rs", "src/c.rs -> src/b.rs"]
    );
}
