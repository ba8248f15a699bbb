//! A command's reply shape, declared beside its arguments in the command table: its top-level
//! fields, each with its JSON type, whether it may be `null`, and whether every reply has it.
//! The OpenAPI document (`crate::openapi`) and MCP's tool list describe replies from it, and
//! the every-command test checks each real reply against it ([`check`]): a field the
//! declaration does not name, a missing one or one of another type fails.
//!
//! Failures all share one shape, [`error_schema`]: `success: false`, `code`, `error`,
//! `message`, and the fields a failure adds (`field`, `memory_id`, `retry_after_ms`, ...).

use serde_json::{Map, Value, json};

/// The JSON type of a reply field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Json {
    /// A string.
    Str,
    /// An integer.
    Int,
    /// A number (an integer too).
    Num,
    /// `true` / `false`.
    Bool,
    /// An object.
    Object,
    /// An array.
    Array,
}

/// One top-level field of a reply.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub ty: Json,
    /// Whether it may be `null`.
    pub nullable: bool,
    /// Whether every successful reply has it.
    pub required: bool,
}

/// A field every reply has, never `null`.
#[must_use]
pub const fn field(name: &'static str, ty: Json) -> Field {
    Field {
        name,
        ty,
        nullable: false,
        required: true,
    }
}

impl Field {
    /// Only some replies have it.
    #[must_use]
    pub const fn maybe(self) -> Field {
        Field {
            required: false,
            ..self
        }
    }

    /// It may be `null`.
    #[must_use]
    pub const fn or_null(self) -> Field {
        Field {
            nullable: true,
            ..self
        }
    }
}

impl Json {
    fn name(self) -> &'static str {
        match self {
            Json::Str => "string",
            Json::Int => "integer",
            Json::Num => "number",
            Json::Bool => "boolean",
            Json::Object => "object",
            Json::Array => "array",
        }
    }

    fn holds(self, v: &Value) -> bool {
        match self {
            Json::Str => v.is_string(),
            Json::Int => v.is_i64() || v.is_u64(),
            Json::Num => v.is_number(),
            Json::Bool => v.is_boolean(),
            Json::Object => v.is_object(),
            Json::Array => v.is_array(),
        }
    }
}

/// JSON Schema (2020-12, as OpenAPI 3.1 takes it) of a successful reply.
#[must_use]
pub fn schema(fields: &[Field]) -> Value {
    let mut props = Map::new();
    for f in fields {
        let ty = if f.nullable {
            json!([f.ty.name(), "null"])
        } else {
            json!(f.ty.name())
        };
        props.insert(f.name.into(), json!({ "type": ty }));
    }
    let required: Vec<&str> = fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name)
        .collect();
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

/// JSON Schema of every failure's body.
#[must_use]
pub fn error_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "success": {"const": false},
            "code": {"type": "string", "enum": crate::args::Code::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>()},
            "error": {"type": "string"},
            "message": {"type": "string"},
            "field": {},
        },
        "required": ["success", "code", "error", "message"],
    })
}

/// Whether `reply` (a success, without the line protocol's `ok` and `tag`) has the declared
/// shape; `Err` names what differs.
///
/// # Errors
/// Not an object, a field missing, undeclared, `null` where it may not be, or of another type.
pub fn check(reply: &Value, fields: &[Field]) -> Result<(), String> {
    let Some(obj) = reply.as_object() else {
        return Err(format!("not an object: {reply}"));
    };
    for (name, v) in obj {
        if matches!(name.as_str(), "ok" | "tag") {
            continue;
        }
        let Some(f) = fields.iter().find(|f| f.name == name) else {
            return Err(format!("{name} is not declared"));
        };
        if v.is_null() {
            if !f.nullable {
                return Err(format!("{name} is null"));
            }
        } else if !f.ty.holds(v) {
            return Err(format!("{name} is not {}: {v}", f.ty.name()));
        }
    }
    match fields
        .iter()
        .find(|f| f.required && !obj.contains_key(f.name))
    {
        Some(f) => Err(format!("{} is missing", f.name)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_checked_field_by_field() {
        let fields = [
            field("memory_id", Json::Int),
            field("reason", Json::Str).maybe(),
            field("fallback", Json::Str).or_null(),
            field("score", Json::Num),
        ];
        let ok = json!({"ok": true, "memory_id": 3, "fallback": null, "score": 1});
        assert_eq!(check(&ok, &fields), Ok(()));
        for (bad, why) in [
            (
                json!({"memory_id": 3, "fallback": null}),
                "score is missing",
            ),
            (
                json!({"memory_id": "3", "fallback": null, "score": 1.5}),
                "memory_id is not integer",
            ),
            (
                json!({"memory_id": 3, "fallback": null, "score": 1, "extra": 1}),
                "extra is not declared",
            ),
            (
                json!({"memory_id": 3, "reason": null, "fallback": null, "score": 1}),
                "reason is null",
            ),
        ] {
            assert!(check(&bad, &fields).unwrap_err().starts_with(why), "{bad}");
        }
        let s = schema(&fields);
        assert_eq!(s["required"], json!(["memory_id", "fallback", "score"]));
        assert_eq!(
            s["properties"]["fallback"]["type"],
            json!(["string", "null"])
        );
    }
}
