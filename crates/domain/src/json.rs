//! A JSON object read in place: its fields as (name, raw value) pairs borrowed from
//! the text, so the relay reorders a payload and reads headers without building a
//! document of its own for every row (a map, a string per name and per value).

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The fields of a JSON object in the order of its text. A name is borrowed unless it
/// holds an escape; a value is its exact text. `None` when the text is not an object.
pub fn object_fields(text: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    serde_json::from_str::<Fields>(text).ok().map(|f| f.0)
}

/// A value as compact JSON: a scalar is already (its text as written), an object or
/// an array is printed again without the spaces PostgreSQL's `jsonb` output puts in.
pub fn compact(value: &RawValue) -> Cow<'_, str> {
    let text = value.get();
    if text.starts_with(['{', '[']) {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) => Cow::Owned(v.to_string()),
            Err(_) => Cow::Borrowed(text),
        }
    } else {
        Cow::Borrowed(text)
    }
}

/// A value as header text: a string's content, anything else as compact JSON.
pub fn as_text(value: &RawValue) -> Cow<'_, str> {
    let text = value.get();
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => Cow::Borrowed(inner),
        Some(_) => serde_json::from_str::<String>(text).map_or(Cow::Borrowed(text), Cow::Owned),
        None => compact(value),
    }
}

struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Name(name), value)) = map.next_entry::<Name, &RawValue>()? {
                    fields.push((name, value));
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(Object)
    }
}

/// A field name: borrowed from the text unless it had to be unescaped.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s)))
            }
        }
        d.deserialize_str(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_in_place_in_the_order_of_the_text() {
        let text = r#"{"b": "x", "a\"q": 1.50, "c": {"d": [1, 2]}, "e": "t\nu", "f": null}"#;
        let fields = object_fields(text).unwrap();
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_ref()).collect();
        assert_eq!(names, ["b", "a\"q", "c", "e", "f"]);
        assert!(matches!(fields[0].0, Cow::Borrowed(_)));
        assert!(matches!(fields[1].0, Cow::Owned(_)));
        let texts: Vec<Cow<str>> = fields.iter().map(|(_, v)| as_text(v)).collect();
        assert_eq!(texts, ["x", "1.50", r#"{"d":[1,2]}"#, "t\nu", "null"]);
        assert!(matches!(texts[0], Cow::Borrowed(_)));
        let compacts: Vec<Cow<str>> = fields.iter().map(|(_, v)| compact(v)).collect();
        assert_eq!(
            compacts,
            [r#""x""#, "1.50", r#"{"d":[1,2]}"#, r#""t\nu""#, "null"]
        );
        assert!(object_fields("[1, 2]").is_none());
        assert!(object_fields("not json").is_none());
        assert!(object_fields("{}").unwrap().is_empty());
    }
}
