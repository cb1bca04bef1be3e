//! What the server says while a migration runs (NOTICE, WARNING and the rest, raised by
//! a statement or a `DO` block's `RAISE`): gathered by the migrator's session as they
//! arrive, then logged at WARN after each statement with its file and place, in text
//! and JSON logs alike, instead of the driver's INFO line that nobody sees.

use std::sync::{Arc, Mutex};

use log::warn;

use crate::DbConfig;

/// The most notices kept between two drains; more are counted, not kept.
const KEPT: usize = 200;

/// One message of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// NOTICE, WARNING, INFO, … as the server names it (in English when `lc_messages`
    /// is not: the non-localised severity).
    pub severity: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

#[derive(Debug, Default)]
struct Kept {
    notices: Vec<Notice>,
    dropped: u64,
}

/// The notices of a session, shared with its notice callback; empty when the session
/// was opened without [`attach`].
#[derive(Debug, Clone, Default)]
pub struct Notices(Arc<Mutex<Kept>>);

impl Notices {
    /// The notices since the last drain, and how many more there were.
    pub fn drain(&self) -> (Vec<Notice>, u64) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let dropped = std::mem::take(&mut kept.dropped);
        (std::mem::take(&mut kept.notices), dropped)
    }

    fn push(&self, notice: Notice) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.notices.len() < KEPT {
            kept.notices.push(notice);
        } else {
            kept.dropped += 1;
        }
    }

    /// Logs what the server said since the last drain, at WARN, as said by `file`'s
    /// statement `statement` (`k/n`).
    pub fn log(&self, file: &str, statement: &str) {
        let (notices, dropped) = self.drain();
        for n in &notices {
            let mut text = n.message.clone();
            if let Some(detail) = &n.detail {
                text.push_str(&format!(" (detail: {detail})"));
            }
            if let Some(hint) = &n.hint {
                text.push_str(&format!(" (hint: {hint})"));
            }
            warn!(Migration = file, Statement = statement, Severity = n.severity.as_str();
                  "migrate: the server said, at {file} statement {statement}: {}: {text}", n.severity);
        }
        if dropped > 0 {
            warn!(Migration = file, Statement = statement;
                  "migrate: the server said {dropped} more things at {file} statement {statement}, not shown");
        }
    }
}

/// `cfg` with a notice callback that keeps the session's notices in the returned
/// [`Notices`].
pub fn attach(cfg: &DbConfig) -> (DbConfig, Notices) {
    let notices = Notices::default();
    let kept = notices.clone();
    let mut cfg = cfg.clone();
    cfg.conninfo.0.notice_callback(move |e| {
        kept.push(Notice {
            severity: e
                .parsed_severity()
                .map_or_else(|| e.severity().to_owned(), |s| s.to_string()),
            message: e.message().to_owned(),
            detail: e.detail().map(str::to_owned),
            hint: e.hint().map(str::to_owned),
        })
    });
    (cfg, notices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_kept_up_to_a_bound_and_drained_once() {
        let n = Notices::default();
        for i in 0..(KEPT + 5) {
            n.push(Notice {
                severity: "NOTICE".into(),
                message: format!("{i}"),
                detail: None,
                hint: None,
            });
        }
        let (kept, dropped) = n.drain();
        assert_eq!((kept.len(), dropped), (KEPT, 5));
        assert_eq!(n.drain(), (vec![], 0));
    }
}
