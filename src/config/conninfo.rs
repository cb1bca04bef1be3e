//! The database URL or libpq key/value string, read as libpq reads it, with `sslmode`
//! and `sslrootcert` taken out (tokio-postgres rejects what it does not implement
//! itself); the rest is handed on to tokio-postgres as it was written.

use std::path::PathBuf;

use anyhow::Result;

use crate::exit::{Failure, fail};

#[derive(Debug, Default, PartialEq)]
pub(super) struct SslParams {
    pub mode: Option<String>,
    pub root_cert: Option<PathBuf>,
}

/// The URL parameters tokio-postgres understands besides the TLS ones we handle.
const KNOWN_PARAMS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "sslnegotiation",
];

/// Takes `sslmode` and `sslrootcert` out of a URL (`postgres://…?sslmode=…`) or a
/// key=value string, since tokio-postgres rejects what it does not implement itself.
/// Everything else is handed on as it was written.
pub(super) fn split_ssl_params(url: &str) -> Result<(String, SslParams)> {
    let mut ssl = SslParams::default();
    let mut take = |key: &str, value: String| -> bool {
        match key {
            "sslmode" => ssl.mode = Some(value),
            "sslrootcert" => ssl.root_cert = Some(PathBuf::from(value)),
            _ => return false,
        }
        true
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    if take(k, percent_decode(v)?) {
                        continue;
                    }
                    if !KNOWN_PARAMS.contains(&k) {
                        return Err(fail(
                            Failure::Config,
                            format!(
                                "invalid --database-url / DATABASE_URL: unknown parameter `{k}` \
                                 (known: sslmode, sslrootcert, {})",
                                KNOWN_PARAMS.join(", ")
                            ),
                        ));
                    }
                    kept.push(pair);
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for pair in conninfo_pairs(url)? {
            if !take(pair.keyword, pair.value) {
                kept.push(&url[pair.span]);
            }
        }
        kept.join(" ")
    };
    Ok((rest, ssl))
}

/// A URL query parameter's value, percent-decoded (the `url` crate's decoder); a `%`
/// not followed by two hex digits, or bytes that are not UTF-8, are refused.
fn percent_decode(s: &str) -> Result<String> {
    let bad = |what: &str| {
        fail(
            Failure::Config,
            format!("invalid --database-url / DATABASE_URL: {what} in a query parameter"),
        )
    };
    let bytes = s.as_bytes();
    let well_formed = bytes.iter().enumerate().all(|(i, b)| {
        *b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return Err(bad("bad percent-encoding"));
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| bad("a value that is not UTF-8"))
}

/// One `keyword = value` of a libpq key/value string: where it is written, its
/// keyword, and its value with the quotes and backslash escapes taken out.
#[derive(Debug, PartialEq)]
struct Pair<'a> {
    span: std::ops::Range<usize>,
    keyword: &'a str,
    value: String,
}

/// The pairs of a libpq key/value string, as libpq reads them: pairs apart by
/// whitespace, spaces allowed around `=`, a value single-quoted (keeping its spaces)
/// or bare, `\` escaping the next character in either. An error names a keyword at
/// most, never a value.
fn conninfo_pairs(text: &str) -> Result<Vec<Pair<'_>>> {
    let bad = |what: String| {
        fail(
            Failure::Config,
            format!("invalid --database-url / DATABASE_URL: {what}"),
        )
    };
    let bytes = text.as_bytes();
    let skip_space = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut pairs = Vec::new();
    let mut i = skip_space(0);
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let keyword = &text[start..i];
        i = skip_space(i);
        if bytes.get(i) != Some(&b'=') {
            // Not named: it may be a value typed without its keyword.
            return Err(bad(format!(
                "the word at character {} is not keyword=value",
                start + 1
            )));
        }
        i = skip_space(i + 1);
        let mut value = Vec::new();
        let quoted = bytes.get(i) == Some(&b'\'');
        if quoted {
            i += 1;
        }
        loop {
            match bytes.get(i) {
                None if quoted => {
                    return Err(bad(format!(
                        "the quoted value of `{keyword}` is not closed"
                    )));
                }
                None => break,
                Some(b'\'') if quoted => {
                    i += 1;
                    break;
                }
                Some(c) if !quoted && c.is_ascii_whitespace() => break,
                Some(b'\\') if i + 1 < bytes.len() => {
                    value.push(bytes[i + 1]);
                    i += 2;
                }
                Some(c) => {
                    value.push(*c);
                    i += 1;
                }
            }
        }
        pairs.push(Pair {
            span: start..i,
            keyword,
            // Cut at ASCII bytes only, so whole characters.
            value: String::from_utf8(value).expect("cut at ASCII bytes"),
        });
        i = skip_space(i);
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    #[test]
    fn ssl_params_are_taken_out_of_a_url() {
        let (rest, ssl) = split_ssl_params(
            "postgres://u:p@h:5432/db?sslmode=verify-full&connect_timeout=3&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@h:5432/db?connect_timeout=3");
        assert_eq!(
            ssl,
            SslParams {
                mode: Some("verify-full".into()),
                root_cert: Some("/etc/ca.pem".into())
            }
        );
        let (rest, ssl) = split_ssl_params("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(ssl.mode.as_deref(), Some("require"));
    }

    #[test]
    fn ssl_params_are_taken_out_of_a_key_value_string() {
        let (rest, ssl) =
            split_ssl_params("host=h user=u sslmode=verify-ca sslrootcert='/ca.pem' dbname=crm")
                .unwrap();
        assert_eq!(rest, "host=h user=u dbname=crm");
        assert_eq!(ssl.mode.as_deref(), Some("verify-ca"));
        assert_eq!(ssl.root_cert, Some(PathBuf::from("/ca.pem")));
    }

    #[test]
    fn bad_percent_encoding_is_refused() {
        assert!(split_ssl_params("postgres://u@h/db?sslrootcert=%zz").is_err());
        assert!(split_ssl_params("postgres://u@h/db?sslrootcert=%2").is_err());
        assert!(split_ssl_params("postgres://u@h/db?sslrootcert=%ff").is_err());
        let (_, ssl) = split_ssl_params("postgres://u@h/db?sslrootcert=/a+b%20c.pem").unwrap();
        assert_eq!(ssl.root_cert, Some(PathBuf::from("/a+b c.pem")));
    }

    #[test]
    fn quoted_key_value_values_keep_their_spaces_and_escapes() {
        let (rest, ssl) = split_ssl_params(
            "host=h user=u password='a  b\\'c' sslrootcert = '/etc/my certs/ca.pem' \
             sslmode=verify-full application_name=x\\ y",
        )
        .unwrap();
        assert_eq!(
            rest,
            "host=h user=u password='a  b\\'c' application_name=x\\ y"
        );
        assert_eq!(ssl.root_cert, Some(PathBuf::from("/etc/my certs/ca.pem")));
        assert_eq!(ssl.mode.as_deref(), Some("verify-full"));
        let pg = crate::store::Conninfo::from_str(&rest).unwrap();
        assert_eq!(pg.password(), Some(&b"a  b'c"[..]));
        assert_eq!(pg.application_name(), Some("x y"));
    }

    #[test]
    fn a_broken_key_value_string_is_refused_naming_the_keyword_only() {
        for (text, what) in [
            (
                "host=h password='hunter2 x",
                "the quoted value of `password` is not closed",
            ),
            (
                "host=h hunter2",
                "the word at character 8 is not keyword=value",
            ),
        ] {
            let e = format!("{:#}", split_ssl_params(text).unwrap_err());
            assert!(e.ends_with(what) && !e.contains("hunter2"), "{text}: {e}");
        }
    }
}
