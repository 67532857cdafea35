//! `caseops bench`: a load generator for a running `caseops serve`.
//!
//! Scenarios: `agent-run` (a fresh Idempotency-Key per request on C-102), `replay`
//! (one key, answered from the stored run) and `mcp-call` (`tools/call
//! caseops_get_case_snapshot` with a valid task token). Keep-alive connections, a
//! warm-up, then a fixed duration or request count; latencies in an HDR histogram.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use caseops_host::mcp::era::{self, Preference};
use caseops_host::mcp::token::TokenIssuer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    AgentRun,
    Replay,
    McpCall,
}

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub scenario: Scenario,
    pub api_url: String,
    pub mcp_url: String,
    pub api_key: String,
    pub signing_key: String,
    /// The server's task-token issuer (its `--token-issuer`, by default its API URL).
    pub token_issuer: String,
    /// The MCP era `mcp-call` speaks: a bare request after the handshake era's rules,
    /// or the stateless era's `_meta` envelope and standard headers.
    pub mcp_era: Preference,
    pub concurrency: usize,
    pub duration: Duration,
    pub requests: Option<u64>,
    pub warmup: Duration,
    pub allow_remote: bool,
    /// Also measure commit-to-consumer latency of relayed events: (NATS URL, stream).
    pub events_from: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchReport {
    pub scenario: String,
    pub concurrency: usize,
    pub completed: u64,
    pub errors: u64,
    pub seconds: f64,
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Events relayed while measuring (with `--events-from`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<crate::event_latency::EventLatency>,
}

/// Loopback only, unless explicitly allowed: a load test must not hit someone else.
pub fn check_target(url: &str, allow_remote: bool) -> Result<(), String> {
    let host = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .map(|authority| match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default().to_string(),
            None => authority
                .rsplit_once(':')
                .map(|(h, _)| h)
                .unwrap_or(authority)
                .to_string(),
        })
        .ok_or_else(|| format!("`{url}` is not an http URL"))?;
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback || allow_remote {
        Ok(())
    } else {
        Err(format!(
            "`{url}` is not a loopback address; pass --allow-remote to load a remote host"
        ))
    }
}

struct Target {
    http: reqwest::Client,
    config: BenchConfig,
    token: String,
    replay_key: String,
}

/// One request of a scenario, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

impl Prepared {
    /// The request as HTTP/1.1 text, for a load tool that sends raw requests
    /// (`tests/load/mcp_call.lua` has `wrk` send it).
    pub fn http_text(&self) -> Result<String, String> {
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| format!("`{}` is not a URL: {e}", self.url))?;
        let host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => return Err(format!("`{}` names no host", self.url)),
        };
        let target = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        };
        let mut text = format!("POST {target} HTTP/1.1\r\nHost: {host}\r\n");
        for (name, value) in &self.headers {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text.push_str(&format!(
            "Content-Length: {}\r\n\r\n{}",
            self.body.len(),
            self.body
        ));
        Ok(text)
    }
}

const GOAL: &str = r#"{"goal":"Check whether claim case C-102 holds every required document."}"#;

