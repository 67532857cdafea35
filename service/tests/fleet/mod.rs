//! Real `caseops serve` processes for fault tests, a TCP proxy that adds latency or
//! cuts connections, and the checks every fault test ends with.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use caseops_host::store::Db;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub const GOAL: &str = "Check whether claim case C-102 holds every required document.";

/// One `caseops serve` process; killed (SIGKILL) when dropped.
pub struct Replica {
    pub child: Child,
    pub api: Option<String>,
    pub mcp: Option<String>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Replica {
    /// Starts `caseops serve --database <url> <args…>` and waits for its addresses.
    pub fn start(database: &str, args: &[&str]) -> Replica {
        Self::start_with_env(database, args, &[])
    }

    /// [`Replica::start`] with extra environment variables.
    pub fn start_with_env(database: &str, args: &[&str], env: &[(&str, &str)]) -> Replica {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_caseops"));
        cmd.args(["serve", "--database", database])
            .args(args)
            .env_remove("CASEOPS_FAULT_KILL_AT_COMMIT")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("caseops starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut api, mut mcp) = (None, None);
        let only_mcp = args.contains(&"mcp");
        let only_api = args.contains(&"api");
        while let Some(Ok(line)) = lines.next() {
            if let Some(rest) = line.strip_prefix("caseops api on ") {
                api = Some(rest.split_whitespace().next().unwrap().to_string());
            }
            if let Some(rest) = line.strip_prefix("caseops mcp on ") {
                mcp = Some(rest.trim().to_string());
            }
            let done = match (only_api, only_mcp) {
                (true, _) => api.is_some(),
                (_, true) => mcp.is_some(),
                _ => api.is_some() && mcp.is_some(),
            };
            if done {
                break;
            }
        }
        assert!(api.is_some() || mcp.is_some(), "caseops printed no address");
        std::thread::spawn(move || for _ in lines {});
        Replica { child, api, mcp }
    }

    pub fn api(&self) -> &str {
        self.api.as_deref().expect("this replica serves the api")
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// Waits for the process to exit; its exit code, or None if it was killed.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let until = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                std::time::Instant::now() < until,
                "caseops did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A TCP proxy on loopback: delays every chunk by `latency` in both directions,
/// and can cut every connection and refuse new ones (a database restart, as the
/// service sees it) until restored.
pub struct Proxy {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr, latency: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let (d, g) = (down.clone(), generation.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if d.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut = g.subscribe();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        _ = pump(cr, sw, latency) => {}
                        _ = pump(sr, cw, latency) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            down,
            generation,
        }
    }

    /// Cuts every open connection and refuses new ones.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    latency: Duration,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// `http://127.0.0.1:P/mcp` or `postgres://user@127.0.0.1:P/db` → `127.0.0.1:P`.
pub fn socket_of(url: &str) -> SocketAddr {
    let rest = url.split("://").nth(1).unwrap();
    let authority = rest.split('/').next().unwrap();
    let host = authority.rsplit('@').next().unwrap();
    host.parse().unwrap()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(90))
        .build()
        .unwrap()
}

/// POSTs a C-102 run; the status and body, or the transport error.
pub async fn post_run(
    http: &reqwest::Client,
    api: &str,
    key: &str,
    prefer: Option<&str>,
) -> Result<(u16, Value), reqwest::Error> {
    let mut req = http
        .post(format!("{api}/v1/cases/C-102/agent-runs"))
        .header("x-api-key", "dev-key-tenant-demo")
        .header("idempotency-key", key)
        .json(&json!({ "goal": GOAL }));
    if let Some(p) = prefer {
        req = req.header("prefer", p);
    }
    let r = req.send().await?;
    let status = r.status().as_u16();
    let text = r.text().await?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// Drives one Idempotency-Key to its finished run across `apis` (tried in turn),
/// as a client with retries would; returns every status it saw.
pub async fn finish_key(
    http: &reqwest::Client,
    apis: &[String],
    key: &str,
    within: Duration,
) -> (Value, Vec<u16>) {
    let until = std::time::Instant::now() + within;
    let mut seen = Vec::new();
    let mut i = 0;
    loop {
        assert!(
            std::time::Instant::now() < until,
            "key `{key}` not finished within {within:?}; statuses {seen:?}"
        );
        let api = &apis[i % apis.len()];
        match post_run(http, api, key, None).await {
            Ok((status, run)) => {
                seen.push(status);
                if (status == 200 || status == 201) && run["status"] != "running" {
                    return (run, seen);
                }
                // 202 (the run goes on) or 503 (this replica is stopping): again.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // The replica died under the request: the next one.
            Err(_) => {
                seen.push(0);
                i += 1;
            }
        }
    }
}

/// Every run in the database: finished `completed` with C-102's exact result,
/// checkpoints numbered 1..=n, and the audit chain verifies.
pub async fn assert_all_runs_exact(database: &str, expected_runs: usize, reference: &Value) {
    let db = Db::connect(database, 2, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    let runs = caseops_host::store::runs::SqlRunStore::new(db.clone());
    let rows = db
        .fetch_all(
            "SELECT run_id, tenant_id, status, final_result FROM runs ORDER BY run_id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), expected_runs, "one run per Idempotency-Key");
    for row in &rows {
        let run_id: String = row.get("run_id").unwrap();
        let status: String = row.get("status").unwrap();
        assert_eq!(status, "completed", "run `{run_id}`");
        let result: Option<String> = row.get("final_result").unwrap();
        let result: Value = serde_json::from_str(&result.unwrap()).unwrap();
        assert_eq!(&result, reference, "run `{run_id}`: the exact C-102 result");
        // As readers see them, wherever the run's format keeps them.
        let tenant: String = row.get("tenant_id").unwrap();
        let seqs: Vec<u64> = runs
            .checkpoints(&tenant, &run_id)
            .await
            .unwrap()
            .iter()
            .map(|c| c.sequence)
            .collect();
        for (i, s) in seqs.iter().enumerate() {
            assert_eq!(*s, i as u64 + 1, "run `{run_id}`: contiguous checkpoints");
        }
        assert!(!seqs.is_empty(), "run `{run_id}` has checkpoints");
    }
    let verify = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["audit", "verify", "--database", database])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "audit verify: {}",
        String::from_utf8_lossy(&verify.stdout)
    );
}
