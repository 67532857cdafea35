//! The warehouse agent as a user runs it: the `warehouse` binary as a real process,
//! runs through its HTTP API and its tools over MCP, on SQLite and PostgreSQL.

#[path = "../../../../service/tests/db_support/mod.rs"]
mod db_support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use caseops_host::store::Db;
use serde_json::{Value, json};
use warehouse_host::tools::SCHEMA;

struct Server {
    child: Child,
    api: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `warehouse` on free loopback ports and waits for its address line.
fn start(database: &str, env: &[(&str, &str)]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_warehouse"))
        .args(["serve", "--database", database, "--listen", "127.0.0.1:0"])
        .args(["--mcp-listen", "127.0.0.1:0", "--lease-seconds", "1"])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("warehouse starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let api = line
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("no address line: {line:?}"))
        .trim_end_matches(',')
        .to_string();
    Server { child, api }
}

async fn restock(s: &Server, key: &str, goal: &str, prefer: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}/v1/shelves/S-1/restock-runs", s.api))
        .header("X-API-Key", "dev-key-warehouse")
        .header("Idempotency-Key", key)
        .json(&json!({ "goal": goal }));
    if let Some(p) = prefer {
        req = req.header("Prefer", p);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn reservations(url: &str) -> i64 {
    let db = Db::connect(url, 1, &SCHEMA).await.unwrap();
    let row = db
        .fetch_optional("SELECT COUNT(*) AS n FROM reservations", &[])
        .await
        .unwrap()
        .unwrap();
    row.get::<i64>("n").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restock_run_reserves_once_and_its_replay_reserves_nothing() {
    for (backend, url) in db_support::fresh_databases("warehouse_run").await {
        let s = start(&url, &[]);
        let (status, run) = restock(&s, "restock-0001", "reserve 5 WIDGET-7", None).await;
        assert_eq!(status, 201, "{backend}: {run}");
        assert_eq!(run["status"], "completed", "{backend}: {run}");
        assert_eq!(run["result"]["outcome"], "RESTOCKED");
        assert_eq!(run["shelf_id"], "S-1", "the bundle's own resource key");
        let (status, again) = restock(&s, "restock-0001", "reserve 5 WIDGET-7", None).await;
        assert_eq!(
            (status, &again["replayed"]),
            (200, &json!(true)),
            "{backend}"
        );
        assert_eq!(reservations(&url).await, 1, "{backend}");
        // Cedar, not Rust code, refuses a large write.
        let (_, big) = restock(&s, "restock-0002", "reserve 40 WIDGET-7", None).await;
        assert_eq!(
            big["stop_reason"], "RESERVATION_TOO_LARGE",
            "{backend}: {big}"
        );
        assert_eq!(reservations(&url).await, 1, "{backend}");
    }
}

#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_reservation_and_its_commit_does_not_reserve_again() {
    for (backend, url) in db_support::fresh_databases("warehouse_crash").await {
        let mut dying = start(
            &url,
            &[("CASEOPS_FAULT_KILL_AFTER_TOOL", "inventory_reserve")],
        );
        let (status, run) = restock(
            &dying,
            "restock-crash1",
            "reserve 5 WIDGET-7",
            Some("respond-async"),
        )
        .await;
        assert_eq!(status, 202, "{backend}: {run}");
        let run_id = run["run_id"].as_str().unwrap().to_string();
        // The reservation's handler returns, then the process dies before anything
        // records it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while dying.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "{backend}: the fault never fired"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            reservations(&url).await,
            1,
            "{backend}: the effect happened"
        );

        // A new process takes the run over once its lease expires.
        let s = start(&url, &[]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let run = loop {
            let r: Value = reqwest::Client::new()
                .get(format!("{}/v1/agent-runs/{run_id}", s.api))
                .header("X-API-Key", "dev-key-warehouse")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if r["status"] != "running" {
                break r;
            }
            assert!(Instant::now() < deadline, "{backend}: not resumed: {r}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // The write's outcome is unknown to the run: it goes to a human rather than
        // reserving again.
        assert_eq!(run["status"], "needs_human", "{backend}: {run}");
        assert_eq!(run["stop_reason"], "EFFECT_UNKNOWN", "{backend}: {run}");
        assert_eq!(reservations(&url).await, 1, "{backend}: reserved once");
        let (_, replay) = restock(&s, "restock-crash1", "reserve 5 WIDGET-7", None).await;
        assert_eq!(replay["run_id"], run_id.as_str());
        assert_eq!(reservations(&url).await, 1, "{backend}");
    }
}
