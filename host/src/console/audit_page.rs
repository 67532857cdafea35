//! `GET /ui/audit`: the tenant's audit hash chain — its latest events, and on
//! demand (`?verify=1`) the whole chain recomputed, naming the first broken link.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use super::Console;
use super::page::{Section, esc, html, page, pairs, time, url_part, value};
use super::session::unavailable;
use crate::store::audit;

const LATEST: i64 = 25;

pub async fn show(State(console): State<Arc<Console>>, headers: HeaderMap, uri: Uri) -> Response {
    let viewer = match console.viewer_or_sign_in(&headers, &uri).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let db = &console.app.runs.db;
    let tenant = &viewer.who.tenant_id;
    let verify = value(&pairs(uri.query().unwrap_or("")), "verify").is_some();
    let mut main = String::from(
        "<h1>Audit</h1><p>Every run start, tool call, approval and run end of this tenant is an event in one hash chain: each event's hash covers the one before it, so an edited, inserted or deleted event breaks every link after it.</p>",
    );
    main.push_str("<form method=\"get\" action=\"/ui/audit\"><input type=\"hidden\" name=\"verify\" value=\"1\"><button type=\"submit\">Verify the chain</button></form>");
    if verify {
        let started = std::time::Instant::now();
        let v = match audit::verify_tenant(db, tenant).await {
            Ok(v) => v,
            Err(e) => return unavailable(e),
        };
        let took = started.elapsed().as_millis();
        match v.problems.first() {
            None => {
                let _ = write!(
                    main,
                    "<p class=\"notice ok\" role=\"status\" id=\"verification\">The chain holds: {} events verified, no broken link ({took} ms).</p>",
                    v.events
                );
            }
            Some(first) => {
                let _ = write!(
                    main,
                    "<div class=\"alert\" role=\"alert\" id=\"verification\"><p>The chain is broken: {} problems in {} events. The first broken link:</p><p><strong>{}</strong></p></div>",
                    v.problems.len(),
                    v.events,
                    esc(first)
                );
            }
        }
    }
    let entries = match audit::latest(db, tenant, LATEST).await {
        Ok(e) => e,
        Err(e) => return unavailable(e),
    };
    main.push_str("<section aria-labelledby=\"latest\"><h2 id=\"latest\">Latest events</h2>");
    if entries.is_empty() {
        main.push_str("<p class=\"empty\">The chain is empty.</p>");
    } else {
        main.push_str("<table class=\"audit\"><thead><tr><th scope=\"col\">#</th><th scope=\"col\">Kind</th><th scope=\"col\">Run</th><th scope=\"col\">At</th><th scope=\"col\">Hash</th></tr></thead><tbody>");
        for e in &entries {
            let _ = write!(
                main,
                "<tr><td>{}</td><td>{}</td><td><a href=\"/ui/runs/{}\">{}</a></td><td>{}</td><td><code>{}…</code></td></tr>",
                e.seq,
                esc(&e.kind),
                url_part(&e.run_id),
                esc(&e.run_id),
                time(e.at_ms),
                esc(e.hash.get(..16).unwrap_or(&e.hash)),
            );
        }
        main.push_str("</tbody></table>");
    }
    main.push_str("</section>");
    html(
        StatusCode::OK,
        page(
            &viewer,
            console.app.contract.agent,
            Section::Audit,
            "Audit",
            &main,
        ),
    )
}
