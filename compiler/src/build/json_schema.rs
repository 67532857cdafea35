//! JSON Schema 2020-12 for tool inputs (model-visible fields only), tool outputs and
//! the final answer, plus the strict variant OpenAI function tools require.

use serde_json::{Map, Value, json};

use crate::fields::{Field, FieldSpec, FieldType, InputField};
use crate::tool::ToolContract;

pub const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The schema of one field's value.
pub fn field_schema(spec: &FieldSpec) -> Value {
    let mut s = match &spec.ty {
        FieldType::String {
            min_length,
            max_length,
            pattern,
        } => {
            let mut s = json!({ "type": "string" });
            if let Some(v) = min_length {
                s["minLength"] = json!(v);
            }
            if let Some(v) = max_length {
                s["maxLength"] = json!(v);
            }
            if let Some(p) = pattern {
                s["pattern"] = json!(p);
            }
            s
        }
        FieldType::Integer { minimum, maximum } | FieldType::Number { minimum, maximum } => {
            let ty = if matches!(spec.ty, FieldType::Integer { .. }) {
                "integer"
            } else {
                "number"
            };
            let mut s = json!({ "type": ty });
            if let Some(v) = minimum {
                s["minimum"] = number(*v);
            }
            if let Some(v) = maximum {
                s["maximum"] = number(*v);
            }
            s
        }
        FieldType::Boolean => json!({ "type": "boolean" }),
        FieldType::DateTime => json!({ "type": "string", "format": "date-time" }),
        FieldType::Enum(values) => json!({ "type": "string", "enum": values }),
        FieldType::List {
            items,
            min_items,
            max_items,
        } => {
            let mut s = json!({ "type": "array", "items": field_schema(items) });
            if let Some(v) = min_items {
                s["minItems"] = json!(v);
            }
            if let Some(v) = max_items {
                s["maxItems"] = json!(v);
            }
            s
        }
        FieldType::Object(fields) => object_schema(fields.iter().map(|f| (&f.name.value, &f.spec))),
    };
    if let Some(d) = &spec.description {
        s["description"] = json!(d);
    }
    s
}

/// Whole numbers print as integers (`1`, not `1.0`) so schemas read as written.
fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

fn object_schema<'a>(fields: impl Iterator<Item = (&'a String, &'a FieldSpec)>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, spec) in fields {
        properties.insert(name.clone(), field_schema(spec));
        if !spec.optional {
            required.push(json!(name));
        }
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn document(id: String, title: String, body: Value) -> Value {
    let mut doc = json!({ "$schema": DIALECT, "$id": id, "title": title });
    for (k, v) in body.as_object().expect("object schema").clone() {
        doc[k] = v;
    }
    doc
}

/// The model-visible input: system-injected fields are never part of it.
pub fn input_schema(tool: &ToolContract) -> Value {
    let visible: Vec<&InputField> = tool
        .input
        .iter()
        .filter(|f| f.source.value.model_visible())
        .collect();
    document(
        format!(
            "urn:caseops:tool:{}:{}:input",
            tool.name.value, tool.version.value
        ),
        format!("{} input", tool.title),
        object_schema(visible.iter().map(|f| (&f.name.value, &f.spec))),
    )
}

pub fn output_schema(tool: &ToolContract) -> Value {
    document(
        format!(
            "urn:caseops:tool:{}:{}:output",
            tool.name.value, tool.version.value
        ),
        format!("{} output", tool.title),
        object_schema(tool.output.iter().map(|f| (&f.name.value, &f.spec))),
    )
}

pub fn final_answer_schema(schema_version: &str, fields: &[Field]) -> Value {
    let mut doc = document(
        format!("urn:caseops:{schema_version}"),
        format!("{schema_version} final answer"),
        object_schema(fields.iter().map(|f| (&f.name.value, &f.spec))),
    );
    // The version is part of the answer so a consumer can tell which schema it holds.
    doc["properties"]["schema_version"] = json!({ "type": "string", "const": schema_version });
    let required = doc["required"].as_array_mut().expect("required list");
    required.insert(0, json!("schema_version"));
    doc
}

/// OpenAI strict mode: every property required, optional ones nullable, no extra
/// properties, and no keywords strict mode rejects.
pub fn strict(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(obj) = s.as_object_mut() {
        for k in ["$schema", "$id", "title", "minLength", "maxLength"] {
            // shift_remove keeps the remaining keys in their order.
            obj.shift_remove(k);
        }
    }
    if s["type"] == "object" {
        let required: Vec<Value> = s["required"].as_array().cloned().unwrap_or_default();
        let mut names = Vec::new();
        if let Some(props) = s["properties"].as_object_mut() {
            for (name, prop) in props.iter_mut() {
                let mut p = strict(prop);
                if !required.contains(&json!(name)) {
                    p = nullable(p);
                }
                *prop = p;
                names.push(json!(name));
            }
        }
        s["required"] = Value::Array(names);
        s["additionalProperties"] = json!(false);
    }
    if s["type"] == "array" {
        s["items"] = strict(&s["items"]);
    }
    s
}

fn nullable(mut p: Value) -> Value {
    if let Some(ty) = p["type"].as_str() {
        p["type"] = json!([ty, "null"]);
    }
    // `get_mut`, not indexing: indexing a missing key would insert `null`.
    if let Some(values) = p.get_mut("enum").and_then(Value::as_array_mut) {
        values.push(Value::Null);
    }
    p
}
