//! Strict tool schemas as Pi 1.6.0's pi-ai builds them (`api/constrained-sampling.js`:
//! `makeStrictJsonSchema`, `resolveJsonSchemaStrictSampling`): a tool that asks for JSON-schema
//! constrained sampling ([`ConstrainedSampling`]) goes to a model whose compat supports strict
//! tools with `strict: true` and its schema in the strict subset — every object closed
//! (`additionalProperties: false`), every property required, an optional one made nullable
//! (`anyOf: [schema, {type: "null"}]`). A schema outside the subset (`$ref`, `oneOf`, a
//! type-less node, an object union, …) leaves the tool as it is (`prefer`).

use serde_json::{json, Value};

use crate::types::{ConstrainedSampling, ToolSpec};

/// Keywords the strict subset has no room for (Pi's `UNSUPPORTED_STRICT_SCHEMA_KEYS`).
const UNSUPPORTED_KEYS: [&str; 16] = [
    "$ref",
    "$defs",
    "definitions",
    "allOf",
    "oneOf",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "prefixItems",
    "not",
    "if",
    "then",
    "else",
];

/// A wire's own keywords the strict form refuses (Anthropic's), on top of [`UNSUPPORTED_KEYS`].
pub(crate) type Unsupported = fn(&str, &Value) -> bool;

/// Why a schema has no strict form (Pi's `UnsupportedStrictJsonSchemaError` text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unstrictable(pub String);

fn fail<T>(why: impl Into<String>) -> Result<T, Unstrictable> {
    Err(Unstrictable(why.into()))
}

/// A node with a structure of its own (Pi's `isStructuredSchema`): type object or array, or
/// `properties` / `items`.
fn is_structured(schema: &Value) -> bool {
    let Some(o) = schema.as_object() else {
        return false;
    };
    let has_type = |t: &str| match o.get("type") {
        Some(Value::String(s)) => s == t,
        Some(Value::Array(a)) => a.iter().any(|v| v == t),
        _ => false,
    };
    has_type("object")
        || has_type("array")
        || o.contains_key("properties")
        || o.contains_key("items")
}

/// Whether `null` is a value the schema allows (Pi's `schemaAllowsNull`).
fn allows_null(schema: &Value) -> bool {
    let Some(o) = schema.as_object() else {
        return false;
    };
    match o.get("type") {
        Some(Value::String(t)) if t == "null" => return true,
        Some(Value::Array(a)) if a.iter().any(|v| v == "null") => return true,
        _ => {}
    }
    if o.get("const") == Some(&Value::Null)
        || o.get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| e.contains(&Value::Null))
    {
        return true;
    }
    o.get("anyOf")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(allows_null))
}

/// Pi's `makeJsonSchemaNodeStrict`: checks `schema` against the strict subset and closes its
/// objects in place.
fn make_node_strict(
    schema: &mut Value,
    unsupported: Option<Unsupported>,
) -> Result<(), Unstrictable> {
    let Some(o) = schema.as_object_mut() else {
        return fail("boolean schemas are unsupported");
    };
    for key in UNSUPPORTED_KEYS {
        if o.contains_key(key) {
            return fail(format!("{key} schemas are unsupported"));
        }
    }
    if let Some(unsupported) = unsupported {
        for (key, value) in o.iter() {
            if unsupported(key, value) {
                return fail(format!("{key}: {value} is unsupported"));
            }
        }
    }
    if !o.contains_key("type") && !o.contains_key("anyOf") && !o.contains_key("enum") {
        return fail("schemas without a type are unsupported");
    }
    if let Some(any_of) = o.get_mut("anyOf") {
        let Some(variants) = any_of.as_array_mut().filter(|a| !a.is_empty()) else {
            return fail("anyOf must contain at least one schema");
        };
        for variant in variants {
            if is_structured(variant) {
                return fail("object and array unions are unsupported");
            }
            make_node_strict(variant, unsupported)?;
        }
    }
    if let Some(items) = o.get_mut("items") {
        if items.is_array() {
            return fail("tuple schemas are unsupported");
        }
        make_node_strict(items, unsupported)?;
    }
    let is_object = o.get("type").and_then(Value::as_str) == Some("object");
    if o.contains_key("properties") && !is_object {
        return fail("properties require type object");
    }
    if !is_object {
        return Ok(());
    }
    if o.get("additionalProperties")
        .is_some_and(|a| *a != Value::Bool(false))
    {
        return fail("schema-valued or true additionalProperties is unsupported");
    }
    if o.get("properties").is_some_and(|p| !p.is_object()) {
        return fail("object properties must be a schema map");
    }
    let required: Vec<String> = match o.get("required") {
        None => Vec::new(),
        Some(Value::Array(r)) if r.iter().all(Value::is_string) => r
            .iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect(),
        Some(_) => return fail("object required must be a string array"),
    };
    let names: Vec<String> = match o.get("properties") {
        Some(Value::Object(p)) => p.keys().cloned().collect(),
        _ => Vec::new(),
    };
    if required.iter().any(|k| !names.contains(k)) {
        return fail("required contains an unknown property");
    }
    if let Some(Value::Object(props)) = o.get_mut("properties") {
        for (key, property) in props.iter_mut() {
            make_node_strict(property, unsupported)?;
            if !required.contains(key) && !allows_null(property) {
                *property = json!({"anyOf": [property.take(), {"type": "null"}]});
            }
        }
    }
    // In place when present (the map keeps its keys' order), else last: as Pi's assignments.
    o.insert(
        "required".into(),
        Value::Array(names.into_iter().map(Value::String).collect()),
    );
    o.insert("additionalProperties".into(), Value::Bool(false));
    Ok(())
}

