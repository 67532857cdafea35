//! A small load client for the MCP tool plane: starts the tool server on a loopback
//! port (in memory, CaseOps reference data) and drives `tools/call
//! caseops_get_case_snapshot` with keep-alive connections at several concurrencies.
//!
//! `cargo run --release -p caseops-service --example mcp_load -- [seconds]`

use std::time::{Duration, Instant};

use caseops_generated::{Bundle, Dispatcher};
use caseops_host::mcp::server::{McpConfig, McpServer};
use caseops_host::mcp::token::TokenIssuer;
use caseops_service::domain::reference_data;
use caseops_service::tools::{CaseOpsTools, MemoryRepository};
use serde_json::json;

const SECRET: &[u8] = b"load-test-signing-key-0123456789";

#[tokio::main]
async fn main() {
    caseops_host::install_tls_provider();
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = McpConfig::loopback(addr, "caseops-load");
    let tools = CaseOpsTools {
        repo: MemoryRepository::new(reference_data()),
    };
    let server = McpServer::<Bundle, _>::new(config.clone(), SECRET, Dispatcher(tools)).unwrap();
    tokio::spawn(async move { axum::serve(listener, server.router()).await.unwrap() });
    let issuer = TokenIssuer::new(
        SECRET,
        "caseops-load",
        config.resource_url.clone(),
        "case_id",
        600,
    )
    .unwrap();
    let token = issuer
        .issue(
            "load",
            "tenant-demo",
            "task-load",
            "C-102",
            &["case:read".to_string()],
        )
        .unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}}})
    .to_string();

    println!("concurrency  requests  errors   req/s   p50 µs   p95 µs   p99 µs   max µs");
    for concurrency in [1usize, 8, 32] {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .unwrap();
        // warm-up
        for _ in 0..200 {
            let _ = client
                .post(&config.resource_url)
                .bearer_auth(&token)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .unwrap()
                .bytes()
                .await;
        }
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let (client, url, token, body) = (
                client.clone(),
                config.resource_url.clone(),
                token.clone(),
                body.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0u64;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let ok = match client
                        .post(&url)
                        .bearer_auth(&token)
                        .header("accept", "application/json, text/event-stream")
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await
                    {
                        Ok(r) => {
                            r.status() == 200
                                && r.bytes()
                                    .await
                                    .is_ok_and(|b| !b.windows(11).any(|w| w == b"\"isError\":t"))
                        }
                        Err(_) => false,
                    };
                    if ok {
                        lat.push(t.elapsed().as_micros() as u64)
                    } else {
                        errors += 1
                    }
                }
                (lat, errors)
            }));
        }
        let mut all = Vec::new();
        let mut errors = 0;
        for t in tasks {
            let (lat, e) = t.await.unwrap();
            all.extend(lat);
            errors += e;
        }
        let elapsed = started.elapsed().as_secs_f64();
        all.sort_unstable();
        let q = |p: f64| {
            all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        println!(
            "{concurrency:>11}  {:>8}  {errors:>6}  {:>6.0}  {:>7}  {:>7}  {:>7}  {:>7}",
            all.len(),
            all.len() as f64 / elapsed,
            q(0.5),
            q(0.95),
            q(0.99),
            all.last().copied().unwrap_or(0)
        );
    }
}
