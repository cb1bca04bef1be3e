//! The source and its pages: every source file of the workspace opens with a head
//! comment (`//!`) that says its concern, and every path of the repository that
//! `docs/architecture.md` cites exists.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::source;

/// The page that describes the crates, the rooms and the data's way through them.
const PAGE: &str = "docs/architecture.md";

/// The paths `page` (at `docs/`) cites, from the root: each `code` span whose first
/// part is one of `top` (the root's entries), and each relative link. A span with a
/// `*` or a `{` is a pattern, no path.
fn cited(page: &str, top: &BTreeSet<String>) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for (i, span) in page.split('`').enumerate() {
        if i % 2 == 0 || span.contains(char::is_whitespace) || span.contains(['*', '{']) {
            continue;
        }
        let first = span.split('/').next().unwrap_or(span);
        if top.contains(first) {
            paths.insert(span.to_owned());
        }
    }
    for link in page.split("](").skip(1) {
        let target = link.split(')').next().unwrap_or_default();
        let target = target.split('#').next().unwrap_or_default();
        if !target.is_empty() && !target.contains("://") {
            let path = Path::new("docs").join(target);
            let mut parts: Vec<&str> = Vec::new();
            for part in path.to_str().unwrap_or_default().split('/') {
                match part {
                    ".." => {
                        parts.pop();
                    }
                    "." => {}
                    p => parts.push(p),
                }
            }
            paths.insert(parts.join("/"));
        }
    }
    paths
}

#[test]
fn every_source_file_opens_with_a_head_comment() {
    let headless: Vec<String> = source::all_files()
        .into_iter()
        .filter(|(_, text)| !text.starts_with("//!"))
        .map(|(path, _)| path)
        .collect();
    assert!(
        headless.is_empty(),
        "these files open with no `//!` head comment saying their concern: {headless:?}"
    );
}

#[test]
fn every_path_the_architecture_page_cites_exists() {
    let root = source::root();
    let top: BTreeSet<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.') && name != "target")
        .collect();
    let page = fs::read_to_string(root.join(PAGE)).unwrap();
    let paths = cited(&page, &top);
    assert!(paths.len() > 20, "{PAGE} cites {} paths", paths.len());
    let gone: Vec<&String> = paths.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        gone.is_empty(),
        "{PAGE} cites paths that do not exist: {gone:?}"
    );
}

#[test]
fn a_cited_path_is_a_code_span_from_the_root_or_a_link() {
    let top = BTreeSet::from(["src".to_owned(), "Cargo.toml".to_owned()]);
    let page = "`src/app.rs` and `Cargo.toml`, not `run_once` nor `src/*.rs` nor \
                `a b`; [design](design.md), [up](../README.md#x), [web](https://x.org)";
    let paths: Vec<String> = cited(page, &top).into_iter().collect();
    assert_eq!(
        paths,
        ["Cargo.toml", "README.md", "docs/design.md", "src/app.rs"]
    );
}