/// The strict form of a tool's `schema` (Pi's `makeStrictJsonSchema`), or why it has none.
/// `unsupported` names a wire's own refused keywords (Anthropic's).
pub fn make_strict_json_schema(
    schema: &Value,
    unsupported: Option<Unsupported>,
) -> Result<Value, Unstrictable> {
    let mut strict = schema.clone();
    if !strict.is_object() {
        return fail("root schema must have type object");
    }
    make_node_strict(&mut strict, unsupported)?;
    if strict.get("type").and_then(Value::as_str) != Some("object") {
        return fail("root schema must have type object");
    }
    Ok(strict)
}

/// The schema a tool goes with and whether it is strict (Pi's
/// `resolveJsonSchemaStrictSampling` and `getJsonSchemaToolParameters`): the strict form when
/// the tool asks for JSON-schema sampling, the model `supports` strict tools and the schema has
/// a strict form; else the tool's schema as declared and `false`.
pub(crate) fn tool_parameters(
    tool: &ToolSpec,
    supports: bool,
    unsupported: Option<Unsupported>,
) -> (Value, bool) {
    match tool.constrained_sampling {
        Some(ConstrainedSampling::JsonSchema { .. }) if supports => {
            match make_strict_json_schema(&tool.parameters, unsupported) {
                Ok(strict) => (strict, true),
                Err(_) => (tool.parameters.clone(), false),
            }
        }
        _ => (tool.parameters.clone(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each schema's strict form (or refusal) as Pi 1.6.0's `makeStrictJsonSchema` gives it
    /// (run on the same schemas with Node: the outputs below are its, key order included).
    #[test]
    fn strict_forms_are_pi_1_6_s() {
        let cases = [
            (
                r#"{"type":"object","properties":{"path":{"type":"string","description":"p"},"offset":{"type":"number"},"limit":{"type":["number","null"]}},"required":["path"]}"#,
                Ok(
                    r#"{"type":"object","properties":{"path":{"type":"string","description":"p"},"offset":{"anyOf":[{"type":"number"},{"type":"null"}]},"limit":{"type":["number","null"]}},"required":["path","offset","limit"],"additionalProperties":false}"#,
                ),
            ),
            (
                r#"{"type":"object","required":["a"],"properties":{"a":{"type":"array","items":{"type":"object","properties":{"x":{"type":"string"}}}},"b":{"anyOf":[{"type":"string"},{"type":"number"}]},"c":{"enum":["u","v"]}}}"#,
                Ok(
                    r#"{"type":"object","required":["a","b","c"],"properties":{"a":{"type":"array","items":{"type":"object","properties":{"x":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["x"],"additionalProperties":false}},"b":{"anyOf":[{"anyOf":[{"type":"string"},{"type":"number"}]},{"type":"null"}]},"c":{"anyOf":[{"enum":["u","v"]},{"type":"null"}]}},"additionalProperties":false}"#,
                ),
            ),
            (
                r#"{"type":"object","properties":{"a":{"description":"untyped"}}}"#,
                Err("schemas without a type are unsupported"),
            ),
            (
                r#"{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true}"#,
                Err("schema-valued or true additionalProperties is unsupported"),
            ),
            (
                r#"{"type":"object","properties":{"a":{"anyOf":[{"type":"object"},{"type":"string"}]}}}"#,
                Err("object and array unions are unsupported"),
            ),
            (
                r##"{"type":"object","properties":{"a":{"$ref":"#/x"}}}"##,
                Err("$ref schemas are unsupported"),
            ),
            (
                r#"{"type":"object","properties":{"a":{"type":"string"}},"required":["b"]}"#,
                Err("required contains an unknown property"),
            ),
            (
                r#"{"type":"string"}"#,
                Err("root schema must have type object"),
            ),
            (
                r#"{"type":"object"}"#,
                Ok(r#"{"type":"object","required":[],"additionalProperties":false}"#),
            ),
            (
                r#"{"type":"object","properties":{"a":{"type":"integer","minimum":1}}}"#,
                Ok(
                    r#"{"type":"object","properties":{"a":{"anyOf":[{"type":"integer","minimum":1},{"type":"null"}]}},"required":["a"],"additionalProperties":false}"#,
                ),
            ),
        ];
        for (schema, want) in cases {
            let got = make_strict_json_schema(&serde_json::from_str(schema).unwrap(), None)
                .map(|v| v.to_string())
                .map_err(|e| e.0);
            assert_eq!(
                got,
                want.map(str::to_string).map_err(str::to_string),
                "{schema}"
            );
        }
        // A wire's own refused keyword (Anthropic's `minimum`).
        let refuse_minimum: Unsupported = |k, _| k == "minimum";
        assert_eq!(
            make_strict_json_schema(
                &serde_json::from_str(cases[9].0).unwrap(),
                Some(refuse_minimum)
            ),
            Err(Unstrictable("minimum: 1 is unsupported".into()))
        );
    }
}
