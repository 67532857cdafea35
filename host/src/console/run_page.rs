//! `GET /ui/runs/{run_id}`: one run — its path through the state machine, the
//! timeline of its checkpoints, every tool call (model-visible arguments, the
//! authorization decision, attempts, latency, evidence reference, result), its
//! approvals, budgets used and the result. An unfinished run's page follows the
//! run's event stream and redraws itself as it moves.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use caseops_runtime::{CallStatus, LedgerRow, ToolContract};
use serde_json::{Map, Value};

use super::Console;
use super::page::{Section, badge, duration, esc, html, json_block, page, time, url_part};
use super::session::unavailable;
use crate::store::approvals;
use crate::store::runs::{RunRecord, SqlRunStore};

pub async fn show(
    State(console): State<Arc<Console>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let viewer = match console.viewer_or_sign_in(&headers, &uri).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let tenant = &viewer.who.tenant_id;
    let app = &console.app;
    let record = match app.runs.get(tenant, &run_id).await {
        Ok(Some(r)) => r,
        // Another tenant's run is as absent as a missing one.
        Ok(None) => {
            return super::page::error_page(
                &viewer,
                app.contract.agent,
                StatusCode::NOT_FOUND,
                "There is no such run.",
            );
        }
        Err(e) => return unavailable(e),
    };
    let loaded = tokio::try_join!(
        app.runs.transitions(tenant, &run_id, 0),
        app.runs.ledger(tenant, &run_id),
        approvals::of_run(&app.runs.db, tenant, &run_id),
    );
    let (checkpoints, ledger, run_approvals) = match loaded {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let contract = &app.contract;
    let finished = SqlRunStore::outcome_of(&record).is_some();
    let mut main = String::new();
    if !finished {
        let _ = write!(
            main,
            "<p class=\"live-note\" data-live-run=\"/ui/runs/{}/events\" aria-live=\"polite\"></p>",
            url_part(&record.run_id)
        );
    }
    let _ = write!(
        main,
        "<h1>Run <code>{}</code> {}</h1>",
        esc(&record.run_id),
        badge(&record.status)
    );
    main.push_str(&facts(&record, contract.resource_type));

    // Budgets used.
    let b = &contract.budgets;
    let elapsed = record.updated_at - record.created_at;
    let _ = write!(
        main,
        "<section aria-labelledby=\"budgets\"><h2 id=\"budgets\">Budgets</h2><table class=\"budgets\">\
         <thead><tr><th scope=\"col\">Budget</th><th scope=\"col\">Used</th><th scope=\"col\">Limit</th></tr></thead><tbody>\
         <tr><th scope=\"row\">Steps</th><td>{}</td><td>{}</td></tr>\
         <tr><th scope=\"row\">Wall clock</th><td>{}</td><td>{} s</td></tr>\
         <tr><th scope=\"row\">Tool calls</th><td>{}</td><td>—</td></tr></tbody></table></section>",
        record.step_count,
        b.max_steps,
        duration(elapsed),
        b.max_wall_clock_seconds,
        ledger.len(),
    );

    // The state machine with this run's path.
    let path: Vec<(String, String)> = checkpoints
        .iter()
        .map(|c| (c.from.clone(), c.to.clone()))
        .collect();
    let _ = write!(
        main,
        "<section aria-labelledby=\"machine\"><h2 id=\"machine\">State machine</h2><figure class=\"machine\">{}\
         <figcaption>Every transition the contract allows; the ones this run took are drawn thick, the state it is in is outlined.</figcaption></figure></section>",
        super::diagram::svg(
            &contract.states,
            &contract.transitions,
            &path,
            &record.state
        )
    );

    // The timeline.
    main.push_str("<section aria-labelledby=\"timeline\"><h2 id=\"timeline\">Timeline</h2>");
    if checkpoints.is_empty() {
        main.push_str("<p class=\"empty\">No checkpoint yet.</p>");
    } else {
        main.push_str("<table class=\"timeline\"><thead><tr><th scope=\"col\">#</th><th scope=\"col\">At</th><th scope=\"col\">Transition</th><th scope=\"col\">Reason</th></tr></thead><tbody>");
        for c in &checkpoints {
            let _ = write!(
                main,
                "<tr><td>{}</td><td>+{}</td><td>{} → {}</td><td>{}</td></tr>",
                c.sequence,
                duration(c.at_ms as i64 - record.created_at),
                esc(&c.from),
                esc(&c.to),
                esc(c.reason.as_deref().unwrap_or("")),
            );
        }
        main.push_str("</tbody></table>");
    }
    main.push_str("</section>");

    // Tool calls.
    main.push_str("<section aria-labelledby=\"calls\"><h2 id=\"calls\">Tool calls</h2>");
    if ledger.is_empty() {
        main.push_str("<p class=\"empty\">No tool call yet.</p>");
    }
    for row in &ledger {
        let tool = contract.tools.iter().find(|t| t.name == row.tool_name);
        main.push_str(&call(row, tool, &record));
    }
    main.push_str("</section>");

    // Approvals.
    if !run_approvals.is_empty() {
        main.push_str("<section aria-labelledby=\"approvals\"><h2 id=\"approvals\">Approvals</h2><ul class=\"plain\">");
        for a in &run_approvals {
            let decided = match (&a.decided_by, a.decided_at_ms) {
                (Some(by), Some(at)) => format!(" by {} at {}", esc(by), time(at)),
                (None, Some(at)) => format!(" at {}", time(at)),
                _ => format!(", expires {}", time(a.expires_at_ms)),
            };
            let _ = write!(
                main,
                "<li>{} <code>{}</code> for <code>{}</code>{decided} — <a href=\"/ui/approvals#approval-{}\">in the approval queue</a></li>",
                badge(&a.status),
                esc(&a.approval_id),
                esc(&a.tool_name),
                esc(&a.approval_id),
            );
        }
        main.push_str("</ul></section>");
    }

    // The result.
    main.push_str("<section aria-labelledby=\"result\"><h2 id=\"result\">Result</h2>");
    match &record.final_result {
        Some(result) => main.push_str(&json_block(result)),
        None if finished => main.push_str("<p class=\"empty\">The run ended without a result.</p>"),
        None => main.push_str("<p class=\"empty\">The run has not finished.</p>"),
    }
    if let Some(Value::Object(provenance)) = &record.provenance {
        main.push_str("<table class=\"provenance\"><caption>Where each cited evidence reference came from</caption><thead><tr><th scope=\"col\">Evidence</th><th scope=\"col\">Tool call</th></tr></thead><tbody>");
        for (evidence, from) in provenance {
            let from = match from {
                Value::String(s) => s.clone(),
                Value::Object(o) => o
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                other => other.to_string(),
            };
            let _ = write!(
                main,
                "<tr><td><code>{}</code></td><td><a href=\"#call-{}\">{}</a></td></tr>",
                esc(evidence),
                esc(&anchor(&from)),
                esc(&from)
            );
        }
        main.push_str("</tbody></table>");
    }
    main.push_str("</section>");
    html(
        StatusCode::OK,
        page(
            &viewer,
            contract.agent,
            Section::Runs,
            &format!("Run {}", record.run_id),
            &main,
        ),
    )
}

fn facts(r: &RunRecord, resource_type: &str) -> String {
    let planner = match &r.model {
        Some(m) => format!("{} ({})", esc(&r.planner_kind), esc(m)),
        None => esc(&r.planner_kind),
    };
    format!(
        "<dl class=\"facts\"><dt>{rt}</dt><dd><code>{res}</code></dd><dt>Goal</dt><dd>{goal}</dd>\
         <dt>Started by</dt><dd>{actor}</dd><dt>Planner</dt><dd>{planner}</dd>\
         <dt>State</dt><dd>{state}</dd><dt>Stop reason</dt><dd>{stop}</dd>\
         <dt>Started</dt><dd>{created}</dd><dt>Updated</dt><dd>{updated}</dd>\
         <dt>Bundle</dt><dd><code>{digest}</code></dd></dl>",
        rt = esc(resource_type),
        res = esc(&r.resource_id),
        goal = esc(&r.goal),
        actor = esc(&r.actor),
        state = esc(&r.state),
        stop = esc(r.stop_reason.as_deref().unwrap_or("—")),
        created = time(r.created_at),
        updated = time(r.updated_at),
        digest = esc(&r.bundle_digest),
    )
}

/// An element id for a tool call id (which holds `:`).
fn anchor(tool_call_id: &str) -> String {
    tool_call_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// What the authorization stage decided of a call, as far as its row tells.
fn authorization(row: &LedgerRow) -> (String, String) {
    match row.status {
        CallStatus::Denied => (
            "denied".into(),
            row.error_code.clone().unwrap_or_else(|| "denied".into()),
        ),
        CallStatus::Proposed => ("pending".into(), "not decided yet".into()),
        CallStatus::WaitingApproval => (
            "pending".into(),
            "allowed by policy; waits for a person's approval".into(),
        ),
        _ => ("allowed".into(), "allowed by policy".into()),
    }
}

/// Only what the model could see and propose: system-injected inputs stay out.
fn model_visible(arguments: &Value, tool: Option<&ToolContract>) -> Value {
    match (arguments, tool) {
        (Value::Object(fields), Some(tool)) => {
            let kept: Map<String, Value> = fields
                .iter()
                .filter(|(name, _)| {
                    tool.inputs
                        .iter()
                        .find(|f| f.name == name.as_str())
                        .is_none_or(|f| f.source.model_visible())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Value::Object(kept)
        }
        (other, _) => other.clone(),
    }
}

fn call(row: &LedgerRow, tool: Option<&ToolContract>, record: &RunRecord) -> String {
    let (decision, reason) = authorization(row);
    let latency = row
        .finished_at_ms
        .map(|end| duration(end as i64 - row.started_at_ms as i64))
        .unwrap_or_else(|| "—".into());
    let evidence = tool
        .map(|t| t.evidence_field)
        .filter(|f| !f.is_empty())
        .and_then(|f| row.result.as_ref()?.get(f))
        .map(|v| match v {
            Value::String(s) => format!("<code>{}</code>", esc(s)),
            other => format!("<code>{}</code>", esc(&other.to_string())),
        })
        .unwrap_or_else(|| "—".into());
    let cited = record
        .provenance
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(|p| {
            p.values().any(|v| {
                v.as_str() == Some(row.tool_call_id.as_str())
                    || v.get("tool_call_id").and_then(Value::as_str) == Some(&row.tool_call_id)
            })
        });
    let error = match (&row.error_class, &row.error_code) {
        (Some(class), Some(code)) => format!(
            "<dt>Error</dt><dd>{} <code>{}</code></dd>",
            esc(class),
            esc(code)
        ),
        (None, Some(code)) => format!("<dt>Error</dt><dd><code>{}</code></dd>", esc(code)),
        _ => String::new(),
    };
    let result = match &row.result {
        Some(r) => format!(
            "<details><summary>Result</summary>{}</details>",
            json_block(r)
        ),
        None => String::new(),
    };
    format!(
        "<article class=\"call\" id=\"call-{anchor}\" aria-labelledby=\"call-{anchor}-h\">\
         <h3 id=\"call-{anchor}-h\"><code>{name}</code> <span class=\"version\">v{version}</span> {status}</h3>\
         <dl class=\"facts\"><dt>Call</dt><dd><code>{id}</code></dd>\
         <dt>Authorization</dt><dd>{decision_badge} {reason}</dd>\
         <dt>Attempts</dt><dd>{attempts}</dd><dt>Latency</dt><dd>{latency}</dd>\
         <dt>Evidence</dt><dd>{evidence}{cited}</dd>{error}</dl>\
         <h4>Arguments</h4>{arguments}{result}</article>",
        anchor = esc(&anchor(&row.tool_call_id)),
        name = esc(&row.tool_name),
        version = esc(&row.tool_version),
        status = badge(row.status.as_str()),
        id = esc(&row.tool_call_id),
        decision_badge = badge(&decision),
        reason = esc(&reason),
        attempts = row.attempt_count,
        cited = if cited { " (cited by the result)" } else { "" },
        arguments = json_block(&model_visible(&row.arguments, tool)),
    )
}
