//! The workspace's own source, read by tests that hold rules about it (the import
//! rules in `architecture`, the log vocabulary in `obs::fields`): the files of `src/`
//! and of every member crate's `crates/NAME/src/`, and a tokenizer that knows just
//! enough Rust to tell code from comments and literals.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace's root: cargo's `CARGO_MANIFEST_DIR` when it runs the tests (the
/// checkout they run in), else the one they were built in. A test binary that cargo
/// finds fresh in a target directory shared by two checkouts keeps the first's path.
pub fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
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

/// Every `.rs` file under `dir`, by its path relative to `root`.
pub fn read_sources(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read_sources(root, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            files.insert(relative, fs::read_to_string(&path).unwrap());
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    Ident(String),
    Str(String),
    Punct(char),
    /// `::`
    Path,
}

/// The tokens of `source` that matter here, with their lines: comments dropped, string
/// and char literals read whole (so a brace or a path inside one is no code).
pub fn tokens(source: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            '/' if at(i + 1) == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == '*' => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if chars[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => {
                let start_line = line;
                let mut text = String::new();
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        text.push(chars[i]);
                        i += 1;
                    }
                    if at(i) == '\n' {
                        line += 1;
                    }
                    text.push(at(i));
                    i += 1;
                }
                i += 1;
                out.push((start_line, Token::Str(text)));
            }
            'r' if at(i + 1) == '"' || (at(i + 1) == '#' && matches!(at(i + 2), '"' | '#')) => {
                let start_line = line;
                let mut hashes = 0;
                i += 1;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1;
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let rest: String = chars[i..].iter().collect();
                let len = rest.find(&close).unwrap_or(rest.len());
                let text = &rest[..len];
                line += text.matches('\n').count();
                i += text.chars().count() + close.chars().count();
                out.push((start_line, Token::Str(text.to_owned())));
            }
            '\'' => {
                // A char literal ('x', '\n', '{'), or a lifetime ('a).
                if at(i + 1) == '\\' {
                    i += 3;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if at(i + 2) == '\'' {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            ':' if at(i + 1) == ':' => {
                out.push((line, Token::Path));
                i += 2;
            }
            c if c.is_alphanumeric() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push((line, Token::Ident(chars[start..i].iter().collect())));
            }
            c if c.is_whitespace() => i += 1,
            c => {
                out.push((line, Token::Punct(c)));
                i += 1;
            }
        }
    }
    out
}
