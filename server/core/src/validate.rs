//! Tool-argument coercion and validation (docs/design.md#the-agent-loop "Tool calls cross a trust boundary": clone,
//! coerce, validate).
//!
//! Coercion follows Pi 0.73.1's `pi-ai` `validateToolArguments` for plain JSON Schemas: where a
//! value does not match the schema's `type`, it is converted when the conversion is lossless —
//! `"42"` → 42 for `number` / `integer`, `"true"` / `"false"` and 1 / 0 → booleans, numbers and
//! booleans → strings, `null` → 0 / false / `""`, and `""` / 0 / false → `null`; `allOf` applies
//! each member, `anyOf` / `oneOf` take the first member the coerced value validates against;
//! objects recurse into `properties` (and a schema-valued `additionalProperties`), arrays into
//! `items`. Validation then uses the `jsonschema` crate; the error text matches Pi's:
//! `Validation failed for tool "NAME":\n  - PATH: MESSAGE\n\nReceived arguments:\n{…}`.

use jsonschema::error::ValidationErrorKind;
use serde_json::{Number, Value};

fn types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn matches_type(v: &Value, t: &str) -> bool {
    match t {
        "number" => v.is_number(),
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "null" => v.is_null(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    }
}

fn number(f: f64) -> Option<Value> {
    if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        Some(Value::Number(Number::from(f as i64)))
    } else {
        Number::from_f64(f).map(Value::Number)
    }
}

/// Converts `v` to type `t` when Pi would; `None` when no conversion applies.
fn coerce_primitive(v: &Value, t: &str) -> Option<Value> {
    match (t, v) {
        ("number" | "integer", Value::Null) => Some(Value::from(0)),
        ("number" | "integer", Value::Bool(b)) => Some(Value::from(u8::from(*b))),
        ("number", Value::String(s)) if !s.trim().is_empty() => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(number),
        ("integer", Value::String(s)) if !s.trim().is_empty() => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.fract() == 0.0)
            .and_then(number),
        ("boolean", Value::Null) => Some(Value::Bool(false)),
        ("boolean", Value::String(s)) if s == "true" => Some(Value::Bool(true)),
        ("boolean", Value::String(s)) if s == "false" => Some(Value::Bool(false)),
        ("boolean", Value::Number(n)) if n.as_f64() == Some(1.0) => Some(Value::Bool(true)),
        ("boolean", Value::Number(n)) if n.as_f64() == Some(0.0) => Some(Value::Bool(false)),
        ("string", Value::Null) => Some(Value::String(String::new())),
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Some(Value::String(b.to_string())),
        ("null", Value::String(s)) if s.is_empty() => Some(Value::Null),
        ("null", Value::Number(n)) if n.as_f64() == Some(0.0) => Some(Value::Null),
        ("null", Value::Bool(false)) => Some(Value::Null),
        _ => None,
    }
}

fn valid(schema: &Value, v: &Value) -> bool {
    jsonschema::validator_for(schema)
        .map(|val| val.is_valid(v))
        .unwrap_or(false)
}

/// Returns `value` coerced toward `schema` (see module docs). Never fails.
pub fn coerce(value: Value, schema: &Value) -> Value {
    let mut v = value;
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            v = coerce(v, s);
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(members) = schema.get(key).and_then(Value::as_array) {
            if let Some(c) = members
                .iter()
                .map(|s| (coerce(v.clone(), s), s))
                .find(|(c, s)| valid(s, c))
            {
                v = c.0;
            }
        }
    }
    let ts = types(schema);
    let union_hit = ts.len() > 1 && ts.iter().any(|t| matches_type(&v, t));
    if !ts.is_empty() && !union_hit && !ts.iter().any(|t| ts.len() == 1 && matches_type(&v, t)) {
        if let Some(c) = ts.iter().find_map(|t| coerce_primitive(&v, t)) {
            v = c;
        }
    }
    if ts.contains(&"object") {
        if let Value::Object(map) = &mut v {
            let props = schema.get("properties").and_then(Value::as_object);
            if let Some(props) = props {
                for (k, s) in props {
                    if let Some(slot) = map.get_mut(k) {
                        *slot = coerce(slot.take(), s);
                    }
                }
            }
            if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, slot) in map.iter_mut() {
                    if !props.is_some_and(|p| p.contains_key(k)) {
                        *slot = coerce(slot.take(), extra);
                    }
                }
            }
        }
    }
    if ts.contains(&"array") {
        if let Value::Array(items) = &mut v {
            match schema.get("items") {
                Some(Value::Array(item_schemas)) => {
                    for (slot, s) in items.iter_mut().zip(item_schemas) {
                        *slot = coerce(slot.take(), s);
                    }
                }
                Some(s @ Value::Object(_)) => {
                    for slot in items.iter_mut() {
                        *slot = coerce(slot.take(), s);
                    }
                }
                _ => {}
            }
        }
    }
    v
}