/// The request `scenario` sends; `key` is the agent run's Idempotency-Key.
fn prepare(c: &BenchConfig, token: &str, key: &str) -> Prepared {
    match c.scenario {
        Scenario::AgentRun | Scenario::Replay => Prepared {
            url: format!("{}/v1/cases/C-102/agent-runs", c.api_url),
            headers: vec![
                ("content-type", "application/json".into()),
                ("x-api-key", c.api_key.clone()),
                ("idempotency-key", key.to_string()),
            ],
            body: GOAL.to_string(),
        },
        Scenario::McpCall => {
            let mut params =
                json!({"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}});
            let mut headers = vec![
                ("authorization", format!("Bearer {token}")),
                ("accept", "application/json, text/event-stream".into()),
                ("content-type", "application/json".into()),
            ];
            if c.mcp_era != Preference::Handshake {
                let version = era::STATELESS_VERSIONS[0];
                params["_meta"] = era::request_meta(version, "caseops-bench");
                headers.extend(era::request_headers(version, "tools/call", &params));
            }
            Prepared {
                url: c.mcp_url.clone(),
                headers,
                body: json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
                    .to_string(),
            }
        }
    }
}

/// Whether the reply to `scenario` says the request did what it asked.
///
/// The request is built anew and the whole reply parsed each time, as a client
/// would: building it once and reading only `isError` made the client lighter but
/// measured a lower rate on two shared cores (51k instead of 61k `tools/call`/s at
/// c=32, the server's CPU per call up from 25.4 to 26.8 µs; `wrk`, lighter still,
/// 46k). A lighter client is not a better gauge of the server here.
fn succeeded(scenario: Scenario, body: &Value) -> bool {
    match scenario {
        Scenario::McpCall => body["result"]["isError"] == json!(false),
        _ => body["status"] == "completed",
    }
}

impl Target {
    async fn once(&self) -> bool {
        self.attempt().await.is_ok()
    }

    /// One request of the scenario, and what was wrong with it when it did not
    /// succeed (for the first request, whose failure stops the bench).
    async fn attempt(&self) -> Result<(), String> {
        let key = match self.config.scenario {
            Scenario::Replay => self.replay_key.clone(),
            _ => format!("bench-{}", uuid::Uuid::new_v4().simple()),
        };
        let request = prepare(&self.config, &self.token, &key);
        let mut builder = self.http.post(&request.url);
        for (name, value) in &request.headers {
            builder = builder.header(*name, value);
        }
        let response = builder
            .body(request.body.clone())
            .send()
            .await
            .map_err(|e| format!("it was not answered: {e}"))?;
        let status = response.status();
        let body = response
            .json::<Value>()
            .await
            .map_err(|e| format!("it was answered {status} without a JSON body: {e}"))?;
        if status.is_success() && succeeded(self.config.scenario, &body) {
            return Ok(());
        }
        // The answer, shortened: enough to tell a stopped run from a refusal.
        let mut text = body.to_string();
        if text.len() > 300 {
            let cut = (0..=300)
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            text.truncate(cut);
            text.push('…');
        }
        Err(format!("it was answered {status}: {text}"))
    }
}

/// The task token `mcp-call` sends, as the server's issuer would sign it.
fn bench_token(config: &BenchConfig) -> Result<String, String> {
    let issuer = TokenIssuer::new(
        config.signing_key.as_bytes(),
        &config.token_issuer,
        config.mcp_url.clone(),
        "case_id",
        600,
    )
    .map_err(|e| e.to_string())?;
    issuer
        .issue(
            "bench",
            "tenant-demo",
            "task-bench",
            "C-102",
            &["case:read".to_string()],
        )
        .map_err(|e| e.to_string())
}

/// The request a scenario sends every time, for another load tool to send: an
/// `agent-run` has none (each request needs a new Idempotency-Key).
pub fn fixed_request(config: &BenchConfig) -> Result<Prepared, String> {
    match config.scenario {
        Scenario::AgentRun => Err(
            "`agent-run` sends a new Idempotency-Key with every request, so it has no fixed \
             request; tests/load/run.lua makes one per request for wrk"
                .into(),
        ),
        Scenario::Replay => Ok(prepare(config, "", &replay_key())),
        Scenario::McpCall => Ok(prepare(config, &bench_token(config)?, "")),
    }
}

fn replay_key() -> String {
    format!("bench-replay-{}", uuid::Uuid::new_v4().simple())
}

pub async fn run(config: BenchConfig) -> Result<BenchReport, String> {
    check_target(&config.api_url, config.allow_remote)?;
    check_target(&config.mcp_url, config.allow_remote)?;
    caseops_host::install_tls_provider();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(config.concurrency.max(1) * 2)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let token = match config.scenario {
        Scenario::McpCall => bench_token(&config)?,
        _ => String::new(),
    };
    let target = Arc::new(Target {
        http,
        config: config.clone(),
        token,
        replay_key: replay_key(),
    });
    if let Err(why) = target.attempt().await {
        let url = match config.scenario {
            Scenario::McpCall => &config.mcp_url,
            _ => &config.api_url,
        };
        return Err(format!("the first request to `{url}` failed: {why}"));
    }
    let events = match &config.events_from {
        Some((url, stream)) => Some(crate::event_latency::watch(url, stream).await?),
        None => None,
    };
    // Warm-up: connections, caches, the replayed run.
    let warm_until = Instant::now() + config.warmup;
    while Instant::now() < warm_until {
        target.once().await;
    }

    let remaining = Arc::new(AtomicU64::new(config.requests.unwrap_or(u64::MAX)));
    let deadline = Instant::now()
        + if config.requests.is_some() {
            Duration::from_secs(3600)
        } else {
            config.duration
        };
    let started = Instant::now();
    if let Some(events) = &events {
        events.start();
    }
    let mut tasks = Vec::new();
    for _ in 0..config.concurrency.max(1) {
        let (target, remaining) = (target.clone(), remaining.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            let mut errors = 0u64;
            while Instant::now() < deadline
                && remaining
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            {
                let t = Instant::now();
                if target.once().await {
                    let _ = hist.record(t.elapsed().as_micros().max(1) as u64);
                } else {
                    errors += 1;
                }
            }
            (hist, errors)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await.map_err(|e| e.to_string())?;
        hist.add(h).map_err(|e| e.to_string())?;
        errors += e;
    }
    let seconds = started.elapsed().as_secs_f64();
    let events = match events {
        Some(watch) => Some(watch.finish(Duration::from_secs(2)).await?),
        None => None,
    };
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok(BenchReport {
        scenario: match config.scenario {
            Scenario::AgentRun => "agent-run",
            Scenario::Replay => "replay",
            // The era is part of what was measured.
            Scenario::McpCall if config.mcp_era == Preference::Handshake => "mcp-call",
            Scenario::McpCall => "mcp-call@2026-07-28",
        }
        .into(),
        concurrency: config.concurrency,
        completed: hist.len(),
        errors,
        seconds,
        requests_per_second: hist.len() as f64 / seconds,
        p50_ms: ms(0.5),
        p95_ms: ms(0.95),
        p99_ms: ms(0.99),
        max_ms: hist.max() as f64 / 1000.0,
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(scenario: Scenario) -> BenchConfig {
        BenchConfig {
            scenario,
            api_url: "http://127.0.0.1:8080".into(),
            mcp_url: "http://127.0.0.1:8081/mcp".into(),
            api_key: "key".into(),
            signing_key: "k".repeat(32),
            token_issuer: "http://127.0.0.1:8080".into(),
            mcp_era: Preference::Handshake,
            concurrency: 1,
            duration: Duration::from_secs(1),
            requests: None,
            warmup: Duration::ZERO,
            allow_remote: false,
            events_from: None,
        }
    }

    #[test]
    fn a_printed_request_is_the_call_as_http_text_with_its_exact_length() {
        let text = fixed_request(&config(Scenario::McpCall))
            .and_then(|r| r.http_text())
            .unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n");
        assert_eq!(lines.next(), Some("POST /mcp HTTP/1.1"));
        let headers: Vec<&str> = lines.collect();
        assert!(headers.contains(&"Host: 127.0.0.1:8081"), "{headers:?}");
        assert!(
            headers
                .iter()
                .any(|h| h.starts_with("authorization: Bearer ey")),
            "{headers:?}"
        );
        assert!(headers.contains(&format!("Content-Length: {}", body.len()).as_str()));
        let call: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(call["method"], "tools/call");
        assert_eq!(call["params"]["name"], "caseops_get_case_snapshot");
    }

    #[test]
    fn a_fresh_agent_run_has_no_fixed_request_to_print() {
        let why = fixed_request(&config(Scenario::AgentRun)).unwrap_err();
        assert!(why.contains("Idempotency-Key"), "{why}");
        let replay = fixed_request(&config(Scenario::Replay)).unwrap();
        assert!(replay.url.ends_with("/v1/cases/C-102/agent-runs"));
    }

    #[test]
    fn only_a_tool_result_without_an_error_or_a_completed_run_counts_as_success() {
        let parsed = |body: &str| serde_json::from_str::<Value>(body).unwrap();
        let call = |body: &str| succeeded(Scenario::McpCall, &parsed(body));
        assert!(call(
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#
        ));
        assert!(!call(
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#
        ));
        assert!(!call(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}"#
        ));
        let run = |body: &str| succeeded(Scenario::AgentRun, &parsed(body));
        assert!(run(r#"{"run_id":"run-1","status":"completed","steps":4}"#));
        assert!(!run(r#"{"run_id":"run-1","status":"needs_human"}"#));
        assert!(!run(r#"{"error":"no such case"}"#));
    }

    #[test]
    fn only_loopback_targets_are_allowed_by_default() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://localhost:1/mcp",
            "http://[::1]:9/x",
            "http://127.8.0.2:80",
        ] {
            assert_eq!(check_target(ok, false), Ok(()), "{ok}");
        }
        for remote in [
            "http://10.0.0.5:8080",
            "http://example.com",
            "http://192.168.1.2:1/mcp",
        ] {
            assert!(check_target(remote, false).is_err(), "{remote}");
            assert_eq!(check_target(remote, true), Ok(()));
        }
    }
}
