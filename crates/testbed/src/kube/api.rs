//! A small client of the Kubernetes API: one HTTP/1.0 request over TLS (so the answer
//! is never chunked and ends with the connection), the CA of the control plane
//! trusted, a bearer token sent. Enough for the tests and the readiness checks: they
//! send YAML or JSON as the API takes it and read JSON back; the `Warning` headers the
//! server sends (deprecations, Pod Security's "would violate") are kept apart.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use native_tls::{Certificate, TlsConnector};

/// One answer of the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The text of each `Warning` header (RFC 7234's `299 - "text"`: the text alone).
    pub warnings: Vec<String>,
    pub body: String,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Talks to one API server as one user.
#[derive(Clone)]
pub struct Api {
    /// `127.0.0.1:P`.
    addr: String,
    token: String,
    tls: TlsConnector,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").field("addr", &self.addr).finish()
    }
}

impl Api {
    /// A client of `https://addr` (its certificate signed by the CA in `ca`, for
    /// `localhost` or 127.0.0.1) sending `token`.
    pub fn new(addr: &str, ca: &Path, token: &str) -> crate::Result<Api> {
        let pem = std::fs::read(ca)
            .map_err(|e| crate::Error::Server(format!("{}: {e}", ca.display())))?;
        let ca = Certificate::from_pem(&pem)
            .map_err(|e| crate::Error::Server(format!("the CA: {e}")))?;
        let tls = TlsConnector::builder()
            .add_root_certificate(ca)
            .build()
            .map_err(|e| crate::Error::Server(format!("a TLS connector: {e}")))?;
        Ok(Api {
            addr: addr.to_owned(),
            token: token.to_owned(),
            tls,
        })
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> crate::Result<Response> {
        self.request("GET", path, None, "")
    }

    /// `POST path` of `body`, of `content_type` (`application/json`, `application/yaml`).
    pub fn post(&self, path: &str, content_type: &str, body: &str) -> crate::Result<Response> {
        self.request("POST", path, Some(content_type), body)
    }

    /// `PATCH path` of `body`: server-side apply is `application/apply-patch+yaml`.
    pub fn patch(&self, path: &str, content_type: &str, body: &str) -> crate::Result<Response> {
        self.request("PATCH", path, Some(content_type), body)
    }

    /// `DELETE path`.
    pub fn delete(&self, path: &str) -> crate::Result<Response> {
        self.request("DELETE", path, None, "")
    }

    /// One request; an error only when no answer came (connection, TLS, timeout).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &str,
    ) -> crate::Result<Response> {
        let what = |e: &dyn std::fmt::Display| {
            crate::Error::Server(format!("{method} https://{}{path}: {e}", self.addr))
        };
        let tcp = TcpStream::connect(&self.addr).map_err(|e| what(&e))?;
        tcp.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| what(&e))?;
        let mut s = self.tls.connect("localhost", tcp).map_err(|e| what(&e))?;
        let mut head = format!(
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Accept: application/json\r\nContent-Length: {}\r\n",
            self.addr,
            self.token,
            body.len()
        );
        if let Some(t) = content_type {
            head.push_str(&format!("Content-Type: {t}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).map_err(|e| what(&e))?;
        s.write_all(body.as_bytes()).map_err(|e| what(&e))?;
        let mut raw = Vec::new();
        // Go's server ends an HTTP/1.0 answer by closing without a TLS close_notify at
        // times: what was read counts.
        if let Err(e) = s.read_to_end(&mut raw)
            && raw.is_empty()
        {
            return Err(what(&e));
        }
        parse(&String::from_utf8_lossy(&raw)).ok_or_else(|| what(&"no HTTP answer"))
    }
}

/// The status, the warnings and the body of a raw HTTP answer.
fn parse(raw: &str) -> Option<Response> {
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let warnings = lines
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("warning"))
        .map(|(_, v)| warning_text(v.trim()))
        .collect();
    Some(Response {
        status,
        warnings,
        body: body.to_owned(),
    })
}

/// `299 - "text"` → `text`; anything else as it is.
fn warning_text(value: &str) -> String {
    value
        .strip_prefix("299 - ")
        .and_then(|v| v.strip_prefix('"'))
        .and_then(|v| v.strip_suffix('"'))
        .map_or_else(|| value.to_owned(), |t| t.replace("\\\"", "\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_gives_its_status_its_warnings_and_its_body() {
        let raw = "HTTP/1.0 201 Created\r\nContent-Type: application/json\r\n\
                   Warning: 299 - \"would violate PodSecurity \\\"restricted:latest\\\"\"\r\n\
                   warning: 299 - \"unknown field\"\r\n\r\n{\"kind\":\"Job\"}";
        assert_eq!(
            parse(raw),
            Some(Response {
                status: 201,
                warnings: vec![
                    "would violate PodSecurity \"restricted:latest\"".into(),
                    "unknown field".into()
                ],
                body: "{\"kind\":\"Job\"}".into(),
            })
        );
        assert_eq!(parse("garbage"), None);
    }
}