/// A tool's parameter schema, compiled once.
pub struct ArgumentValidator {
    schema: Value,
    validator: Result<jsonschema::Validator, String>,
}

impl ArgumentValidator {
    /// Compiles `schema`; an invalid schema is reported by every [`ArgumentValidator::validate`].
    pub fn new(schema: &Value) -> Self {
        ArgumentValidator {
            schema: schema.clone(),
            validator: jsonschema::validator_for(schema).map_err(|e| e.to_string()),
        }
    }

    /// Coerces a copy of `args` and validates it; returns the arguments to execute with, or
    /// Pi's validation message for `tool`.
    pub fn validate(&self, tool: &str, args: &Value) -> Result<Value, String> {
        let validator = self
            .validator
            .as_ref()
            .map_err(|e| format!("Tool \"{tool}\" has an invalid parameter schema: {e}"))?;
        let coerced = coerce(args.clone(), &self.schema);
        let errors: Vec<String> = validator
            .iter_errors(&coerced)
            .map(|e| {
                let base = e
                    .instance_path()
                    .as_str()
                    .trim_start_matches('/')
                    .replace('/', ".");
                let path = match e.kind() {
                    ValidationErrorKind::Required { property } => {
                        let p = property
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| property.to_string());
                        if base.is_empty() {
                            p
                        } else {
                            format!("{base}.{p}")
                        }
                    }
                    _ if base.is_empty() => "root".to_string(),
                    _ => base,
                };
                format!("  - {path}: {e}")
            })
            .collect();
        if errors.is_empty() {
            return Ok(coerced);
        }
        Err(format!(
            "Validation failed for tool \"{tool}\":\n{}\n\nReceived arguments:\n{}",
            errors.join("\n"),
            serde_json::to_string_pretty(args).unwrap_or_default()
        ))
    }
}

/// One-shot [`ArgumentValidator::validate`] (compiles the schema each call).
pub fn validate_arguments(tool: &str, schema: &Value, args: &Value) -> Result<Value, String> {
    ArgumentValidator::new(schema).validate(tool, args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn coerces_like_pi() {
        let schema = json!({"type":"object","properties":{
            "n":{"type":"number"},"i":{"type":"integer"},"b":{"type":"boolean"},"s":{"type":"string"},
            "a":{"type":"array","items":{"type":"number"}},"u":{"anyOf":[{"type":"boolean"},{"type":"number"}]}}});
        let out = coerce(
            json!({"n":"2.5","i":"7","b":"true","s":3,"a":["1","x"],"u":"4","extra":"5"}),
            &schema,
        );
        assert_eq!(
            out,
            json!({"n":2.5,"i":7,"b":true,"s":"3","a":[1,"x"],"u":4,"extra":"5"})
        );
        assert_eq!(
            coerce(json!({"i":"7.5","n":" "}), &schema),
            json!({"i":"7.5","n":" "})
        );
    }

    #[test]
    fn validation_message_matches_pi() {
        let schema = json!({"type":"object","required":["path"],"properties":{"path":{"type":"string"},"limit":{"type":"number"}}});
        assert_eq!(
            validate_arguments("read", &schema, &json!({"path":"a","limit":"10"})).unwrap(),
            json!({"path":"a","limit":10})
        );
        let e = validate_arguments("read", &schema, &json!({"limit":"x"})).unwrap_err();
        assert_eq!(
            e,
            "Validation failed for tool \"read\":\n  - path: \"path\" is a required property\n  - limit: \"x\" is not of type \"number\"\n\nReceived arguments:\n{\n  \"limit\": \"x\"\n}"
        );
    }
}
