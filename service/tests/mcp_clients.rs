//! Clients of our MCP server: the runtime's own executor, the official Rust SDK
//! (`rmcp`) and the official Python SDK (`mcp`).

mod mcp_support;

use std::collections::VecDeque;
use std::sync::Mutex;

use axum::response::IntoResponse;
use caseops_generated::Bundle;
use caseops_host::mcp::client::{McpClient, ReadinessError, compare_listings};
use caseops_host::mcp::era::Preference;
use caseops_runtime::context::PlannerView;
use caseops_runtime::store::MemoryStore;
use caseops_runtime::{
    CallContext, CallStatus, ContractBundle, Engine, ExecError, Executor, Planner, PlannerError,
    RunSpec, ToolCall,
};
use mcp_support::*;
use serde_json::{Value, json};

struct Script(Mutex<VecDeque<Value>>);

impl Planner for Script {
    fn kind(&self) -> &'static str {
        "script"
    }
    async fn propose(&self, _: &PlannerView) -> Result<Value, PlannerError> {
        self.0
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| PlannerError("done".into()))
    }
}

fn spec() -> RunSpec {
    RunSpec {
        run_id: "mcp-run-1".into(),
        tenant_id: "tenant-demo".into(),
        task_id: "task-mcp-1".into(),
        subject: "user:alice".into(),
        resource_id: "C-102".into(),
        scopes: ALL_SCOPES.iter().map(|s| s.to_string()).collect(),
        catalog: Bundle::CATALOG.iter().map(|s| s.to_string()).collect(),
        stage: "investigating".into(),
        goal: "check C-102".into(),
        correlation_id: "req".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_runs_c102_through_the_mcp_server_in_either_era() {
    let s = start().await;
    for (preference, version) in [
        (Preference::Auto, "2026-07-28"),
        (Preference::Stateless, "2026-07-28"),
        (Preference::Handshake, "2025-11-25"),
    ] {
        let client =
            McpClient::<Bundle>::new(s.url.clone(), s.issuer.clone()).with_preference(preference);
        client
            .check_listing()
            .await
            .expect("listing matches the compiled one");
        assert_eq!(client.protocol_version().await.as_deref(), Some(version));
        run_c102(&client).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_runs_c102_through_the_in_process_server_in_either_era() {
    let s = start().await;
    for (preference, version) in [
        (Preference::Auto, "2026-07-28"),
        (Preference::Handshake, "2025-11-25"),
    ] {
        let client =
            McpClient::<Bundle>::in_process(s.url.clone(), s.issuer.clone(), s.router.clone())
                .unwrap()
                .with_preference(preference);
        client
            .check_listing()
            .await
            .expect("listing matches the compiled one");
        assert_eq!(client.protocol_version().await.as_deref(), Some(version));
        run_c102(&client).await;
    }
}

/// A 2025-11-25 server: ours behind a proxy that answers `server/discover` as a
/// server of that era does (method not found).
async fn handshake_only(target: String) -> String {
    use axum::body::Bytes;
    use axum::http::HeaderMap;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let target = target.clone();
            async move {
                let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if message["method"] == "server/discover" {
                    let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                        "error": {"code": -32601, "message": "Method not found"}});
                    return (axum::http::StatusCode::OK, answer.to_string());
                }
                let mut forward = reqwest::Client::new().post(&target).body(body);
                for name in [
                    "authorization",
                    "accept",
                    "content-type",
                    "mcp-protocol-version",
                ] {
                    if let Some(v) = headers.get(name) {
                        forward = forward.header(name, v.as_bytes());
                    }
                }
                let r = forward.send().await.unwrap();
                let status = axum::http::StatusCode::from_u16(r.status().as_u16()).unwrap();
                (status, r.text().await.unwrap())
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_falls_back_to_the_handshake_for_a_2025_11_25_server() {
    let s = start().await;
    let url = handshake_only(s.url.clone()).await;
    let client = McpClient::<Bundle>::new(url.clone(), s.issuer.clone());
    client
        .check_listing()
        .await
        .expect("the listing is compared after the fallback");
    assert_eq!(
        client.protocol_version().await.as_deref(),
        Some("2025-11-25")
    );
    run_c102(&client).await;
    // Insisting on the stateless era names why it cannot.
    let strict =
        McpClient::<Bundle>::new(url, s.issuer.clone()).with_preference(Preference::Stateless);
    let err = strict.check_listing().await.unwrap_err().to_string();
    assert!(err.contains("does not speak 2026-07-28"), "{err}");
}

async fn run_c102(client: &McpClient<Bundle>) {
    let call = |t: &str, a: Value| json!({"decision": "tool_call", "tool": t, "arguments": a});
    let planner = Script(Mutex::new(VecDeque::from([
        call("caseops_get_case_snapshot", json!({"case_id": "C-102"})),
        call(
            "caseops_get_policy_requirements",
            json!({"case_id": "C-102"}),
        ),
        call(
            "caseops_list_unclassified_documents",
            json!({"case_id": "C-102"}),
        ),
        call(
            "caseops_resolve_document_alias",
            json!({"case_id": "C-102", "document_id": "DOC-C102-003"}),
        ),
        json!({"decision": "final", "answer": {"outcome": "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION", "summary": "ok",
            "received_document_codes": ["IDENTITY_DOCUMENT", "LOSS_STATEMENT"], "resolved_document_codes": ["ACCIDENT_CERTIFICATE"],
            "missing_document_codes": [], "evidence_refs": ["case://C-102@7"]}}),
    ])));
    let store = MemoryStore::new();
    let out = Engine::<Bundle>::new()
        .unwrap()
        .start(spec(), &planner, client, &store)
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    let run = store.get("mcp-run-1").unwrap();
    assert!(
        run.ledger
            .iter()
            .all(|r| r.status == CallStatus::Succeeded && r.attempt_count == 1)
    );
    assert_eq!(
        run.ledger[0].result.as_ref().unwrap()["evidence_ref"],
        "case://C-102@7"
    );
}

fn tool_call(tool: &str, args: Value, ctx: CallContext) -> ToolCall {
    ToolCall {
        tool_call_id: "tc-1".into(),
        tool: Bundle::tool(tool).unwrap(),
        arguments: args,
        context: ctx,
        attempt: 1,
        timeout: std::time::Duration::from_secs(5),
    }
}

/// The error `client` answers one call with (the call must fail).
async fn refusal(
    client: &McpClient<Bundle>,
    tool: &str,
    args: Value,
    ctx: CallContext,
) -> ExecError {
    client
        .execute(&tool_call(tool, args, ctx))
        .await
        .unwrap_err()
}

fn ctx(tenant: &str, case: &str, scopes: &[&str]) -> CallContext {
    CallContext {
        tenant_id: tenant.into(),
        task_id: format!("task-{tenant}-{case}-{}", scopes.len()),
        subject: "user:alice".into(),
        resource_id: case.into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// The same client over HTTP and handed to the server's router.
fn both_transports(s: &TestServer) -> [McpClient<Bundle>; 2] {
    [
        McpClient::<Bundle>::new(s.url.clone(), s.issuer.clone()),
        McpClient::<Bundle>::in_process(s.url.clone(), s.issuer.clone(), s.router.clone()).unwrap(),
    ]
}

#[tokio::test]
async fn the_client_classifies_errors_by_class_over_either_transport() {
    let s = start().await;
    for client in both_transports(&s) {
        classifies_errors_by_class(&client).await;
    }
}

async fn classifies_errors_by_class(client: &McpClient<Bundle>) {
    let e = refusal(
        client,
        "caseops_get_case_snapshot",
        json!({"case_id": "C-404"}),
        ctx("tenant-demo", "C-404", ALL_SCOPES),
    )
    .await;
    assert!(
        matches!(e, ExecError::Business { ref code, .. } if code == "CASE_NOT_FOUND"),
        "{e:?}"
    );
    let e = refusal(
        client,
        "caseops_get_case_snapshot",
        json!({"case_id": "C-999"}),
        ctx("tenant-demo", "C-102", ALL_SCOPES),
    )
    .await;
    assert!(
        matches!(e, ExecError::Authorization { ref code, .. } if code == "TOOL_RESOURCE_MISMATCH"),
        "{e:?}"
    );
    let e = refusal(
        client,
        "caseops_get_policy_requirements",
        json!({"case_id": "C-102"}),
        ctx("tenant-demo", "C-102", &["case:read"]),
    )
    .await;
    assert!(
        matches!(e, ExecError::Authorization { ref code, .. } if code == "INSUFFICIENT_SCOPE"),
        "{e:?}"
    );
    let e = refusal(
        client,
        "caseops_get_case_snapshot",
        json!({"case_id": "C-102", "x": 1}),
        ctx("tenant-demo", "C-102", ALL_SCOPES),
    )
    .await;
    assert!(
        matches!(e, ExecError::Contract { ref code, .. } if code == "INVALID_ARGUMENTS"),
        "{e:?}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_transient_error() {
    let s = start().await;
    let client = McpClient::<Bundle>::new("http://127.0.0.1:9/mcp", s.issuer.clone());
    let e = refusal(
        &client,
        "caseops_get_case_snapshot",
        json!({"case_id": "C-102"}),
        ctx("tenant-demo", "C-102", ALL_SCOPES),
    )
    .await;
    assert!(matches!(e, ExecError::Transient { .. }), "{e:?}");
    assert!(matches!(
        client.check_listing().await,
        Err(ReadinessError::Unreachable(_))
    ));
}

/// A tool handler that panics in a server of the same process ends its request,
/// as a dropped connection would: the call is unanswered (a transient error for a
/// read), and the client and its caller go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_handler_that_panics_in_process_leaves_the_call_unanswered_not_the_caller_dead() {
    let s = start().await;
    let handler = |body: axum::body::Bytes| async move {
        let message: Value = serde_json::from_slice(&body).unwrap();
        match message["method"].as_str() {
            Some("initialize") => axum::Json(json!({"jsonrpc": "2.0", "id": message["id"],
                "result": {"protocolVersion": "2025-11-25", "capabilities": {},
                    "serverInfo": {"name": "panicking", "version": "0"}}}))
            .into_response(),
            Some("tools/call") => panic!("the tool handler failed"),
            _ => axum::http::StatusCode::ACCEPTED.into_response(),
        }
    };
    let router = axum::Router::new().route("/mcp", axum::routing::post(handler));
    let client = McpClient::<Bundle>::in_process(s.url.clone(), s.issuer.clone(), router)
        .unwrap()
        .with_preference(Preference::Handshake);
    for _ in 0..2 {
        let e = refusal(
            &client,
            "caseops_get_case_snapshot",
            json!({"case_id": "C-102"}),
            ctx("tenant-demo", "C-102", ALL_SCOPES),
        )
        .await;
        assert!(
            matches!(e, ExecError::Transient { ref code, .. } if code == "MCP_NO_ANSWER"),
            "{e:?}"
        );
    }
}

#[tokio::test]
async fn the_task_token_cache_stays_bounded_however_many_runs_pass() {
    let s = start().await;
    let client = McpClient::<Bundle>::new(s.url.clone(), s.issuer.clone());
    let mut first = ctx("tenant-demo", "C-102", ALL_SCOPES);
    first.task_id = "task-kept".into();
    let token = client.token_for(&first).unwrap();
    assert_eq!(
        client.token_for(&first).unwrap(),
        token,
        "reused while fresh"
    );
    for i in 0..5_000 {
        let mut c = ctx("tenant-demo", "C-102", ALL_SCOPES);
        c.task_id = format!("task-{i}");
        client.token_for(&c).unwrap();
    }
    assert!(
        client.cached_tokens() <= 1024,
        "{} tokens cached",
        client.cached_tokens()
    );
    // A token dropped from the cache is issued anew and still works.
    let again = client.token_for(&first).unwrap();
    let r = s
        .post(
            Some(&again),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_request_the_tool_server_refuses_for_its_host_is_not_a_scope_denial() {
    // A tool server that accepts no Host the client sends: a deployment fault. The
    // in-process client is refused alike: the router checks what the socket would.
    let s = start_with(|c| c.allowed_hosts = vec!["tools.internal:443".into()]).await;
    for client in both_transports(&s) {
        refused_for_its_host(&s, &client).await;
    }
}

async fn refused_for_its_host(s: &TestServer, client: &McpClient<Bundle>) {
    let e = refusal(
        client,
        "caseops_get_case_snapshot",
        json!({"case_id": "C-102"}),
        ctx("tenant-demo", "C-102", ALL_SCOPES),
    )
    .await;
    match &e {
        ExecError::Authorization { code, message } => {
            assert_eq!(code, "MCP_REQUEST_REFUSED", "{e:?}");
            assert!(
                message.contains(&format!("host `{}` not allowed", s.addr)),
                "{e:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let readiness = client.check_listing().await.unwrap_err().to_string();
    assert!(
        readiness.contains("not allowed") && readiness.contains("--mcp-public-url"),
        "{readiness}"
    );
}

#[test]
fn a_listing_that_differs_from_the_compiled_one_names_the_tool_and_the_difference() {
    let compiled: Value = serde_json::from_str(Bundle::MCP_TOOLS).unwrap();
    let compiled = compiled["tools"].as_array().unwrap().clone();
    assert_eq!(compare_listings(&compiled, &compiled), Ok(()));
    let mut changed = compiled.clone();
    let policy = compiled
        .iter()
        .position(|t| t["name"] == "caseops_get_policy_requirements")
        .unwrap();
    changed[policy]["inputSchema"]["properties"]["case_id"]["maxLength"] = json!(9);
    assert_eq!(
        compare_listings(&compiled, &changed),
        Err(ReadinessError::Mismatch {
            tool: "caseops_get_policy_requirements".into(),
            difference: "`inputSchema` differs".into()
        })
    );
    let missing: Vec<Value> = compiled
        .iter()
        .filter(|t| t["name"] != "caseops_resolve_document_alias")
        .cloned()
        .collect();
    let err = compare_listings(&compiled, &missing).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool `caseops_resolve_document_alias` differs from the compiled listing: not listed by the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_rust_sdk_client_lists_and_calls_every_tool_in_either_era() {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::ClientLifecycleMode;

    let s = start().await;
    for (mode, version) in [
        (ClientLifecycleMode::Initialize, "2025-11-25"),
        (
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            "2026-07-28",
        ),
    ] {
        rmcp_lists_and_calls(&s, mode, version).await;
    }
}

async fn rmcp_lists_and_calls(
    s: &TestServer,
    mode: rmcp::service::ClientLifecycleMode,
    version: &str,
) {
    use rmcp::model::CallToolRequestParams;
    use rmcp::service::ClientServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let config =
        StreamableHttpClientTransportConfig::with_uri(s.url.clone()).auth_header(s.demo_token());
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    let client =
        ().serve_with_lifecycle(transport, mode)
            .await
            .expect("rmcp starts a session with our server");
    let negotiated = client
        .peer_info()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    assert_eq!(negotiated, version);
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 5, "the demo token's reads");
    assert!(tools.iter().all(|t| t.output_schema.is_some()));
    for (tool, args) in [
        ("caseops_get_case_snapshot", json!({"case_id": "C-102"})),
        (
            "caseops_get_policy_requirements",
            json!({"case_id": "C-102"}),
        ),
        (
            "caseops_list_unclassified_documents",
            json!({"case_id": "C-102"}),
        ),
        (
            "caseops_resolve_document_alias",
            json!({"case_id": "C-102", "document_id": "DOC-C102-003"}),
        ),
    ] {
        let params =
            CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
        let result = client.call_tool(params).await.unwrap();
        assert_ne!(result.is_error, Some(true), "{tool}");
        let structured = result.structured_content.expect("structured content");
        assert!(
            structured["evidence_ref"].is_string(),
            "{tool}: {structured}"
        );
    }
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_client_lists_and_calls_every_tool_in_either_era() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import mcp"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        // CI installs the SDK (.ci/run); there a missing SDK is a failure, not a skip.
        assert!(
            std::env::var_os("CI").is_none(),
            "python `mcp` package missing in CI"
        );
        // Past the harness's capture, so that the gap shows in a passing run.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"note: skipped the official Python SDK interop test: `pip install mcp==2.3.0` to run it\n",
        );
        return;
    }
    let s = start().await;
    for era in ["2025-11-25", "2026-07-28"] {
        python_lists_and_calls(&s, era).await;
    }
}

async fn python_lists_and_calls(s: &TestServer, era: &str) {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/python_client.py");
    let token = s.demo_token();
    let url = s.url.clone();
    let mut python = std::process::Command::new("python3");
    python.arg(script).arg(url).arg(token).arg(era);
    let report = json_report(python, "the python client").await;
    assert_eq!(report["protocol_version"], era);
    // The demo token's reads: the investigation's four and the transition check.
    assert_eq!(
        report["tools"].as_array().unwrap().len(),
        5,
        "{}",
        report["tools"]
    );
    for call in report["calls"].as_array().unwrap() {
        assert_eq!(call["is_error"], false, "{call}");
        assert!(call["structured"]["evidence_ref"].is_string(), "{call}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_loads_tools_call_in_either_era_without_errors() {
    let s = start().await;
    for (era, scenario) in [
        ("2025-11-25", "mcp-call"),
        ("2026-07-28", "mcp-call@2026-07-28"),
    ] {
        let mut bench = std::process::Command::new(env!("CARGO_BIN_EXE_caseops"));
        bench
            .args(["bench", "--scenario", "mcp-call", "--mcp-era", era])
            .args(["--concurrency", "2", "--requests", "40", "--warmup", "0"])
            .args(["--mcp", &s.url, "--token-issuer", ISSUER, "--json"])
            .env("CASEOPS_SIGNING_KEY", std::str::from_utf8(SECRET).unwrap());
        let report = json_report(bench, &format!("bench in {era}")).await;
        assert_eq!(report["scenario"], scenario);
        assert_eq!(report["errors"], 0, "{era}: {report}");
        assert!(report["completed"].as_u64().unwrap() >= 40, "{report}");
    }
}

/// Runs `command` off the async threads; it must succeed and print one JSON value.
async fn json_report(mut command: std::process::Command, what: &str) -> Value {
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
