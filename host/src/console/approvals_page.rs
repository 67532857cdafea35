//! `GET /ui/approvals`: the tenant's pending approvals — the exact action, the
//! run's evidence so far, who asked and until when — with approve and reject
//! forms, and the decided ones with who decided and when.
//! `POST /ui/approvals/{id}/decision` decides through the API's own function
//! ([`crate::approvals_api::decide_as`]): the same rules, the same effect on the
//! run. A refusal (already decided, expired, separation of duties, no scope) is
//! shown with its status, not hidden.

use std::fmt::Write;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use caseops_runtime::CallStatus;

use super::Console;
use super::page::{
    Section, badge, esc, html, json_block, page, pairs, see_other, time, url_part, value,
};
use super::session::{MAX_FORM_BYTES, Viewer, unavailable};
use crate::approvals_api::{DECIDE_SCOPE, MAX_COMMENT_CHARS, decide_as};
use crate::store::approvals::{self, Approval};

const PENDING_SHOWN: i64 = 100;
const DECIDED_SHOWN: i64 = 50;

/// What the page says above the queue after a decision.
enum Notice {
    None,
    Decided {
        approval_id: String,
        status: String,
        run_id: String,
    },
    Refused {
        approval_id: String,
        message: String,
    },
}

pub async fn list(State(console): State<Arc<Console>>, headers: HeaderMap, uri: Uri) -> Response {
    let viewer = match console.viewer_or_sign_in(&headers, &uri).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let query = pairs(uri.query().unwrap_or(""));
    let notice = match (
        value(&query, "decided"),
        value(&query, "status"),
        value(&query, "run"),
    ) {
        (Some(id), Some(status), Some(run)) => Notice::Decided {
            approval_id: id.to_string(),
            status: status.to_string(),
            run_id: run.to_string(),
        },
        _ => Notice::None,
    };
    render(&console, &viewer, StatusCode::OK, notice).await
}

pub async fn decide(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_FORM_BYTES {
        return html(
            StatusCode::PAYLOAD_TOO_LARGE,
            super::page::frame(
                "Too large",
                "",
                "<h1>Too large</h1><p class=\"alert\" role=\"alert\">The form is too large; nothing was decided.</p>",
            ),
        );
    }
    let form = pairs(&String::from_utf8_lossy(&body));
    let viewer = match console.poster(&headers, &form).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let decision = value(&form, "decision").unwrap_or_default();
    let comment = value(&form, "comment");
    match decide_as(&console.app, &viewer.who, &id, decision, comment).await {
        Ok(a) => see_other(&format!(
            "/ui/approvals?decided={}&status={}&run={}",
            url_part(&a.approval_id),
            url_part(&a.status),
            url_part(&a.run_id)
        )),
        Err(refused) => {
            let notice = Notice::Refused {
                approval_id: id,
                message: refused.message(),
            };
            render(&console, &viewer, refused.status(), notice).await
        }
    }
}

