//! JSON input that means one thing. serde_json keeps the last of two equal
//! keys in an object, so `{"task_id":"a","task_id":"b"}` would declare
//! `b` while a reader of the text sees `a` first; baton refuses such input.

use crate::error::Error;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// How deeply JSON a caller gives (an error, metadata) may nest. Stored
/// inside a record and its events it nests a few levels deeper, which
/// must stay far below what any JSON reader accepts (serde_json: 128).
pub const MAX_DEPTH: usize = 32;

/// How deeply `v` nests: 1 for a scalar, one more for each array or
/// object around it. Counted without recursion.
pub fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut todo = vec![(v, 1usize)];
    while let Some((v, d)) = todo.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => todo.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => todo.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// Refuses a value nested deeper than [`MAX_DEPTH`], naming `field`.
pub fn check_depth(field: &str, v: &Value) -> Result<(), Error> {
    let d = depth(v);
    if d > MAX_DEPTH {
        return Err(Error::invalid(
            field,
            format!("may nest at most {MAX_DEPTH} levels deep (got {d})"),
        ));
    }
    Ok(())
}

/// Decodes what a store holds, however deeply it nests: a value written
/// before inputs were bounded (or by another writer) must still read, so
/// a task can never be made unreadable. No depth limit, on a stack that
/// grows as needed.
pub fn decode_stored<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    crate::id::reading_stored(|| {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        de.disable_recursion_limit();
        let value = T::deserialize(serde_stacker::Deserializer::new(&mut de))?;
        de.end()?;
        Ok(value)
    })
}

/// Parses `text` as JSON, refusing an object (at any depth) that gives a
/// key twice. Errors name `field`.
pub fn parse_strict(field: &str, text: &str) -> Result<Value, Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Strict
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| Error::invalid(field, format!("is not valid JSON: {e}")))?;
    Ok(value)
}

/// A value whose objects have no key twice.
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("the key {key:?} is given twice")));
            }
            let v = map.next_value_seed(Strict)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let e = parse_strict("manifest", r#"{"task_id":"a","task_id":"b"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("manifest"));
        assert!(e.message.contains("\"task_id\" is given twice"), "{e}");
        assert!(parse_strict("error", r#"{"a":{"b":1,"b":2}}"#).is_err());
        assert!(parse_strict("error", r#"[{"x":1},{"x":1,"x":1}]"#).is_err());
        assert!(parse_strict("error", r#"{"a":1} trailing"#).is_err());
        assert_eq!(
            parse_strict("error", r#"{"a":[1,2.5,"s",null,true],"b":{"a":1}}"#).unwrap(),
            json!({"a":[1,2.5,"s",null,true],"b":{"a":1}})
        );
    }
}
