//! The URLs of a test's servers, rewritten: the same server with another database or
//! another user. Plain text work, below the harness's databases and its record of them.

/// Replaces the database name of a URL (`…/postgres` → `…/name`), keeping the query.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..]
        .find('/')
        .map(|i| i + scheme_end)
        .unwrap_or(base.len());
    format!("{}/{name}{query}", &base[..path_start])
}

/// Replaces the user of a URL (`postgres://old@host/db` → `postgres://new@host/db`).
pub fn with_user(url: &str, user: &str) -> String {
    let scheme_end = url.find("://").map(|i| i + 3).expect("a URL");
    let rest = &url[scheme_end..];
    let host = rest.find('@').map_or(rest, |at| &rest[at + 1..]);
    format!("{}{user}@{host}", &url[..scheme_end])
}
