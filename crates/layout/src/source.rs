//! The workspace's own source, read by tests that hold rules about it (this crate's,
//! the application's log vocabulary in `obs::fields`): the files of `src/` and of every
//! member crate's `crates/NAME/src/`, and their tokens as proc-macro2 reads them (the
//! lexer syn parses with), so that comments are no code and a literal is one token.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, Group, Literal, TokenStream, TokenTree};

/// The workspace's root: the first folder up from cargo's `CARGO_MANIFEST_DIR` (the
/// package whose tests run, in the checkout they run in; else the one they were built
/// in) whose `Cargo.toml` has a `[workspace]`.
pub fn root() -> PathBuf {
    let start: PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into);
    start
        .ancestors()
        .find(|dir| {
            fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|toml| toml.lines().any(|l| l.trim() == "[workspace]"))
        })
        .unwrap_or_else(|| panic!("no workspace's Cargo.toml above {}", start.display()))
        .to_path_buf()
}

/// Where the member crates live, each in a folder of its own with its `src/`.
pub const CRATES: &str = "crates";

/// The files of `src/` and `crates/*/src/`, by their path relative to the workspace's
/// root (`src/obs/log.rs`, `crates/kafka/src/producer.rs`).
pub fn files() -> BTreeMap<String, String> {
    let root = root();
    let mut files = BTreeMap::new();
    read_sources(&root, &root.join("src"), &mut files);
    for member in member_crates() {
        read_sources(
            &root,
            &root.join(CRATES).join(member).join("src"),
            &mut files,
        );
    }
    files
}

/// Every Rust file of the workspace: those of [`files`], the integration tests'
/// (`tests/`, `crates/*/tests/`) and the build scripts.
pub fn all_files() -> BTreeMap<String, String> {
    let root = root();
    let mut files = self::files();
    let mut dirs = vec![root.join("tests")];
    let mut scripts = vec![root.join("build.rs")];
    for member in member_crates() {
        dirs.push(root.join(CRATES).join(&member).join("tests"));
        scripts.push(root.join(CRATES).join(&member).join("build.rs"));
    }
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        read_sources(&root, dir, &mut files);
    }
    for script in scripts.iter().filter(|s| s.is_file()) {
        files.insert(relative(&root, script), fs::read_to_string(script).unwrap());
    }
    files
}

/// The folder names of the member crates under `crates/` (`kafka`), sorted.
pub fn member_crates() -> Vec<String> {
    let dir = root().join(CRATES);
    let mut names: Vec<String> = match fs::read_dir(&dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("Cargo.toml").is_file())
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

/// Every `.rs` file under `dir`, by its path relative to `root`.
fn read_sources(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read_sources(root, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.insert(relative(root, &path), fs::read_to_string(&path).unwrap());
        }
    }
}

/// The source's tokens as the compiler reads them, with their lines: comments dropped,
/// literals whole. `None` when `source` is no Rust.
pub fn tokens(source: &str) -> Option<TokenStream> {
    source.parse().ok()
}

/// The token sequences of `stream` that are code: the stream itself and the inside of
/// every group in it, each a flat sequence (a group stays one token in its parent's). A
/// doc comment (`#[doc = …]`, `#![doc = …]`) is no code: its attribute is left out.
pub fn sequences(stream: TokenStream) -> Vec<Vec<TokenTree>> {
    let mut out = Vec::new();
    let mut pending = vec![stream];
    while let Some(stream) = pending.pop() {
        let mut seq: Vec<TokenTree> = Vec::new();
        for tree in stream {
            if let TokenTree::Group(group) = &tree
                && group.delimiter() == Delimiter::Bracket
                && is_doc(group)
                && attribute_opens(&seq)
            {
                while matches!(seq.last(), Some(TokenTree::Punct(p)) if matches!(p.as_char(), '#' | '!'))
                {
                    seq.pop();
                }
                continue;
            }
            if let TokenTree::Group(group) = &tree {
                pending.push(group.stream());
            }
            seq.push(tree);
        }
        out.push(seq);
    }
    out
}

/// Whether the tokens before a bracket open an attribute: `#` or `#!`.
fn attribute_opens(seq: &[TokenTree]) -> bool {
    let punct = |i: usize, c: char| {
        seq.len() > i && matches!(&seq[seq.len() - 1 - i], TokenTree::Punct(p) if p.as_char() == c)
    };
    punct(0, '#') || (punct(0, '!') && punct(1, '#'))
}

fn is_doc(group: &Group) -> bool {
    matches!(group.stream().into_iter().next(), Some(TokenTree::Ident(i)) if i == "doc")
}

/// The text of a string literal (`"…"`, `r#"…"#`, `b"…"`), else `None`.
pub fn string_of(literal: &Literal) -> Option<String> {
    match syn::Lit::new(literal.clone()) {
        syn::Lit::Str(s) => Some(s.value()),
        syn::Lit::ByteStr(b) => Some(String::from_utf8_lossy(&b.value()).into_owned()),
        _ => None,
    }
}

/// The line a token starts on.
pub fn line_of(tree: &TokenTree) -> usize {
    tree.span().start().line
}
