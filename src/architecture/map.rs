//! The module map of `docs/architecture.md` held against the workspace's source: the
//! page lists every file of `src/` and of the member crates' `crates/NAME/src/` with
//! its role, and a file added, moved or removed without the map following fails the
//! test, naming it.
//!
//! The map is the fenced block that opens with `src/` under `## Module map`. A line
//! at column 0 that ends in `/` is a root (`src/`, `crates/`); under it an entry is a
//! line indented by two spaces per level (under 16 columns) whose first word ends in
//! `.rs` (a file) or `/` (a folder, holding the entries indented one level deeper); the
//! lines of a role that go on are indented 16 columns or more.

use std::collections::BTreeSet;

use super::PAGE;

/// The deepest an entry starts; a role's further lines start here or later.
const ROLE_COLUMN: usize = 16;

/// The files the map names, by their path from the workspace's root (`src/obs/log.rs`,
/// `crates/kafka/src/topic.rs`).
pub(super) fn files_in_map(page: &str) -> Result<BTreeSet<String>, String> {
    let section = page
        .find("## Module map")
        .ok_or_else(|| format!("{PAGE}: no ## Module map"))?;
    let open = "```\nsrc/\n";
    let start = page[section..]
        .find(open)
        .ok_or_else(|| format!("{PAGE}: the module map has no block opening with src/"))?
        + section
        + "```\n".len();
    let end = page[start..]
        .find("```")
        .ok_or_else(|| format!("{PAGE}: the module map's block is not closed"))?
        + start;
    let mut folders: Vec<String> = Vec::new();
    let mut files = BTreeSet::new();
    for line in page[start..end].lines() {
        let indent = line.len() - line.trim_start().len();
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        if indent >= ROLE_COLUMN {
            continue;
        }
        if indent == 0 && name.ends_with('/') {
            folders = vec![name.trim_end_matches('/').to_owned()];
            continue;
        }
        if indent == 0 || indent % 2 == 1 || !(name.ends_with(".rs") || name.ends_with('/')) {
            return Err(format!(
                "{PAGE}: a module map line is neither a root (a folder at column 0), an \
                 entry (a file or a folder, indented two spaces a level) nor a role's next \
                 line (indented {ROLE_COLUMN} or more): {line:?}"
            ));
        }
        let depth = indent / 2;
        if depth > folders.len() {
            return Err(format!("{PAGE}: {line:?} is deeper than its folder"));
        }
        folders.truncate(depth);
        match name.strip_suffix('/') {
            Some(folder) => folders.push(folder.to_owned()),
            None => {
                let path: Vec<&str> = folders.iter().map(String::as_str).chain([name]).collect();
                let path = path.join("/");
                if !files.insert(path.clone()) {
                    return Err(format!("{PAGE}: the module map names {path} twice"));
                }
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_map_names_every_file_of_src_and_no_other() {
        let page = std::fs::read_to_string(crate::source::root().join(PAGE)).unwrap();
        let mapped = files_in_map(&page).unwrap();
        let files: BTreeSet<String> = crate::source::files().into_keys().collect();
        let missing: Vec<&String> = files.difference(&mapped).collect();
        let gone: Vec<&String> = mapped.difference(&files).collect();
        assert!(
            missing.is_empty() && gone.is_empty(),
            "{PAGE}'s module map must list every file of src/ and crates/*/src/ with its role: \
             not in it: {missing:?}; in it but not in src/: {gone:?}"
        );
    }

    #[test]
    fn entries_nest_by_indentation_and_roles_go_on_deeper() {
        let page = "## Module map\n\n```\nsrc/\n  main.rs         the binary\n  \
                    a/              a folder\n    mod.rs        its root, a role that\n                  \
                    goes on: x.rs is no entry here\n    b/\n      c.rs        deep\n    \
                    d.rs\n  e.rs\n```\n\nsql/  not the map\n";
        let files = files_in_map(page).unwrap();
        let files: Vec<&str> = files.iter().map(String::as_str).collect();
        assert_eq!(
            files,
            [
                "src/a/b/c.rs",
                "src/a/d.rs",
                "src/a/mod.rs",
                "src/e.rs",
                "src/main.rs"
            ]
        );
        // A second root: a member crate's files, by their path from the root.
        let crates = page.replace(
            "  e.rs\n```",
            "  e.rs\ncrates/\n  k/              a crate\n    src/\n      lib.rs      its root\n```",
        );
        let files = files_in_map(&crates).unwrap();
        assert!(files.contains("crates/k/src/lib.rs") && files.contains("src/e.rs"));
        let odd = page.replace("    d.rs", "   d.rs");
        assert!(files_in_map(&odd).unwrap_err().contains("   d.rs"));
        let twice = page.replace("  e.rs", "  main.rs");
        assert!(files_in_map(&twice).unwrap_err().contains("main.rs twice"));
    }
}
