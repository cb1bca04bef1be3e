//! The event contract's JSON Schemas (`contracts/`), compiled the way a consumer must
//! use them: formats (`uuid`, `date-time`) asserted, unknown formats refused.

use jsonschema::Validator;
use serde_json::Value;

/// A file of `contracts/`, parsed.
pub fn contract_json(name: &str) -> Value {
    let path = super::repo().join("contracts").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A validator that asserts formats (jsonschema only annotates them by default under
/// drafts 2019-09 and 2020-12) and refuses formats it does not know.
pub fn asserting(schema: &Value) -> Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .should_ignore_unknown_formats(false)
        .build(schema)
        .unwrap_or_else(|e| panic!("invalid schema: {e}"))
}

/// The producer (`consumer` = false) or consumer schema of contract version `major`.
pub fn contract_validator(major: u32, consumer: bool) -> Validator {
    let side = if consumer { ".consumer" } else { "" };
    asserting(&contract_json(&format!(
        "booking-expired.v{major}{side}.schema.json"
    )))
}

/// Why `v` refuses `m`, one line.
pub fn schema_errors(v: &Validator, m: &Value) -> String {
    v.iter_errors(m)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect::<Vec<_>>()
        .join("; ")
}
