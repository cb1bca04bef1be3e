//! The explanation for people: every line fits 120 columns.

use super::view::Explanation;
use crate::render::{self, Table};

/// The widest actor the audit table shows, cut with `…` beyond: with the RunId by its
/// first 8 characters (as `dry-run` shows ids; `--json` has it in full), an audit row
/// fits 120 columns.
const ACTOR_WIDTH: usize = 32;

/// The report for people: every line fits 120 columns; prose wraps, the audit's RunId
/// is shortened and a long actor cut.
pub(super) fn text(e: &Explanation) -> String {
    let mut out = format!("booking {} at {}\n\n", e.booking_id, e.as_of);
    if let Some(b) = &e.booking {
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let mut t = Table::new(&["Field", "Value"]);
        for (k, v) in [
            ("status", b.status.clone()),
            ("version", b.version.to_string()),
            ("reserve_expires_at", dash(&b.reserve_expires_at)),
            ("booking_expires_at", dash(&b.booking_expires_at)),
            ("expired_at", dash(&b.expired_at)),
            ("tenant_id", b.tenant_id.to_string()),
            ("deal_id", b.deal_id.to_string()),
            ("property_object_id", b.property_object_id.to_string()),
        ] {
            t.row(vec![k.to_owned(), v]);
        }
        t.render(&mut out);
        out.push('\n');
    }
    let n = &e.next_cycle;
    if n.would_expire {
        out.push_str(&format!(
            "next cycle: WOULD EXPIRE it ({} phase)\n",
            n.phase.as_deref().unwrap_or("-")
        ));
    } else {
        out.push_str("next cycle: would NOT expire it, because\n");
        for r in &n.reasons {
            out.push_str(&render::wrap(
                &format!("- {}: {}", r.code, r.detail),
                "  ",
                "    ",
            ));
        }
    }
    for note in &n.notes {
        out.push_str(&render::wrap(&format!("note: {note}"), "  ", "    "));
    }
    if !e.audit.is_empty() {
        out.push_str("\naudit\n");
        let mut t = Table::new(&["At", "From", "To", "Version", "Actor", "RunId"]);
        for a in &e.audit {
            t.row(vec![
                a.at.clone(),
                a.from.clone(),
                a.to.clone(),
                a.version.to_string(),
                render::fit(&a.actor, ACTOR_WIDTH),
                a.run_id.map_or("-".to_owned(), render::short_id),
            ]);
        }
        t.render(&mut out);
    }
    if !e.timeline.is_empty() {
        out.push_str("\ndeal timeline\n");
        let mut t = Table::new(&["OccurredAt", "Kind", "CorrelationId"]);
        for x in &e.timeline {
            t.row(vec![
                x.occurred_at.clone(),
                x.kind.clone(),
                x.correlation_id.map_or("-".to_owned(), |r| r.to_string()),
            ]);
        }
        t.render(&mut out);
    }
    out.push_str("\noutbox\n");
    if e.outbox.is_empty() {
        out.push_str("  no outbox rows (none written, or purged after the retention)\n");
    }
    for o in &e.outbox {
        let state = match o.state {
            "published" => format!(
                "published at {} to {} partition {} offset {}",
                o.published_at.as_deref().unwrap_or("-"),
                o.topic,
                o.partition.map_or("?".to_owned(), |p| p.to_string()),
                o.offset.map_or("?".to_owned(), |p| p.to_string()),
            ),
            "failed" => format!(
                "FAILED at {} after {} attempts: {}",
                o.failed_at.as_deref().unwrap_or("-"),
                o.attempts,
                o.last_error.as_deref().unwrap_or("-")
            ),
            _ => format!(
                "pending for {} (attempts {}, failures {}{}{})",
                o.topic,
                o.attempts,
                o.failures,
                o.next_attempt_at
                    .as_deref()
                    .map_or(String::new(), |t| format!(", next attempt at {t}")),
                o.last_error
                    .as_deref()
                    .map_or(String::new(), |e| format!(", last error: {e}")),
            ),
        };
        out.push_str(&render::wrap(
            &format!("{} {}: {state}", o.id, o.r#type),
            "  ",
            "    ",
        ));
        if let Some(b) = &o.read_back {
            let line = match (b.found, b.matches, &b.error) {
                (_, _, Some(err)) => format!("read back: {err}"),
                (true, true, _) => format!(
                    "read back: the message there has ce_id {} and key {}",
                    b.ce_id.as_deref().unwrap_or("-"),
                    b.key.as_deref().unwrap_or("-")
                ),
                _ => format!(
                    "read back: MISMATCH, the message there has ce_id {}",
                    b.ce_id.as_deref().unwrap_or("(none)")
                ),
            };
            out.push_str(&render::wrap(&line, "    ", "      "));
        }
    }
    out
}
