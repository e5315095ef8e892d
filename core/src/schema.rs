//! JSON Schemas of the types whose serde form is written by hand (ids,
//! times, a retry factor), so the request types that hold them derive
//! theirs (`schemars`, the `schema` feature). The task API's OpenAPI
//! document is generated from those derived schemas: what it publishes is
//! what the server decodes.

use crate::graph::Factor;
use crate::id::{Id, MAX_ID_BYTES};
use crate::time::Timestamp;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use std::borrow::Cow;

/// `impl JsonSchema` for a type whose serde form is written by hand: its
/// name and the schema of that form.
macro_rules! by_hand {
    ($ty:ty, $name:literal, $schema:tt) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

by_hand!(Id, "Id", {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_ID_BYTES,
    "description": "an id: 1 to 256 bytes, printable, no spaces",
});

by_hand!(Timestamp, "Timestamp", {
    "type": "string",
    "format": "date-time",
    "description": "an RFC 3339 time, any offset, up to the year 9999",
});

by_hand!(Factor, "Factor", {
    "type": "number",
    "minimum": 1,
    "maximum": 10,
    "description": "how many times longer each wait is than the one before, to a thousandth",
});
