//! The imports of one file: its paths into other rooms (`crate::x`, `use crate::{…}`,
//! the binary's `booking_expire::x`, a member crate's `booking_expire_x::`, a `super::`
//! that leaves the room), into the external crates the rules name, into a room's
//! `driver` module (`ROOM::driver`, a member crate's re-exported drivers), and its
//! string literals of SQL.

use std::collections::BTreeSet;

use crate::source::{Token, tokens};

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

/// One path into another room or crate, or a string literal of SQL.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Use {
    pub line: usize,
    /// The room or crate the path reaches (`"SQL"` for a literal of SQL).
    pub target: String,
    /// The path as written, up to the name of the room (or the literal's opening).
    pub text: String,
}

/// The module path of the file `path` (relative to `src/`): `relay/settle.rs` is
/// `["relay", "settle"]`, `store/mod.rs` is `["store"]`, `main.rs` is `["main"]`.
pub(super) fn module_of(path: &str) -> Vec<String> {
    let path = path.trim_end_matches(".rs");
    let mut parts: Vec<String> = path.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The first names of each item of the `use` group opening at `tokens[i]` (`{`).
fn group_heads(tokens: &[(usize, Token)], mut i: usize) -> Vec<(usize, String)> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    while i < tokens.len() {
        match &tokens[i].1 {
            Token::Punct('{') => {
                depth += 1;
                item_start = depth == 1;
            }
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Token::Punct(',') if depth == 1 => item_start = true,
            Token::Ident(name) if depth == 1 && item_start => {
                heads.push((tokens[i].0, name.clone()));
                item_start = false;
            }
            _ => {}
        }
        i += 1;
    }
    heads
}

/// The paths of the file `path` (relative to `src/`) into other rooms (its `crate::`
/// and `super::` paths into `rooms`, a member crate's library by its name, in a path
/// or a `use … as`, into `members`), into the crates in `crates`, and its literals of
/// SQL.
pub(super) fn uses_of(
    path: &str,
    source: &str,
    rooms: &BTreeSet<String>,
    members: &BTreeSet<String>,
    crates: &BTreeSet<String>,
) -> Vec<Use> {
    let module = module_of(path);
    let room = module[0].clone();
    let tokens = tokens(source);
    let mut uses = Vec::new();
    // The inline modules (`mod tests {`) open around the current token: their depths.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0;
    let ident = |i: usize| match tokens.get(i) {
        Some((_, Token::Ident(name))) => Some(name.as_str()),
        _ => None,
    };
    let is = |i: usize, t: &Token| tokens.get(i).is_some_and(|(_, x)| x == t);
    // A path into `target`, when that is another room.
    let reach = |uses: &mut Vec<Use>, line: usize, target: &str, text: String| {
        if target != room && rooms.contains(target) {
            uses.push(Use {
                line,
                target: target.to_owned(),
                text,
            });
        }
    };
    // Whether the `::` at `tokens[i]` opens a room's `driver` module (`…::driver`, or
    // `…::{driver, …}`): the drivers a member crate re-exports for the tests.
    let driver_at = |i: usize| {
        is(i, &Token::Path)
            && (ident(i + 1) == Some("driver")
                || is(i + 1, &Token::Punct('{'))
                    && group_heads(&tokens, i + 1)
                        .iter()
                        .any(|(_, head)| head == "driver"))
    };
    let driver_use = |line: usize, room: &str, text: String| Use {
        line,
        target: format!("{room}::driver"),
        text: format!("{text}::driver"),
    };
    for i in 0..tokens.len() {
        let (line, token) = &tokens[i];
        let after_path = i > 0 && is(i - 1, &Token::Path);
        match token {
            Token::Punct('{') => {
                if i >= 2 && ident(i - 2) == Some("mod") && ident(i - 1).is_some() {
                    inline.push(depth);
                }
                depth += 1;
            }
            Token::Punct('}') => {
                depth -= 1;
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            Token::Str(text) => {
                let text = text.trim_start();
                if SQL_STARTS.iter().any(|s| text.starts_with(s)) {
                    let opening: String = text.chars().take(30).collect();
                    uses.push(Use {
                        line: *line,
                        target: "SQL".to_owned(),
                        text: format!("\"{opening}…\""),
                    });
                }
            }
            Token::Ident(name)
                if !after_path && (is(i + 1, &Token::Path) || ident(i + 1) == Some("as")) =>
            {
                let root = match name.as_str() {
                    "crate" => true,
                    "booking_expire" => room == "main",
                    _ => false,
                };
                if root {
                    if let Some(next) = ident(i + 2) {
                        reach(&mut uses, *line, next, format!("{name}::{next}"));
                        if next != room && rooms.contains(next) && driver_at(i + 3) {
                            uses.push(driver_use(*line, next, format!("{name}::{next}")));
                        }
                    } else if is(i + 2, &Token::Punct('{')) {
                        for (l, head) in group_heads(&tokens, i + 2) {
                            reach(&mut uses, l, &head, format!("{name}::{{{head}, …}}"));
                        }
                    }
                } else if name == "super" {
                    let mut climbs = 1;
                    while ident(i + 2 * climbs) == Some("super")
                        && is(i + 2 * climbs + 1, &Token::Path)
                    {
                        climbs += 1;
                    }
                    let here = module.len() + inline.len();
                    if climbs >= here
                        && let Some(next) = ident(i + 2 * climbs)
                    {
                        let written = "super::".repeat(climbs);
                        reach(&mut uses, *line, next, format!("{written}{next}"));
                    }
                } else if let Some(member) = name.strip_prefix("booking_expire_")
                    && members.contains(member)
                {
                    // A member crate by its library's name: its room.
                    if member != room {
                        uses.push(Use {
                            line: *line,
                            target: member.to_owned(),
                            text: format!("{name}::"),
                        });
                        if driver_at(i + 1) {
                            uses.push(driver_use(*line, member, name.clone()));
                        }
                    }
                } else if crates.contains(name) {
                    uses.push(Use {
                        line: *line,
                        target: name.clone(),
                        text: format!("{name}::"),
                    });
                }
            }
            _ => {}
        }
    }
    uses
}