async fn render(
    console: &Console,
    viewer: &Viewer,
    status: StatusCode,
    notice: Notice,
) -> Response {
    let db = &console.app.runs.db;
    let tenant = &viewer.who.tenant_id;
    let (pending, recent) = match tokio::try_join!(
        approvals::list(db, tenant, Some("pending"), PENDING_SHOWN),
        approvals::list(db, tenant, None, PENDING_SHOWN + DECIDED_SHOWN),
    ) {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let decided: Vec<&Approval> = recent
        .iter()
        .filter(|a| a.status != "pending")
        .take(DECIDED_SHOWN as usize)
        .collect();
    let may_decide = viewer.who.scopes.iter().any(|s| s == DECIDE_SCOPE);

    let mut main = String::from("<h1>Approvals</h1>");
    match &notice {
        Notice::None => {}
        Notice::Decided {
            approval_id,
            status,
            run_id,
        } => {
            let _ = write!(
                main,
                "<p class=\"notice\" role=\"status\">Approval <code>{}</code> is {}. <a href=\"/ui/runs/{}\">Follow its run</a>.</p>",
                esc(approval_id),
                esc(status),
                url_part(run_id)
            );
        }
        Notice::Refused {
            approval_id,
            message,
        } => {
            let _ = write!(
                main,
                "<p class=\"alert\" role=\"alert\">Approval <code>{}</code> was not decided: {} ({}).</p>",
                esc(approval_id),
                esc(message),
                status.as_u16()
            );
        }
    }
    if !may_decide {
        let _ = write!(
            main,
            "<p class=\"notice\">Your API key can read approvals but not decide them: that needs the <code>{DECIDE_SCOPE}</code> scope.</p>"
        );
    }

    let _ = write!(
        main,
        "<section aria-labelledby=\"pending\"><h2 id=\"pending\">Pending ({})</h2>",
        pending.len()
    );
    if pending.is_empty() {
        main.push_str("<p class=\"empty\">Nothing waits for a decision.</p>");
    }
    for a in &pending {
        let evidence = match console.app.runs.ledger(tenant, &a.run_id).await {
            Ok(rows) => rows,
            Err(e) => return unavailable(e),
        };
        main.push_str(&pending_item(console, viewer, a, &evidence, may_decide));
    }
    main.push_str("</section>");

    main.push_str("<section aria-labelledby=\"decided\"><h2 id=\"decided\">Decided</h2>");
    if decided.is_empty() {
        main.push_str("<p class=\"empty\">No approval was decided yet.</p>");
    } else {
        main.push_str("<table class=\"decided\"><thead><tr><th scope=\"col\">Approval</th><th scope=\"col\">Status</th><th scope=\"col\">Tool</th><th scope=\"col\">Run</th>\
            <th scope=\"col\">Requested by</th><th scope=\"col\">Decided by</th><th scope=\"col\">When</th><th scope=\"col\">Comment</th></tr></thead><tbody>");
        for a in decided {
            let _ = write!(
                main,
                "<tr id=\"approval-{id}\"><td><code>{id}</code></td><td>{status}</td><td><code>{tool}</code></td><td><a href=\"/ui/runs/{runu}\">{run}</a></td>\
                 <td>{requested}</td><td>{by}</td><td>{at}</td><td>{comment}</td></tr>",
                id = esc(&a.approval_id),
                status = badge(&a.status),
                tool = esc(&a.tool_name),
                runu = url_part(&a.run_id),
                run = esc(&a.run_id),
                requested = esc(&a.requested_by),
                by = esc(a.decided_by.as_deref().unwrap_or("— (expired)")),
                at = a.decided_at_ms.map(time).unwrap_or_default(),
                comment = esc(a.comment.as_deref().unwrap_or("")),
            );
        }
        main.push_str("</tbody></table>");
    }
    main.push_str("</section>");
    html(
        status,
        page(
            viewer,
            console.app.contract.agent,
            Section::Approvals,
            "Approvals",
            &main,
        ),
    )
}

fn pending_item(
    console: &Console,
    viewer: &Viewer,
    a: &Approval,
    ledger: &[caseops_runtime::LedgerRow],
    may_decide: bool,
) -> String {
    let contract = &console.app.contract;
    let tool = contract.tools.iter().find(|t| t.name == a.tool_name);
    let title = tool.map(|t| t.title).unwrap_or_default();
    // The run's evidence so far: each call that returned a result.
    let mut evidence = String::new();
    for row in ledger.iter().filter(|r| r.status == CallStatus::Succeeded) {
        let reference = contract
            .tools
            .iter()
            .find(|t| t.name == row.tool_name)
            .map(|t| t.evidence_field)
            .and_then(|f| row.result.as_ref()?.get(f))
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            })
            .unwrap_or_default();
        let _ = write!(
            evidence,
            "<li><code>{}</code> → <code>{}</code></li>",
            esc(&row.tool_name),
            esc(&reference)
        );
    }
    if evidence.is_empty() {
        evidence = "<li>none</li>".into();
    }
    let id = esc(&a.approval_id);
    let action = if !may_decide {
        String::new()
    } else if a.requested_by == viewer.who.actor {
        "<p class=\"notice\">You started this run, so another person must decide its approval (separation of duties).</p>".to_string()
    } else {
        format!(
            "<form class=\"decide\" method=\"post\" action=\"/ui/approvals/{idu}/decision\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <label for=\"comment-{id}\">Comment</label>\
             <textarea id=\"comment-{id}\" name=\"comment\" rows=\"2\" maxlength=\"{MAX_COMMENT_CHARS}\"></textarea>\
             <div class=\"buttons\"><button type=\"submit\" name=\"decision\" value=\"approve\">Approve</button>\
             <button type=\"submit\" name=\"decision\" value=\"reject\" class=\"reject\">Reject</button></div></form>",
            idu = url_part(&a.approval_id),
            csrf = esc(&viewer.csrf),
        )
    };
    format!(
        "<article class=\"approval\" id=\"approval-{id}\" aria-labelledby=\"approval-{id}-h\">\
         <h3 id=\"approval-{id}-h\"><code>{tool}</code> {title}</h3>\
         <dl class=\"facts\"><dt>Approval</dt><dd><code>{id}</code></dd>\
         <dt>Run</dt><dd><a href=\"/ui/runs/{runu}\">{run}</a></dd>\
         <dt>Requested by</dt><dd>{requested}</dd><dt>Approver role</dt><dd>{role}</dd>\
         <dt>Requested</dt><dd>{created}</dd><dt>Expires</dt><dd>{expires}</dd>\
         <dt>Action fingerprint</dt><dd><code class=\"wrap\">{fingerprint}</code></dd></dl>\
         <h4>Arguments</h4>{arguments}<h4>Evidence so far</h4><ul class=\"plain\">{evidence}</ul>{action}</article>",
        tool = esc(&a.tool_name),
        title = esc(title),
        runu = url_part(&a.run_id),
        run = esc(&a.run_id),
        requested = esc(&a.requested_by),
        role = esc(&a.approver_role),
        created = time(a.created_at_ms),
        expires = time(a.expires_at_ms),
        fingerprint = esc(&a.fingerprint),
        arguments = json_block(&a.arguments),
    )
}
