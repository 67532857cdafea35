//! Markdown artifacts: the tool catalog and the state-machine diagram (Mermaid).
//! Templates are for prose only; Rust is never generated from templates.

use minijinja::Environment;
use serde_json::{Value, json};

use crate::agent::AgentContract;
use crate::fields::{FieldSpec, FieldType};
use crate::state_machine::{InvariantKind, StateMachine};
use crate::tool::{BackoffKind, ErrorClass, ToolContract};

const TOOLS_TEMPLATE: &str = include_str!("../../templates/tools.md.j2");
const STATE_TEMPLATE: &str = include_str!("../../templates/state-machine.md.j2");

fn render(name: &str, source: &str, ctx: Value) -> Result<String, String> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| e.to_string())?;
    env.set_syntax(syntax);
    env.add_template(name, source).map_err(|e| e.to_string())?;
    let out = env
        .get_template(name)
        .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(ctx))))
        .map_err(|e| format!("template `{name}`: {e}"))?;
    Ok(out.trim_end().to_string() + "\n")
}

/// A field type as a reader writes it.
pub fn type_text(spec: &FieldSpec) -> String {
    let base = match &spec.ty {
        FieldType::List { items, .. } => format!("list of {}", type_text(items)),
        FieldType::Enum(values) => format!("enum ({})", values.join(", ")),
        other => other.name().to_string(),
    };
    if spec.optional {
        format!("optional {base}")
    } else {
        base
    }
}

pub fn tool_catalog(
    agent: &AgentContract,
    tools: &[ToolContract],
    digest: &str,
) -> Result<String, String> {
    let all_stages: Vec<&str> = agent.stages.iter().map(|s| s.value.as_str()).collect();
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name.value,
                "title": t.title,
                "description": t.description.as_deref().unwrap_or(""),
                "version": t.version.value,
                "risk": t.risk.value.as_str(),
                "scope": t.required_scope.value,
                "timeout": t.timeout_seconds.value,
                "attempts": t.max_attempts.value,
                "backoff": match t.backoff.kind {
                    BackoffKind::None => "no",
                    BackoffKind::Fixed => "fixed",
                    BackoffKind::Exponential => "exponential",
                },
                "stages": t.stages.as_ref().map(|s| s.iter().map(|x| x.value.clone()).collect::<Vec<_>>())
                    .unwrap_or_else(|| all_stages.iter().map(|s| s.to_string()).collect()),
                "requires": t.requires.iter().map(|r| r.value.clone()).collect::<Vec<_>>(),
                "idempotency_key": t.idempotency_key.iter().map(|r| r.value.clone()).collect::<Vec<_>>(),
                "confirm_with": t.effects.as_ref().map(|e| e.confirm_with.value.clone()),
                "evidence": t.evidence.as_ref().map(|e| e.value.clone()).unwrap_or_else(|| "evidence_ref".into()),
                "audit": t.audit,
                "in_catalog": agent.catalog.iter().any(|c| c.value == t.name.value),
                "inputs": t.input.iter().map(|f| json!({
                    "name": f.name.value, "source": f.source.value.as_str(), "type": type_text(&f.spec),
                })).collect::<Vec<_>>(),
                "outputs": t.output.iter().map(|f| json!({
                    "name": f.name.value, "type": type_text(&f.spec),
                })).collect::<Vec<_>>(),
                "errors": t.errors.iter().map(|(c, class)| json!({
                    "code": c.value,
                    "class": if *class == ErrorClass::Transient { "transient" } else { "business" },
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    render(
        "tools.md",
        TOOLS_TEMPLATE,
        json!({ "agent": agent.name.value, "digest": digest, "tools": tools }),
    )
}

pub fn state_diagram(sm: &StateMachine) -> Result<String, String> {
    let transitions: Vec<Value> = sm
        .transitions
        .iter()
        .map(|(f, t)| json!({ "from": f.value, "to": t.value }))
        .collect();
    let invariants: Vec<Value> = sm
        .invariants
        .iter()
        .map(|i| {
            let text = match &i.kind {
                InvariantKind::MustPass { from, to, through } => format!(
                    "every path from `{}` to `{}` passes `{}`",
                    from.value, to.value, through.value
                ),
                InvariantKind::TerminalsFinal => "no transition leaves a terminal state".into(),
                InvariantKind::AllReachTerminal => "every state reaches a terminal state".into(),
            };
            json!({ "name": i.name.value, "text": text })
        })
        .collect();
    render(
        "state-machine.md",
        STATE_TEMPLATE,
        json!({
            "initial": sm.initial.value,
            "transitions": transitions,
            "terminals": sm.terminals.iter().map(|t| t.value.clone()).collect::<Vec<_>>(),
            "invariants": invariants,
        }),
    )
}
