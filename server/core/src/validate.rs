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

/// A tool's parameter schema, checked without `jsonschema` when it is plain (see [`plain`]),
/// else compiled once, on the first check that needs it.
pub struct ArgumentValidator {
    schema: Value,
    /// The schema uses only what [`plain::valid`] decides exactly, and is well formed.
    plain: bool,
    /// Compiled on the first check [`plain::valid`] cannot pass: the first compile builds
    /// `jsonschema`'s JSON Schema 2020-12 meta-schema validator (5 M instructions, more than 50
    /// tool rounds' checks), which a run of valid calls to the built-in tools never needs.
    compiled: std::sync::OnceLock<Result<jsonschema::Validator, String>>,
}

impl ArgumentValidator {
    /// Takes `schema`; an invalid schema is reported by every [`ArgumentValidator::validate`].
    pub fn new(schema: &Value) -> Self {
        ArgumentValidator {
            schema: schema.clone(),
            plain: plain::is_plain(schema),
            compiled: std::sync::OnceLock::new(),
        }
    }

    /// Coerces a copy of `args` and validates it; returns the arguments to execute with, or
    /// Pi's validation message for `tool`. Arguments a plain schema accepts are returned at
    /// once; anything else (a failure, a schema that is not plain) is decided by `jsonschema`,
    /// which also words the errors.
    pub fn validate(&self, tool: &str, args: &Value) -> Result<Value, String> {
        let coerced = coerce(args.clone(), &self.schema);
        if self.plain && plain::valid(&self.schema, &coerced) == Some(true) {
            return Ok(coerced);
        }
        let validator = self
            .compiled
            .get_or_init(|| jsonschema::validator_for(&self.schema).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| format!("Tool \"{tool}\" has an invalid parameter schema: {e}"))?;
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

/// Plain schemas, checked without compiling them: objects using only `type`, `properties`,
/// `required`, `items` (one schema), `additionalProperties` (a boolean), `enum` (of strings,
/// booleans and null), `description`, `title` and `default`, each well formed as JSON Schema
/// 2020-12's meta-schema wants it (what every built-in tool declares). [`valid`] answers what
/// `jsonschema` would for such a schema, or `None` where the two could differ (a number
/// against `integer` or `enum`, where JSON Schema compares numbers by value): the caller then
/// asks `jsonschema`.
mod plain {
    use serde_json::{Map, Value};

    const TYPES: [&str; 7] = [
        "array", "boolean", "integer", "null", "number", "object", "string",
    ];

    /// Whether `schema` is plain (see the module doc) at every level.
    pub(super) fn is_plain(schema: &Value) -> bool {
        let Value::Object(o) = schema else {
            return false;
        };
        o.iter().all(|(k, v)| match k.as_str() {
            "description" | "title" => v.is_string(),
            "default" => true,
            "type" => match v {
                Value::String(t) => TYPES.contains(&t.as_str()),
                Value::Array(ts) => {
                    !ts.is_empty()
                        && ts.iter().enumerate().all(|(i, t)| {
                            t.as_str().is_some_and(|t| TYPES.contains(&t)) && !ts[..i].contains(t)
                        })
                }
                _ => false,
            },
            "properties" => v.as_object().is_some_and(|p| p.values().all(is_plain)),
            "required" => v.as_array().is_some_and(|r| {
                r.iter()
                    .enumerate()
                    .all(|(i, n)| n.is_string() && !r[..i].contains(n))
            }),
            "items" => is_plain(v),
            "additionalProperties" => v.is_boolean(),
            "enum" => v.as_array().is_some_and(|e| {
                e.iter()
                    .all(|x| x.is_string() || x.is_boolean() || x.is_null())
            }),
            _ => false,
        })
    }

    /// Whether `v` is an instance of the plain `schema`; `None` when only `jsonschema` can say.
    pub(super) fn valid(schema: &Value, v: &Value) -> Option<bool> {
        let Value::Object(o) = schema else {
            return None;
        };
        if let Some(t) = o.get("type") {
            let ok = match t {
                Value::String(t) => of_type(v, t)?,
                Value::Array(ts) => {
                    let mut any = false;
                    for t in ts {
                        any |= of_type(v, t.as_str()?)?;
                    }
                    any
                }
                _ => return None,
            };
            if !ok {
                return Some(false);
            }
        }
        if let Some(e) = o.get("enum").and_then(Value::as_array) {
            if !(v.is_string() || v.is_boolean() || v.is_null()) {
                // Numbers compare by value in JSON Schema; objects and arrays may hold them.
                return if v.is_number() || v.is_array() || v.is_object() {
                    None
                } else {
                    Some(false)
                };
            }
            if !e.contains(v) {
                return Some(false);
            }
        }
        match v {
            Value::Object(m) => object(o, m),
            Value::Array(items) => match o.get("items") {
                Some(s) => {
                    for i in items {
                        if !valid(s, i)? {
                            return Some(false);
                        }
                    }
                    Some(true)
                }
                None => Some(true),
            },
            _ => Some(true),
        }
    }

    /// `properties`, `required` and `additionalProperties` of the plain schema `o` on `m`.
    fn object(o: &Map<String, Value>, m: &Map<String, Value>) -> Option<bool> {
        let props = o.get("properties").and_then(Value::as_object);
        if let Some(r) = o.get("required").and_then(Value::as_array) {
            if !r
                .iter()
                .all(|n| n.as_str().is_some_and(|n| m.contains_key(n)))
            {
                return Some(false);
            }
        }
        if o.get("additionalProperties") == Some(&Value::Bool(false))
            && !m.keys().all(|k| props.is_some_and(|p| p.contains_key(k)))
        {
            return Some(false);
        }
        if let Some(p) = props {
            for (k, x) in m {
                if let Some(s) = p.get(k) {
                    if !valid(s, x)? {
                        return Some(false);
                    }
                }
            }
        }
        Some(true)
    }

    /// Whether `v` has type `t`; `None` for a number with a fraction part against `integer`
    /// (`1.0` is an integer to JSON Schema; `jsonschema` decides).
    fn of_type(v: &Value, t: &str) -> Option<bool> {
        Some(match t {
            "integer" => match v {
                Value::Number(n) if n.is_i64() || n.is_u64() => true,
                Value::Number(_) => return None,
                _ => false,
            },
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "string" => v.is_string(),
            "null" => v.is_null(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            _ => return None,
        })
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

    /// The plain check answers as `jsonschema` does, or not at all: schemas of each keyword it
    /// takes (and some it must leave to `jsonschema`) against instances of every JSON type,
    /// numbers with and without a fraction part included.
    #[test]
    fn plain_schemas_are_decided_as_jsonschema_decides() {
        let schemas = [
            json!({"type":"object","required":["path"],"properties":{"path":{"type":"string","description":"p"},"offset":{"type":"number"},"limit":{"type":"integer"}}}),
            json!({"type":"object","required":["path","edits"],"properties":{"path":{"type":"string"},"edits":{"type":"array","items":{"type":"object","required":["oldText","newText"],"properties":{"oldText":{"type":"string"},"newText":{"type":"string"}}}}}}),
            json!({"type":["string","null"]}),
            json!({"type":"integer"}),
            json!({"type":"string","enum":["list","add",null,true]}),
            json!({"enum":["a"]}),
            json!({"type":"object","properties":{"a":{"type":"boolean"}},"additionalProperties":false}),
            json!({"type":"object","additionalProperties":true,"title":"t","default":{"x":1}}),
            json!({"type":"array","items":{"type":"number"}}),
            json!({"properties":{"a":{"type":"string"}},"required":["a"]}),
            json!({}),
        ];
        let instances = [
            json!(null),
            json!(true),
            json!(0),
            json!(1.0),
            json!(1.5),
            json!(-3),
            json!("a"),
            json!("list"),
            json!([]),
            json!([1, 2.5]),
            json!(["x"]),
            json!({}),
            json!({"path":"a"}),
            json!({"path":"a","offset":1.5,"limit":3}),
            json!({"path":"a","limit":3.0}),
            json!({"path":"a","limit":"3"}),
            json!({"path":1}),
            json!({"a":true}),
            json!({"a":true,"b":1}),
            json!({"a":"x"}),
            json!({"path":"p","edits":[{"oldText":"a","newText":"b"}]}),
            json!({"path":"p","edits":[{"oldText":"a"}]}),
            json!({"path":"p","edits":{"oldText":"a","newText":"b"}}),
        ];
        let mut decided = 0;
        for s in &schemas {
            assert!(plain::is_plain(s), "{s}");
            let compiled = jsonschema::validator_for(s).unwrap();
            for v in &instances {
                if let Some(ok) = plain::valid(s, v) {
                    decided += 1;
                    assert_eq!(ok, compiled.is_valid(v), "{s} on {v}");
                }
            }
        }
        assert!(decided > 200, "{decided}");
        // What the plain check leaves to `jsonschema`.
        assert_eq!(plain::valid(&json!({"type":"integer"}), &json!(1.0)), None);
        assert_eq!(plain::valid(&json!({"enum":["a"]}), &json!(1)), None);
        for s in [
            json!({"type":"string","minLength":1}),
            json!({"type":"strnig"}),
            json!({"type":["string","string"]}),
            json!({"required":["a","a"]}),
            json!({"items":[{"type":"string"}]}),
            json!({"anyOf":[{"type":"string"}]}),
            json!({"additionalProperties":{"type":"string"}}),
            json!({"enum":[1]}),
            json!(true),
        ] {
            assert!(!plain::is_plain(&s), "{s}");
        }
    }

    /// A schema `jsonschema` refuses is reported whatever the arguments; a plain one is never
    /// compiled for arguments it accepts, and its refusals are worded by `jsonschema`.
    #[test]
    fn invalid_schemas_are_reported_and_plain_ones_compile_only_to_refuse() {
        let bad = ArgumentValidator::new(&json!({"type":"strnig"}));
        assert!(bad
            .validate("t", &json!("x"))
            .unwrap_err()
            .starts_with("Tool \"t\" has an invalid parameter schema: "));
        let read = ArgumentValidator::new(
            &json!({"type":"object","required":["path"],"properties":{"path":{"type":"string"}}}),
        );
        assert_eq!(
            read.validate("read", &json!({"path":"a"})).unwrap(),
            json!({"path":"a"})
        );
        assert!(read.compiled.get().is_none(), "accepted without a compile");
        assert_eq!(
            read.validate("read", &json!({})).unwrap_err(),
            "Validation failed for tool \"read\":\n  - path: \"path\" is a required property\n\nReceived arguments:\n{}"
        );
        assert!(read.compiled.get().is_some());
    }
}
