//! Build-time facts for `--version`: the commit the binary is built from, the release
//! it is (`RELEASE_BUILT_IN`: Cargo.toml's version for a release's build, else
//! the next minor version marked unreleased, `0.2.0-dev+<commit>`) and the schema
//! version it expects (the highest numbered file of `sql/`).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BOOKING_EXPIRE_COMMIT");
    println!("cargo:rerun-if-changed=sql");
    println!("cargo:rerun-if-changed=scripts/releases.tsv");
    // The commit: the image's build argument first (its build context has no .git),
    // then git, else unknown.
    let commit = std::env::var("BOOKING_EXPIRE_COMMIT")
        .ok()
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = Command::new("git")
                .args(["rev-parse", "HEAD"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
        .filter(|c| c.len() >= 12 && c.chars().all(|c| c.is_ascii_hexdigit()))
        .map_or_else(|| "unknown".to_owned(), |c| c[..12].to_ascii_lowercase());
    if let Some(git_dir) = git_dir() {
        // HEAD names a branch; the branch's ref moves with each commit.
        println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
        if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD"))
            && let Some(reference) = head.trim().strip_prefix("ref: ")
        {
            let common = common_dir(&git_dir);
            println!(
                "cargo:rerun-if-changed={}",
                common.join(reference).display()
            );
            println!(
                "cargo:rerun-if-changed={}",
                common.join("packed-refs").display()
            );
        }
    }
    println!("cargo:rustc-env=BOOKING_EXPIRE_COMMIT={commit}");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let releases = std::fs::read_to_string("scripts/releases.tsv").unwrap_or_default();
    println!(
        "cargo:rustc-env=RELEASE_BUILT_IN={}",
        release(&version, &commit, &releases)
    );
    let schema = std::fs::read_dir("sql")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let number = name.strip_suffix(".sql")?.split('_').next()?.to_owned();
                    number.parse::<u32>().ok()
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    println!("cargo:rustc-env=SCHEMA_VERSION_BUILT_IN={schema}");
}

/// The git directory of the checkout (`.git`, or where a worktree's `.git` file points).
fn git_dir() -> Option<std::path::PathBuf> {
    let dot_git = Path::new(".git");
    if dot_git.is_dir() {
        return Some(dot_git.to_path_buf());
    }
    let text = std::fs::read_to_string(dot_git).ok()?;
    Some(Path::new(text.trim().strip_prefix("gitdir: ")?).to_path_buf())
}

/// Where a worktree's refs live: the main repository's git directory.
fn common_dir(git_dir: &Path) -> std::path::PathBuf {
    match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(rel) => git_dir.join(rel.trim()),
        Err(_) => git_dir.to_path_buf(),
    }
}

/// What the build calls itself. Cargo.toml's `version` is the release's own only on the
/// release's commit (its line in `scripts/releases.tsv`) or before that line is written
/// (the release being made); any other commit after a release is the next one's work,
/// unreleased: `<major>.<minor + 1>.0-dev+<commit>`, never a released version.
fn release(version: &str, commit: &str, releases: &str) -> String {
    let lines: Vec<(&str, &str)> = releases
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut fields = l.split('\t');
            Some((fields.next()?.trim(), fields.next()?.trim()))
        })
        .collect();
    let released = lines.iter().any(|(v, _)| *v == version);
    let this_commit = lines
        .iter()
        .any(|(v, c)| *v == version && commit != "unknown" && c.starts_with(commit));
    if !released || this_commit {
        return version.to_owned();
    }
    let mut parts = version
        .split(['-', '+'])
        .next()
        .unwrap_or_default()
        .split('.')
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    format!("{major}.{}.0-dev+{commit}", minor + 1)
}
