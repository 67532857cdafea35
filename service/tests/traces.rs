//! The trace of a C-102 run, as a real OTLP/HTTP receiver (an in-test server
//! decoding the protobuf export requests) gets it from `caseops serve
//! --otlp-endpoint`: one trace continuing the caller's `traceparent`, the run's
//! `invoke_agent` span under the API request, four `execute_tool` spans with their
//! GenAI and CaseOps attributes, and the MCP server's spans under each of them.

mod db_support;
mod serve_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const TOOLS: [&str; 4] = [
    "caseops_get_case_snapshot",
    "caseops_get_policy_requirements",
    "caseops_list_unclassified_documents",
    "caseops_resolve_document_alias",
];

type Received = Arc<Mutex<Vec<Span>>>;

/// An OTLP/HTTP traces endpoint on an ephemeral port: its base URL and what it got.
async fn receiver() -> (String, Received) {
    let received: Received = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| async move {
            let request = ExportTraceServiceRequest::decode(body).expect("an OTLP export request");
            let mut spans = sink.lock().unwrap();
            for resource in request.resource_spans {
                for scope in resource.scope_spans {
                    spans.extend(scope.spans);
                }
            }
            // An empty ExportTraceServiceResponse.
            (
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    Some(match value.value.as_ref()? {
        Any::StringValue(s) => s.clone(),
        Any::IntValue(i) => i.to_string(),
        Any::BoolValue(b) => b.to_string(),
        Any::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c102_run_is_one_trace_from_the_callers_span_through_the_mcp_server() {
    let dbs = db_support::fresh_databases("traces").await;
    let (collector, received) = receiver().await;
    let server = serve_support::serve(
        dbs.sqlite(),
        &["--otlp-endpoint", &collector],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
        false,
    );
    let caller = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let run = server
        .start_c102("traces-0001", &[("traceparent", &caller)])
        .await;
    assert_eq!(run["status"], "completed", "{run}");

    // Spans end bottom-up; the request span is the last of the run's trace.
    let mut spans = Vec::new();
    for _ in 0..100 {
        spans = received.lock().unwrap().clone();
        let ours: Vec<&Span> = spans
            .iter()
            .filter(|s| hex(&s.trace_id) == TRACE_ID)
            .collect();
        if ours.iter().any(|s| s.name.starts_with("POST /v1/cases")) && ours.len() >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ours: Vec<&Span> = spans
        .iter()
        .filter(|s| hex(&s.trace_id) == TRACE_ID)
        .collect();
    let by_id: HashMap<String, &Span> = ours.iter().map(|s| (hex(&s.span_id), *s)).collect();
    let names: Vec<&str> = ours.iter().map(|s| s.name.as_str()).collect();
    let named =
        |name: &str| -> Vec<&Span> { ours.iter().copied().filter(|s| s.name == name).collect() };
    let parent_of = |s: &Span| hex(&s.parent_span_id);

    let request = named("POST /v1/cases/{case_id}/agent-runs");
    assert_eq!(request.len(), 1, "{names:?}");
    let request = request[0];
    assert_eq!(
        parent_of(request),
        CALLER_SPAN,
        "the caller's span parents the request"
    );
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(
        attr(request, "http.response.status_code").as_deref(),
        Some("201")
    );

    let agent = named("invoke_agent caseops_investigation");
    assert_eq!(agent.len(), 1, "{names:?}");
    let agent = agent[0];
    assert_eq!(parent_of(agent), hex(&request.span_id));
    assert_eq!(
        attr(agent, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        attr(agent, "caseops.run.id"),
        run["run_id"].as_str().map(str::to_string)
    );
    assert_eq!(
        attr(agent, "caseops.run.status").as_deref(),
        Some("completed")
    );

    let rounds = named("chat");
    assert_eq!(rounds.len(), 5, "four tool calls and the answer: {names:?}");
    assert!(rounds.iter().all(|r| parent_of(r) == hex(&agent.span_id)));

    for tool in TOOLS {
        let calls = named(&format!("execute_tool {tool}"));
        assert_eq!(calls.len(), 1, "{tool}: {names:?}");
        let call = calls[0];
        assert_eq!(parent_of(call), hex(&agent.span_id), "{tool}");
        assert_eq!(
            attr(call, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
        assert_eq!(attr(call, "gen_ai.tool.name").as_deref(), Some(tool));
        let call_id = attr(call, "gen_ai.tool.call.id").unwrap();
        assert!(
            call_id.starts_with(run["run_id"].as_str().unwrap()),
            "{call_id}"
        );
        assert_eq!(
            attr(call, "caseops.action.fingerprint").map(|f| f.len()),
            Some(64)
        );
        assert_eq!(
            attr(call, "caseops.tool.risk").as_deref(),
            Some("read_only")
        );
        assert_eq!(
            attr(call, "caseops.authorization.decision").as_deref(),
            Some("allow")
        );
        assert_eq!(
            attr(call, "caseops.authorization.reason").as_deref(),
            Some("permitted")
        );
        assert_eq!(attr(call, "caseops.attempt").as_deref(), Some("1"));
        assert_eq!(attr(call, "error.type"), None);

        // The tool server's side, in the same trace under this call: its HTTP
        // request (header `traceparent`) and its `tools/call` (`_meta.traceparent`).
        let served = named(&format!("tools/call {tool}"));
        assert_eq!(served.len(), 1, "{tool}: {names:?}");
        assert_eq!(parent_of(served[0]), hex(&call.span_id), "{tool}");
        assert_eq!(
            attr(served[0], "mcp.method.name").as_deref(),
            Some("tools/call")
        );
        let mcp_request = ours
            .iter()
            .find(|s| s.name == "POST /mcp" && parent_of(s) == hex(&call.span_id));
        assert!(
            mcp_request.is_some(),
            "{tool}: no MCP request span under the call"
        );
        // The commit before the call, under it too.
        assert!(
            ours.iter()
                .any(|s| s.name == "commit" && parent_of(s) == hex(&call.span_id)),
            "{tool}"
        );
    }
    if let Ok(path) = std::env::var("CASEOPS_TRACE_SVG") {
        std::fs::write(&path, timeline_svg(&ours)).unwrap();
    }
    // Every span of the trace hangs from the caller's span.
    for s in &ours {
        let mut at = *s;
        let mut hops = 0;
        while parent_of(at) != CALLER_SPAN {
            at = by_id
                .get(&parent_of(at))
                .unwrap_or_else(|| panic!("`{}` has a parent outside the trace", s.name));
            hops += 1;
            assert!(hops < 10);
        }
    }
}

/// The trace drawn as a timeline, one row per span in tree order (depth-first,
/// children by start time), for docs/operations.md: `CASEOPS_TRACE_SVG=path cargo
/// test -p caseops-service --test traces` redraws it.
fn timeline_svg(spans: &[&Span]) -> String {
    let ids: Vec<String> = spans.iter().map(|s| hex(&s.span_id)).collect();
    let mut rows: Vec<(usize, &Span)> = Vec::new();
    fn visit<'a>(at: &str, depth: usize, spans: &[&'a Span], rows: &mut Vec<(usize, &'a Span)>) {
        let mut children: Vec<&Span> = spans
            .iter()
            .copied()
            .filter(|s| hex(&s.parent_span_id) == at)
            .collect();
        children.sort_by_key(|s| s.start_time_unix_nano);
        for c in children {
            rows.push((depth, c));
            visit(&hex(&c.span_id), depth + 1, spans, rows);
        }
    }
    let roots: Vec<String> = spans
        .iter()
        .filter(|s| !ids.contains(&hex(&s.parent_span_id)))
        .map(|s| hex(&s.parent_span_id))
        .collect();
    if let Some(root) = roots.first() {
        visit(root, 0, spans, &mut rows);
    }
    let t0 = spans
        .iter()
        .map(|s| s.start_time_unix_nano)
        .min()
        .unwrap_or(0);
    let t1 = spans
        .iter()
        .map(|s| s.end_time_unix_nano)
        .max()
        .unwrap_or(t0 + 1);
    let (label_w, bar_w, row_h) = (330.0, 560.0, 18.0);
    let scale = bar_w / (t1 - t0).max(1) as f64;
    let height = row_h * (rows.len() as f64 + 2.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"monospace\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"4\" y=\"13\">C-102 run, one trace: {:.2} ms from the API request to its answer</text>\n",
        label_w + bar_w + 80.0,
        (t1 - t0) as f64 / 1e6
    );
    for (i, (depth, s)) in rows.iter().enumerate() {
        let y = row_h * (i as f64 + 1.5);
        let x = label_w + (s.start_time_unix_nano - t0) as f64 * scale;
        let w = ((s.end_time_unix_nano - s.start_time_unix_nano) as f64 * scale).max(1.0);
        let fill = match s.name.split(' ').next().unwrap_or("") {
            "invoke_agent" => "#4c78a8",
            "chat" => "#f58518",
            "execute_tool" => "#54a24b",
            "tools/call" => "#b279a2",
            "commit" => "#9d755d",
            _ => "#bab0ac",
        };
        let name = s.name.replace('&', "&amp;").replace('<', "&lt;");
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\">{name}</text><rect x=\"{x:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"{}\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{}\" fill=\"#555\">{:.3} ms</text>\n",
            4.0 + 12.0 * *depth as f64,
            y + 12.0,
            y + 3.0,
            row_h - 5.0,
            x + w + 4.0,
            y + 12.0,
            (s.end_time_unix_nano - s.start_time_unix_nano) as f64 / 1e6
        ));
    }
    svg.push_str("</svg>\n");
    svg
}
