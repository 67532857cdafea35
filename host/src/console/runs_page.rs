//! `GET /ui/runs`: a tenant's runs, newest first, filtered by status, resource and
//! stop reason, a page at a time; rows update live (see `live.rs`).

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use super::Console;
use super::page::{Section, badge, esc, html, page, pairs, time, url_part, value};
use super::session::unavailable;
use crate::store::runs::RunFilter;

/// Runs per page.
const PAGE: i64 = 25;
/// How many of the latest runs the stop-reason suggestions come from.
const REASONS_FROM: i64 = 500;

/// A filter from the query; the page cursor is `after=<created_at>.<run_id>`.
fn filter(query: &[(String, String)]) -> RunFilter {
    RunFilter {
        status: value(query, "status").map(str::to_string),
        resource_id: value(query, "resource").map(str::to_string),
        stop_reason: value(query, "stop_reason").map(str::to_string),
        after: value(query, "after").and_then(|a| {
            let (at, id) = a.split_once('.')?;
            Some((at.parse().ok()?, id.to_string()))
        }),
    }
}

/// The query string of `f` without its cursor (`&`-joined, ready to extend).
fn filter_query(f: &RunFilter) -> String {
    let mut q = Vec::new();
    for (k, v) in [
        ("status", &f.status),
        ("resource", &f.resource_id),
        ("stop_reason", &f.stop_reason),
    ] {
        if let Some(v) = v {
            q.push(format!("{k}={}", url_part(v)));
        }
    }
    q.join("&")
}

