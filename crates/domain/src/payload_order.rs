//! The payload put back in the contract's field order, as the relay sends it.

use std::borrow::Cow;

/// The payload's fields in the contract's order, every version's: each version has
/// six of them (v1 `TenantId`, v2 `DeveloperId` in its place).
pub const PAYLOAD_FIELDS: [&str; 7] = [
    "BookingId",
    "TenantId",
    "DeveloperId",
    "DealId",
    "PropertyObjectId",
    "Phase",
    "ExpiredAt",
];

/// Why it exists: `crm.outbox.payload` stays `jsonb` (other writers' contract), which drops key order.
///
/// The payload's JSON text with the contract's field order: the contract fields first,
/// in [`PAYLOAD_FIELDS`] order (whatever the version), then any other field by name;
/// compact, no spaces. Text that is not a JSON object is sent as it is.
pub fn payload_in_contract_order(text: &str) -> String {
    let Some(fields) = super::json::object_fields(text) else {
        return text.to_owned();
    };
    // Of a name given twice, the last counts (as a JSON reader that keeps one does):
    // each name's last place, found in one pass (linear in the fields).
    let mut last: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(fields.len());
    for (i, (name, _)) in fields.iter().enumerate() {
        last.insert(name.as_ref(), i);
    }
    let mut order: Vec<usize> = PAYLOAD_FIELDS
        .iter()
        .filter_map(|k| last.get(k).copied())
        .collect();
    let mut others: Vec<usize> = (0..fields.len())
        .filter(|&i| {
            let name = fields[i].0.as_ref();
            !PAYLOAD_FIELDS.contains(&name) && last.get(name) == Some(&i)
        })
        .collect();
    others.sort_by(|&a, &b| fields[a].0.cmp(&fields[b].0));
    order.extend(others);
    let mut out = String::with_capacity(text.len());
    out.push('{');
    for (n, i) in order.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        let (name, value) = &fields[i];
        match name {
            // Read from the text without an escape: it needs none.
            Cow::Borrowed(name) => {
                out.push('"');
                out.push_str(name);
                out.push('"');
            }
            Cow::Owned(name) => out.push_str(&serde_json::Value::from(name.as_str()).to_string()),
        }
        out.push(':');
        out.push_str(&super::json::compact(value));
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_is_sent_in_the_contracts_field_order() {
        // As PostgreSQL's jsonb prints it: shortest keys first.
        let stored = r#"{"Phase": "Booking", "DealId": "d", "Extra": [1, 2], "TenantId": "t", "BookingId": "b", "ExpiredAt": "e", "PropertyObjectId": "p"}"#;
        assert_eq!(
            payload_in_contract_order(stored),
            r#"{"BookingId":"b","TenantId":"t","DealId":"d","PropertyObjectId":"p","Phase":"Booking","ExpiredAt":"e","Extra":[1,2]}"#
        );
        assert_eq!(payload_in_contract_order("[1, 2]"), "[1, 2]");
        assert_eq!(payload_in_contract_order(r#"{"n": 1}"#), r#"{"n":1}"#);
    }

    #[test]
    fn a_payload_of_many_fields_is_ordered_in_one_pass_and_the_last_of_a_name_counts() {
        // 100,000 fields, each name twice: comparing every field with every other (as
        // a search per field did) would take minutes here.
        let n = 50_000;
        let mut text = String::from(r#"{"Phase": "old""#);
        for i in 0..n {
            text.push_str(&format!(r#", "f{i:06}": {i}"#));
        }
        for i in 0..n {
            text.push_str(&format!(r#", "f{i:06}": -{i}"#));
        }
        text.push_str(r#", "Phase": "Booking"}"#);
        let out = payload_in_contract_order(&text);
        let fields = super::super::json::object_fields(&out).unwrap();
        assert_eq!(fields.len(), n + 1);
        assert_eq!(fields[0].0, "Phase");
        assert_eq!(fields[0].1.get(), r#""Booking""#);
        assert_eq!(fields[1].0, "f000000");
        assert_eq!(fields[1].1.get(), "-0");
        assert_eq!(fields[n].0, format!("f{:06}", n - 1));
        assert_eq!(fields[n].1.get(), format!("-{}", n - 1));
    }
}
