//! The run lifecycle under a production day's faults, against real `caseops serve`
//! processes on SQLite and PostgreSQL: clients that give up mid-request, SIGKILL and
//! SIGTERM of a replica under load, a database that goes away and comes back. Each
//! ends with every Idempotency-Key holding exactly one run, completed with C-102's
//! exact result, with contiguous checkpoints and a verifying audit chain. Needs the
//! `fault-injection` feature (slow tools), which the README's test command enables.
#![cfg(feature = "fault-injection")]

mod db_support;
mod fleet;

use std::time::{Duration, Instant};

use db_support::fresh_databases;
use fleet::{Proxy, Replica, assert_all_runs_exact, client, finish_key, post_run};
use serde_json::Value;
use tokio::task::JoinSet;

/// A small deterministic generator: the storm is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn serve_args(lease: &str) -> Vec<&str> {
    vec![
        "--listen",
        "127.0.0.1:0",
        "--mcp-listen",
        "127.0.0.1:0",
        "--lease-seconds",
        lease,
    ]
}

async fn reference_run(api: &str) -> Value {
    let (status, run) = post_run(&client(), api, "reference-run", None)
        .await
        .unwrap();
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "completed", "{run}");
    run["result"].clone()
}

async fn idle_in_transaction(url: &str) -> i64 {
    let db = caseops_host::store::Db::connect(url, 1, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    let row = db
        .fetch_optional(
            "SELECT count(*)::bigint AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
            &[],
        )
        .await
        .unwrap()
        .unwrap();
    row.get("n").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_give_up_mid_request_leave_no_run_unfinished_and_no_replica_wedged() {
    for (backend, url) in fresh_databases("storm").await {
        let replica = Replica::start(&url, &serve_args("2"));
        let api = replica.api().to_string();
        let reference = reference_run(&api).await;

        // 300 requests, 24 at a time, each abandoned after 1-40 ms: inside the
        // allocation, the commits, the wait, at every point a run can be in.
        let mut rng = Lcg(0x5eed);
        let keys: Vec<String> = (0..300).map(|i| format!("storm-key-{i:04}")).collect();
        let http = client();
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(24));
        let mut storm = JoinSet::new();
        for key in &keys {
            let (http, api, key) = (http.clone(), api.clone(), key.clone());
            let give_up = Duration::from_millis(1 + rng.below(40));
            let permit = gate.clone().acquire_owned().await.unwrap();
            storm.spawn(async move {
                let _permit = permit;
                let sent = http
                    .post(format!("{api}/v1/cases/C-102/agent-runs"))
                    .header("x-api-key", "dev-key-tenant-demo")
                    .header("idempotency-key", &key)
                    .json(&serde_json::json!({ "goal": fleet::GOAL }))
                    .timeout(give_up)
                    .send()
                    .await;
                sent.map(|r| r.status().as_u16()).unwrap_or(0)
            });
        }
        let mut abandoned = 0;
        while let Some(status) = storm.join_next().await {
            let status = status.unwrap();
            assert_ne!(status, 500, "{backend}: a 500 during the storm");
            abandoned += usize::from(status == 0);
        }
        assert!(abandoned > 100, "{backend}: most requests were abandoned");

        // Normal traffic right after it: every run is created and completed.
        for i in 0..40 {
            let (status, run) = post_run(&http, &api, &format!("after-storm-{i:03}"), None)
                .await
                .unwrap();
            assert_eq!(status, 201, "{backend}: after the storm: {run}");
            assert_eq!(run["result"], reference, "{backend}");
        }
        // Every abandoned key ends in its one run, without a client retrying it
        // first: the workers finished them already.
        for key in &keys {
            let (run, statuses) = finish_key(
                &http,
                std::slice::from_ref(&api),
                key,
                Duration::from_secs(30),
            )
            .await;
            assert!(!statuses.contains(&500), "{backend}: {statuses:?}");
            assert_eq!(run["result"], reference, "{backend}: `{key}`");
        }
        assert_all_runs_exact(&url, 1 + 300 + 40, &reference).await;
        if backend == "postgres" {
            assert_eq!(
                idle_in_transaction(&url).await,
                0,
                "no connection was left inside a transaction"
            );
        }
    }
}

/// Starts `n` full replicas on one database whose tools each take 150 ms.
fn replicas(url: &str, n: usize, lease: &str) -> Vec<Replica> {
    (0..n)
        .map(|_| {
            Replica::start_with_env(
                url,
                &serve_args(lease),
                &[("CASEOPS_FAULT_TOOL_DELAY_MS", "150")],
            )
        })
        .collect()
}

/// Sends `keys` to `target` in flight (async, so no client waits on it), then
/// applies `fault` to it while its runs are mid-way.
async fn load(target: &str, keys: &[String]) {
    let http = client();
    let mut set = JoinSet::new();
    for key in keys {
        let (http, api, key) = (http.clone(), target.to_string(), key.clone());
        set.spawn(async move { post_run(&http, &api, &key, Some("respond-async")).await });
    }
    while let Some(r) = set.join_next().await {
        let (status, run) = r.unwrap().unwrap();
        assert_eq!(status, 202, "{run}");
        assert_eq!(run["status"], "running", "{run}");
    }
}

async fn finish_all(apis: &[String], keys: &[String], within: Duration) {
    let http = client();
    let mut set = JoinSet::new();
    for key in keys {
        let (http, apis, key) = (http.clone(), apis.to_vec(), key.clone());
        set.spawn(async move { finish_key(&http, &apis, &key, within).await });
    }
    while let Some(r) = set.join_next().await {
        let (_, statuses) = r.unwrap();
        assert!(!statuses.contains(&500), "{statuses:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_load_has_its_runs_finished_by_the_others_within_a_lease_and_a_half()
{
    for (backend, url) in fresh_databases("sigkill").await {
        // Two replicas on SQLite (one file, one host), three on PostgreSQL.
        let n = if backend == "postgres" { 3 } else { 2 };
        let mut fleet = replicas(&url, n, "2");
        let apis: Vec<String> = fleet.iter().map(|r| r.api().to_string()).collect();
        let reference = reference_run(&apis[1]).await;

        let keys: Vec<String> = (0..16).map(|i| format!("sigkill-{i:03}")).collect();
        load(&apis[0], &keys).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
        let killed = Instant::now();
        let mut dead = fleet.remove(0);
        dead.child.kill().unwrap();
        dead.child.wait().unwrap();

        // The survivors take every run over by themselves (no client asks), with
        // the exact result: time lying orphaned is not charged to the budget.
        let db = caseops_host::store::Db::connect(&url, 1, &caseops_service::reference::SCHEMA)
            .await
            .unwrap();
        loop {
            let open = db
                .fetch_optional(
                    "SELECT count(*) AS n FROM runs WHERE status = 'running'",
                    &[],
                )
                .await
                .unwrap()
                .unwrap()
                .get::<i64>("n")
                .unwrap();
            if open == 0 {
                break;
            }
            // A 2 s lease: taken over within 3 s, plus the runs' own ~1 s.
            assert!(
                killed.elapsed() < Duration::from_secs(8),
                "{backend}: {open} runs still open {:?} after the kill",
                killed.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "{backend}: every run of the killed replica finished {:?} after the kill",
            killed.elapsed()
        );
        finish_all(&apis[1..], &keys, Duration::from_secs(30)).await;
        assert_all_runs_exact(&url, 1 + keys.len(), &reference).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_replica_answers_its_clients_and_hands_its_runs_over_at_once() {
    for (backend, url) in fresh_databases("sigterm").await {
        // A long lease: only a released lease lets the other replica resume soon.
        let mut fleet = replicas(&url, 2, "30");
        let apis: Vec<String> = fleet.iter().map(|r| r.api().to_string()).collect();
        let reference = reference_run(&apis[1]).await;

        // 12 clients wait synchronously on the replica that will be stopped.
        let keys: Vec<String> = (0..12).map(|i| format!("sigterm-{i:03}")).collect();
        let http = client();
        let mut waiting = JoinSet::new();
        for key in &keys {
            let (http, api, key) = (http.clone(), apis[0].clone(), key.clone());
            waiting.spawn(async move { post_run(&http, &api, &key, None).await });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stopped = Instant::now();
        fleet[0].signal("TERM");

        // Every waiting client gets an answer, none a reset connection: the run
        // finished (201) or goes on elsewhere (202).
        while let Some(r) = waiting.join_next().await {
            let (status, run) = r
                .unwrap()
                .unwrap_or_else(|e| panic!("{backend}: a client lost its connection: {e}"));
            assert!(status == 201 || status == 202, "{backend}: {status} {run}");
        }
        let code = fleet[0].wait_exit(Duration::from_secs(15));
        assert_eq!(code, Some(0), "{backend}: a drained replica exits 0");

        // The other replica resumes the handed-over runs without waiting out the
        // 30 s lease.
        finish_all(&apis[1..], &keys, Duration::from_secs(20)).await;
        assert!(
            stopped.elapsed() < Duration::from_secs(20),
            "{backend}: {:?}",
            stopped.elapsed()
        );
        assert_all_runs_exact(&url, 1 + keys.len(), &reference).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_makes_readiness_fail_fast_and_every_run_completes_after_it() {
    let databases = fresh_databases("outage").await;
    let Some(url) = databases.postgres().map(str::to_string) else {
        return;
    };
    // The service reaches PostgreSQL through a proxy that can cut it off: to the
    // service that is a database restart (every connection dropped, none accepted).
    let upstream = fleet::socket_of(&url);
    let proxy = Proxy::start(upstream, Duration::ZERO).await;
    let proxied = url.replacen(&upstream.to_string(), &proxy.addr.to_string(), 1);
    let replica = Replica::start_with_env(
        &proxied,
        &serve_args("2"),
        &[("CASEOPS_FAULT_TOOL_DELAY_MS", "50")],
    );
    let api = replica.api().to_string();
    let reference = reference_run(&api).await;
    let http = client();
    let ready = |http: reqwest::Client, api: String| async move {
        let t = Instant::now();
        let status = http
            .get(format!("{api}/health/ready"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        (status, t.elapsed())
    };
    assert_eq!(ready(http.clone(), api.clone()).await.0, 200);

    let keys: Vec<String> = (0..20).map(|i| format!("outage-{i:03}")).collect();
    let (first, second) = keys.split_at(10);
    load(&api, first).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (status, took) = ready(http.clone(), api.clone()).await;
    assert_eq!(status, 503, "not ready while the database is away");
    assert!(took < Duration::from_millis(1500), "answered in {took:?}");
    let live = http.get(format!("{api}/health/live")).send().await.unwrap();
    assert_eq!(live.status(), 200, "liveness stays 200");
    // Requests meanwhile fail as unavailable, never as an internal error.
    let (status, _) = post_run(&http, &api, &second[0], None).await.unwrap();
    assert_eq!(status, 503);
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.restore();

    // Readiness comes back by itself, and everything completes.
    let back = Instant::now();
    loop {
        if ready(http.clone(), api.clone()).await.0 == 200 {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "readiness stayed 503"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    finish_all(std::slice::from_ref(&api), &keys, Duration::from_secs(30)).await;
    assert_all_runs_exact(&url, 1 + keys.len(), &reference).await;
}

/// Takes SQLite's write lock on `path` as another process would and holds it for
/// `hold` on a thread of its own; returns once it is taken.
async fn hold_write_lock(path: &str, hold: Duration) -> std::thread::JoinHandle<()> {
    let path = path.to_string();
    let (taken, held) = tokio::sync::oneshot::channel();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        taken.send(()).unwrap();
        std::thread::sleep(hold);
        conn.execute_batch("ROLLBACK").unwrap();
    });
    held.await.unwrap();
    holder
}

/// `caseops migrate` of a large file, a backup or a person's `sqlite3` session can
/// hold SQLite's write lock for longer than the server waits for it (5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_write_lock_held_past_the_busy_timeout_loses_no_run() {
    let databases = fresh_databases("locked").await;
    let url = databases.sqlite().to_string();
    let path = url.trim_start_matches("sqlite://").to_string();
    let replica = Replica::start_with_env(
        &url,
        &serve_args("2"),
        &[("CASEOPS_FAULT_TOOL_DELAY_MS", "50")],
    );
    let api = replica.api().to_string();
    let reference = reference_run(&api).await;
    let keys: Vec<String> = (0..10).map(|i| format!("locked-{i:03}")).collect();
    let (first, rest) = keys.split_at(1);

    // No run in flight: a creation waits as long as the server's busy timeout, then
    // is refused as unavailable (retry with the same key), not as an error. The lock
    // outlasts two timeouts, in case the workers' claim poll took the writer first.
    let holder = hold_write_lock(&path, Duration::from_secs(11)).await;
    let started = Instant::now();
    let (status, body) = post_run(&client(), &api, &first[0], None).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(11),
        "answered before the lock went, in {:?}",
        started.elapsed()
    );
    holder.join().unwrap();

    // Runs in flight: their commits fail after the busy timeout, and they are taken
    // up again once the lock goes.
    load(&api, rest).await;
    hold_write_lock(&path, Duration::from_millis(6500))
        .await
        .join()
        .unwrap();
    finish_all(std::slice::from_ref(&api), &keys, Duration::from_secs(30)).await;
    assert_all_runs_exact(&url, 1 + keys.len(), &reference).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_left_before_its_first_checkpoint_is_started_over_without_any_client() {
    use caseops_generated::Bundle;
    use caseops_host::store::runs::{NewRun, SqlRunStore};
    use caseops_runtime::{ContractBundle, RunSpec};
    for (backend, url) in fresh_databases("nocheckpoint").await {
        // A process recorded the run and died before committing anything.
        let db = caseops_host::store::Db::connect(&url, 2, &caseops_service::reference::SCHEMA)
            .await
            .unwrap();
        let dead = SqlRunStore::new(db.clone()).with_lease_ms(100);
        let spec = RunSpec {
            run_id: "run-orphan-0001".into(),
            tenant_id: "tenant-demo".into(),
            task_id: "task-orphan".into(),
            subject: "user:demo-investigator".into(),
            resource_id: "C-102".into(),
            scopes: Bundle::TOOLS
                .iter()
                .map(|t| t.required_scope.to_string())
                .collect(),
            catalog: Bundle::CATALOG.iter().map(|s| s.to_string()).collect(),
            stage: Bundle::STAGES[0].to_string(),
            goal: fleet::GOAL.into(),
            correlation_id: "orphan".into(),
        };
        dead.allocate(&NewRun {
            spec,
            actor: "user:demo-investigator".into(),
            idempotency_key: "orphan-key-0001".into(),
            request_hash: "h".into(),
            request_id: None,
            planner_kind: "conformance".into(),
            model: None,
            bundle_digest: Bundle::BUNDLE_DIGEST.into(),
        })
        .await
        .unwrap();
        drop(dead);

        let replica = Replica::start(&url, &serve_args("2"));
        let reference = reference_run(replica.api()).await;
        let started = Instant::now();
        let run = loop {
            let run = client()
                .get(format!("{}/v1/agent-runs/run-orphan-0001", replica.api()))
                .header("x-api-key", "dev-key-tenant-demo")
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap();
            if run["status"] != "running" {
                break run;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{backend}: never picked up"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(run["status"], "completed", "{backend}: {run}");
        assert_eq!(run["result"], reference, "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_run_another_live_replica_drives_waits_for_it_instead_of_409() {
    for (backend, url) in fresh_databases("busy").await {
        let fleet = replicas(&url, 2, "5");
        let (a, b) = (fleet[0].api().to_string(), fleet[1].api().to_string());
        let http = client();
        let (status, _) = post_run(&http, &a, "busy-key-0001", Some("respond-async"))
            .await
            .unwrap();
        assert_eq!(status, 202);
        // The same key at the other replica while the first one drives the run.
        let (status, run) = post_run(&http, &b, "busy-key-0001", None).await.unwrap();
        assert_eq!(status, 200, "{backend}: {run}");
        assert_eq!(run["status"], "completed", "{backend}: {run}");
        // And with a bounded wait that is too short: 202 with Retry-After.
        post_run(&http, &a, "busy-key-0002", Some("respond-async"))
            .await
            .unwrap();
        let r = http
            .post(format!("{b}/v1/cases/C-102/agent-runs"))
            .header("x-api-key", "dev-key-tenant-demo")
            .header("idempotency-key", "busy-key-0002")
            .header("prefer", "wait=0")
            .json(&serde_json::json!({ "goal": fleet::GOAL }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "{backend}");
        assert_eq!(r.headers()["retry-after"], "1");
    }
}
