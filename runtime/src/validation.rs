//! Stage 5, argument validation: JSON Schema 2020-12, validators compiled once per
//! bundle. Messages never echo argument values (`masked`), only where and why.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::Validator;
use serde_json::Value;

use crate::bundle::ContractBundle;

/// Compiled validators for every tool's input and output and for the final answer.
pub struct Validators {
    inputs: HashMap<&'static str, Validator>,
    // Shared with every planner view (`Arc`): a view is built at each step.
    input_schemas: HashMap<&'static str, Arc<Value>>,
    outputs: HashMap<&'static str, Validator>,
    final_answer: Validator,
    final_answer_schema: Arc<Value>,
}

#[derive(Debug, thiserror::Error)]
#[error("schema of `{what}` does not compile: {message}")]
pub struct SchemaError {
    pub what: String,
    pub message: String,
}

fn compile(what: &str, text: &str) -> Result<(Validator, Value), SchemaError> {
    let fail = |message: String| SchemaError {
        what: what.to_string(),
        message,
    };
    let schema: Value = serde_json::from_str(text).map_err(|e| fail(e.to_string()))?;
    let validator = jsonschema::validator_for(&schema).map_err(|e| fail(e.to_string()))?;
    Ok((validator, schema))
}

impl Validators {
    pub fn compile<B: ContractBundle>() -> Result<Self, SchemaError> {
        let mut inputs = HashMap::new();
        let mut input_schemas = HashMap::new();
        let mut outputs = HashMap::new();
        for t in B::TOOLS {
            let (validator, schema) = compile(&format!("{} input", t.name), t.input_schema)?;
            inputs.insert(t.name, validator);
            input_schemas.insert(t.name, Arc::new(schema));
            outputs.insert(
                t.name,
                compile(&format!("{} output", t.name), t.output_schema)?.0,
            );
        }
        let (final_answer, final_answer_schema) = compile("final answer", B::FINAL_ANSWER_SCHEMA)?;
        Ok(Self {
            inputs,
            input_schemas,
            outputs,
            final_answer,
            final_answer_schema: Arc::new(final_answer_schema),
        })
    }

    /// A tool's model-visible input schema, parsed once.
    pub fn input_schema(&self, tool: &str) -> Option<&Arc<Value>> {
        self.input_schemas.get(tool)
    }

    pub fn final_answer_schema(&self) -> &Arc<Value> {
        &self.final_answer_schema
    }

    /// Checks proposed arguments against the tool's model-visible input schema.
    pub fn arguments(&self, tool: &str, arguments: &Value) -> Result<(), Vec<String>> {
        check(self.inputs.get(tool), arguments)
    }

    /// Checks a tool result against the tool's output schema.
    pub fn output(&self, tool: &str, result: &Value) -> Result<(), Vec<String>> {
        check(self.outputs.get(tool), result)
    }

    pub fn final_answer(&self, answer: &Value) -> Result<(), Vec<String>> {
        check(Some(&self.final_answer), answer)
    }
}

fn check(validator: Option<&Validator>, instance: &Value) -> Result<(), Vec<String>> {
    let Some(v) = validator else {
        return Err(vec!["no schema for this tool".into()]);
    };
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| {
            let path = e.instance_path().to_string();
            let at = if path.is_empty() {
                "/".to_string()
            } else {
                path
            };
            format!("{at}: {}", e.masked())
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}