pub async fn list(State(console): State<Arc<Console>>, headers: HeaderMap, uri: Uri) -> Response {
    let viewer = match console.viewer_or_sign_in(&headers, &uri).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let query = pairs(uri.query().unwrap_or(""));
    let f = filter(&query);
    let tenant = &viewer.who.tenant_id;
    let runs = &console.app.runs;
    // One more than a page: whether there is a next one.
    let (mut found, reasons) = match tokio::try_join!(
        runs.search(tenant, &f, PAGE + 1),
        runs.recent_stop_reasons(tenant, REASONS_FROM)
    ) {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let more = found.len() as i64 > PAGE;
    found.truncate(PAGE as usize);
    let contract = &console.app.contract;
    let resource = contract.resource_type;

    let mut main = String::from("<h1>Runs</h1>");
    // The filter form.
    let mut statuses = vec!["running", "waiting_approval"];
    statuses.extend(
        contract
            .states
            .iter()
            .filter(|(_, terminal)| *terminal)
            .map(|(s, _)| *s),
    );
    let mut options = String::from("<option value=\"\">any</option>");
    for s in statuses {
        let selected = if f.status.as_deref() == Some(s) {
            " selected"
        } else {
            ""
        };
        let _ = write!(options, "<option value=\"{s}\"{selected}>{s}</option>");
    }
    let mut datalist = String::new();
    for r in &reasons {
        let _ = write!(datalist, "<option value=\"{}\">", esc(r));
    }
    let _ = write!(
        main,
        "<form class=\"filters\" method=\"get\" action=\"/ui/runs\" aria-label=\"Filter runs\">\
         <div><label for=\"status\">Status</label><select id=\"status\" name=\"status\">{options}</select></div>\
         <div><label for=\"resource\">{resource}</label><input id=\"resource\" name=\"resource\" value=\"{rv}\"></div>\
         <div><label for=\"stop_reason\">Stop reason</label><input id=\"stop_reason\" name=\"stop_reason\" list=\"stop-reasons\" value=\"{sv}\"><datalist id=\"stop-reasons\">{datalist}</datalist></div>\
         <div><button type=\"submit\">Filter</button> <a href=\"/ui/runs\">Clear</a></div></form>",
        resource = esc(resource),
        rv = esc(f.resource_id.as_deref().unwrap_or("")),
        sv = esc(f.stop_reason.as_deref().unwrap_or("")),
    );

    // Unfinished runs on this page are followed live; on the first page, runs
    // created after the newest one shown are announced.
    let watch: Vec<&str> = found
        .iter()
        .filter(|r| crate::store::runs::SqlRunStore::outcome_of(r).is_none())
        .map(|r| r.run_id.as_str())
        .collect();
    let since = match f.after {
        None => found.first().map_or(0, |r| r.created_at),
        // Older pages announce nothing new.
        Some(_) => i64::MAX,
    };
    if !watch.is_empty() || since < i64::MAX {
        let _ = write!(
            main,
            "<p class=\"live-note\" data-live-runs=\"/ui/live?watch={}&amp;since={since}\" aria-live=\"polite\"></p>",
            esc(&url_part(&watch.join(",")))
        );
    }
    if found.is_empty() {
        main.push_str("<p class=\"empty\">No runs match.</p>");
    } else {
        let _ = write!(
            main,
            "<table class=\"runs\"><caption class=\"visually-hidden\">Runs, newest first</caption><thead><tr>\
             <th scope=\"col\">Run</th><th scope=\"col\">{}</th><th scope=\"col\">Status</th><th scope=\"col\">State</th>\
             <th scope=\"col\">Steps</th><th scope=\"col\">Stop reason</th><th scope=\"col\">Started</th><th scope=\"col\">Updated</th></tr></thead><tbody>",
            esc(resource)
        );
        for r in &found {
            let _ = write!(
                main,
                "<tr data-run-id=\"{id}\"><td><a href=\"/ui/runs/{idu}\">{id}</a></td><td>{res}</td>\
                 <td class=\"status\">{status}</td><td class=\"state\">{state}</td><td class=\"steps\">{steps}</td>\
                 <td class=\"stop\">{stop}</td><td>{created}</td><td class=\"updated\">{updated}</td></tr>",
                id = esc(&r.run_id),
                idu = url_part(&r.run_id),
                res = esc(&r.resource_id),
                status = badge(&r.status),
                state = esc(&r.state),
                steps = r.step_count,
                stop = esc(r.stop_reason.as_deref().unwrap_or("")),
                created = time(r.created_at),
                updated = time(r.updated_at),
            );
        }
        main.push_str("</tbody></table>");
    }
    let base = filter_query(&f);
    let mut nav = String::new();
    if f.after.is_some() {
        let _ = write!(nav, "<a href=\"/ui/runs?{}\">Newest runs</a>", esc(&base));
    }
    if more && let Some(last) = found.last() {
        let sep = if base.is_empty() { "" } else { "&" };
        let cursor = url_part(&format!("{}.{}", last.created_at, last.run_id));
        let _ = write!(
            nav,
            "<a href=\"/ui/runs?{}{sep}after={cursor}\" rel=\"next\">Older runs</a>",
            esc(&base)
        );
    }
    if !nav.is_empty() {
        let _ = write!(
            main,
            "<nav class=\"pages\" aria-label=\"Pages\">{nav}</nav>"
        );
    }
    html(
        StatusCode::OK,
        page(&viewer, contract.agent, Section::Runs, "Runs", &main),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_round_trips_through_its_query() {
        let f = filter(&pairs(
            "status=stopped&resource=R+1&stop_reason=step_budget_exhausted&after=1700.run-9",
        ));
        assert_eq!(f.status.as_deref(), Some("stopped"));
        assert_eq!(f.resource_id.as_deref(), Some("R 1"));
        assert_eq!(f.after, Some((1700, "run-9".to_string())));
        let again = filter(&pairs(&filter_query(&f)));
        assert_eq!(again.stop_reason, f.stop_reason);
        assert_eq!(again.resource_id, f.resource_id);
        assert_eq!(again.after, None);
    }

    #[test]
    fn a_malformed_cursor_starts_from_the_newest() {
        assert_eq!(filter(&pairs("after=yesterday")).after, None);
        assert_eq!(filter(&pairs("after=12")).after, None);
    }
}
