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

impl Target {
    async fn once(&self) -> bool {
        self.attempt().await.is_ok()
    }

    /// One request of the scenario, and what was wrong with it when it did not
    /// succeed (for the first request, whose failure stops the bench).
    async fn attempt(&self) -> Result<(), String> {
        let c = &self.config;
        let result = match c.scenario {
            Scenario::AgentRun | Scenario::Replay => {
                let key = match c.scenario {
                    Scenario::Replay => self.replay_key.clone(),
                    _ => format!("bench-{}", uuid::Uuid::new_v4().simple()),
                };
                self.http
                    .post(format!("{}/v1/cases/C-102/agent-runs", c.api_url))
                    .header("x-api-key", &c.api_key)
                    .header("idempotency-key", key)
                    .json(&json!({ "goal": "Check whether claim case C-102 holds every required document." }))
                    .send()
                    .await
            }
            Scenario::McpCall => {
                let mut params =
                    json!({"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}});
                let mut request = self
                    .http
                    .post(&c.mcp_url)
                    .bearer_auth(&self.token)
                    .header("accept", "application/json, text/event-stream")
                    .header("content-type", "application/json");
                if c.mcp_era != Preference::Handshake {
                    let version = era::STATELESS_VERSIONS[0];
                    params["_meta"] = era::request_meta(version, "caseops-bench");
                    for (name, value) in era::request_headers(version, "tools/call", &params) {
                        request = request.header(name, value);
                    }
                }
                request
                    .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string())
                    .send()
                    .await
            }
        };
        let response = result.map_err(|e| format!("it was not answered: {e}"))?;
        let status = response.status();
        let body = response
            .json::<Value>()
            .await
            .map_err(|e| format!("it was answered {status} without a JSON body: {e}"))?;
        let succeeded = status.is_success()
            && match c.scenario {
                Scenario::McpCall => body["result"]["isError"] == json!(false),
                _ => body["status"] == "completed",
            };
        if succeeded {
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

pub async fn run(config: BenchConfig) -> Result<BenchReport, String> {
    check_target(&config.api_url, config.allow_remote)?;
    check_target(&config.mcp_url, config.allow_remote)?;
    caseops_host::install_tls_provider();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(config.concurrency.max(1) * 2)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let issuer = TokenIssuer::new(
        config.signing_key.as_bytes(),
        &config.token_issuer,
        config.mcp_url.clone(),
        "case_id",
        600,
    )
    .map_err(|e| e.to_string())?;
    let token = issuer
        .issue(
            "bench",
            "tenant-demo",
            "task-bench",
            "C-102",
            &["case:read".to_string()],
        )
        .map_err(|e| e.to_string())?;
    let target = Arc::new(Target {
        http,
        config: config.clone(),
        token,
        replay_key: format!("bench-replay-{}", uuid::Uuid::new_v4().simple()),
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
