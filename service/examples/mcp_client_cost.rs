//! What one `tools/call` costs the caller: the host's own MCP client (the runs'
//! executor) against the official Rust SDK's client (`rmcp`), each in both protocol
//! eras, against the same in-memory tool server on a loopback port. One call at a
//! time; prints latency per call and the process's CPU time per call (client and
//! server share the process, so CPU is the sum of both sides).
//!
//! `cargo run --release -p caseops-service --example mcp_client_cost -- [calls]`

use std::time::{Duration, Instant};

use caseops_generated::{Bundle, Dispatcher};
use caseops_host::mcp::client::McpClient;
use caseops_host::mcp::era::Preference;
use caseops_host::mcp::server::{McpConfig, McpServer};
use caseops_host::mcp::token::TokenIssuer;
use caseops_runtime::{CallContext, ContractBundle, Executor, ToolCall};
use caseops_service::domain::reference_data;
use caseops_service::tools::{CaseOpsTools, MemoryRepository};
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

const SECRET: &[u8] = b"cost-test-signing-key-0123456789";
const ISSUER: &str = "caseops-cost";

fn cpu() -> Duration {
    // SAFETY: getrusage writes into the struct we own and reads nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(usage.ru_utime) + t(usage.ru_stime)
}

struct Row {
    p50_us: u64,
    p99_us: u64,
    cpu_us: f64,
}

async fn measure<F, Fut>(calls: usize, mut once: F) -> Row
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..calls / 10 {
        assert!(once().await, "a warm-up call failed");
    }
    let mut latencies = Vec::with_capacity(calls);
    let cpu_before = cpu();
    for _ in 0..calls {
        let t = Instant::now();
        assert!(once().await, "a measured call failed");
        latencies.push(t.elapsed().as_micros() as u64);
    }
    let cpu_used = cpu() - cpu_before;
    latencies.sort_unstable();
    Row {
        p50_us: latencies[calls / 2],
        p99_us: latencies[(calls * 99 / 100).min(calls - 1)],
        cpu_us: cpu_used.as_secs_f64() * 1e6 / calls as f64,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    caseops_host::install_tls_provider();
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = McpConfig::loopback(addr, ISSUER);
    let tools = CaseOpsTools {
        repo: MemoryRepository::new(reference_data()),
    };
    let server = McpServer::<Bundle, _>::new(config.clone(), SECRET, Dispatcher(tools)).unwrap();
    tokio::spawn(async move { axum::serve(listener, server.router()).await.unwrap() });
    let issuer =
        TokenIssuer::new(SECRET, ISSUER, config.resource_url.clone(), "case_id", 600).unwrap();
    let scopes = vec!["case:read".to_string()];
    let token = issuer
        .issue("cost", "tenant-demo", "task-cost", "C-102", &scopes)
        .unwrap();
    let arguments = json!({"case_id": "C-102"});

    println!("client  era          calls   p50 µs   p99 µs   CPU µs/call");
    for (preference, era) in [
        (Preference::Handshake, "2025-11-25"),
        (Preference::Stateless, "2026-07-28"),
    ] {
        let client = McpClient::<Bundle>::new(config.resource_url.clone(), issuer.clone())
            .with_preference(preference);
        let call = ToolCall {
            tool_call_id: "tc".into(),
            tool: Bundle::tool("caseops_get_case_snapshot").unwrap(),
            arguments: arguments.clone(),
            context: CallContext {
                tenant_id: "tenant-demo".into(),
                task_id: "task-cost".into(),
                subject: "cost".into(),
                resource_id: "C-102".into(),
                scopes: scopes.clone(),
                ..Default::default()
            },
            attempt: 1,
            timeout: Duration::from_secs(5),
        };
        let row = measure(calls, || async { client.execute(&call).await.is_ok() }).await;
        println!(
            "ours    {era}  {calls:>7}  {:>7}  {:>7}  {:>11.1}",
            row.p50_us, row.p99_us, row.cpu_us
        );
    }
    for (mode, era) in [
        (ClientLifecycleMode::Initialize, "2025-11-25"),
        (
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            "2026-07-28",
        ),
    ] {
        let transport_config =
            StreamableHttpClientTransportConfig::with_uri(config.resource_url.clone())
                .auth_header(token.clone());
        let transport =
            StreamableHttpClientTransport::with_client(reqwest::Client::new(), transport_config);
        let client = ().serve_with_lifecycle(transport, mode).await.unwrap();
        let params = CallToolRequestParams::new("caseops_get_case_snapshot")
            .with_arguments(arguments.as_object().unwrap().clone());
        let row = measure(calls, || async {
            client
                .call_tool(params.clone())
                .await
                .is_ok_and(|r| r.is_error != Some(true))
        })
        .await;
        println!(
            "rmcp    {era}  {calls:>7}  {:>7}  {:>7}  {:>11.1}",
            row.p50_us, row.p99_us, row.cpu_us
        );
        client.cancel().await.ok();
    }
}
