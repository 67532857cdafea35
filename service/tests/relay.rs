//! The outbox relay against a real `nats-server` with JetStream: events written while
//! relay processes are SIGKILLed a dozen times and NATS itself is restarted reach a
//! JetStream consumer exactly once each, in commit order per tenant, on SQLite and
//! PostgreSQL; two relays on one PostgreSQL database never both publish an event.

mod db_support;
mod serve_support;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use caseops_host::store::{Db, audit, outbox};
use caseops_service::reference::SCHEMA;
use db_support::{fresh_databases, note_skipped};
use futures_util::StreamExt;
use serde_json::{Value, json};

const TENANTS: [&str; 3] = ["tenant-a", "tenant-b", "tenant-c"];

fn nats_server() -> Option<PathBuf> {
    let found = [
        "/usr/sbin/nats-server",
        "/usr/bin/nats-server",
        "/usr/local/bin/nats-server",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide nats-server (Debian package `nats-server`)"
        );
        note_skipped("the NATS relay tests", "install nats-server to run them");
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A JetStream server of this test's own (so it can be restarted), storing in `dir`.
struct Nats {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Nats {
    fn start(bin: PathBuf, dir: &Path) -> Nats {
        Nats::start_on(bin, dir, free_port())
    }

    fn start_on(bin: PathBuf, dir: &Path, port: u16) -> Nats {
        let mut nats = Nats {
            bin,
            dir: dir.to_path_buf(),
            port,
            child: None,
        };
        nats.spawn();
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new(&self.bin)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn restart(&mut self) {
        self.stop();
        std::thread::sleep(Duration::from_millis(300));
        self.spawn();
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A `caseops relay` process.
fn relay(db_url: &str, nats: &str, stream: &str, prefix: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args([
            "relay",
            "--database",
            db_url,
            "--nats-url",
            nats,
            "--relay-stream",
            stream,
            "--relay-subject-prefix",
            prefix,
            "--relay-batch",
            "200",
            "--log-format",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("caseops relay starts")
}

fn sigterm(child: &Child) {
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

/// Writes `n` events round-robin over the tenants, as an application would.
async fn produce(db: Db, n: usize, from: usize) {
    for i in from..from + n {
        let tenant = TENANTS[i % TENANTS.len()];
        audit::append_event(
            &db,
            tenant,
            &format!("run-{i}"),
            "test.fact",
            "test.fact.v1",
            &format!("facts/{i}"),
            &json!({ "n": i }),
        )
        .await
        .unwrap();
    }
}

async fn wait_until_published(db: &Db, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (backlog, _) = outbox::backlog(db).await.unwrap();
        if backlog == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{backlog} events still unpublished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every message of `stream`, in stream order: (event id, tenant).
async fn consume(nats: &str, stream: &str) -> Vec<(String, String)> {
    let client = async_nats::connect(nats).await.unwrap();
    let js = jetstream::new(client);
    let stream = js.get_stream(stream).await.unwrap();
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut seen = Vec::new();
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(2), messages.next()).await
    {
        let envelope: Value = serde_json::from_slice(&m.payload).unwrap();
        seen.push((
            envelope["id"].as_str().unwrap().to_string(),
            envelope["tenant"].as_str().unwrap().to_string(),
        ));
    }
    seen
}

/// Each committed event exactly once, and each tenant's in its commit order.
async fn assert_exactly_once_in_order(db: &Db, seen: &[(String, String)], backend: &str) {
    let rows = db
        .fetch_all("SELECT event_id, tenant_id, seq FROM outbox_events", &[])
        .await
        .unwrap();
    let order: HashMap<String, (String, i64)> = rows
        .iter()
        .map(|r| {
            (
                r.get::<String>("event_id").unwrap(),
                (r.get("tenant_id").unwrap(), r.get("seq").unwrap()),
            )
        })
        .collect();
    let unique: HashSet<&String> = seen.iter().map(|(id, _)| id).collect();
    assert_eq!(
        unique.len(),
        seen.len(),
        "{backend}: a consumer saw an event twice"
    );
    assert_eq!(
        seen.len(),
        order.len(),
        "{backend}: events missing at the consumer"
    );
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (id, tenant) in seen {
        let (t, seq) = &order[id];
        assert_eq!(t, tenant, "{backend}");
        let previous = last.insert(t.as_str(), *seq).unwrap_or(0);
        assert!(
            *seq > previous,
            "{backend}: {t}'s event {seq} arrived after {previous}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_a_consumer_exactly_once_in_commit_order_through_relay_kills_and_a_nats_restart()
 {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut nats = Nats::start(bin, dir.path());
    for (backend, url) in fresh_databases("relay_kills").await {
        let db = Db::connect(&url, 4, &SCHEMA).await.unwrap();
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let (stream, prefix) = (format!("S{tag}"), format!("t{tag}"));
        let producer = tokio::spawn(produce(db.clone(), 10_000, 0));
        for kill in 0..12 {
            let mut child = relay(&url, &nats.url(), &stream, &prefix);
            tokio::time::sleep(Duration::from_millis(150 + (kill * 97 % 250))).await;
            child.kill().unwrap();
            child.wait().unwrap();
            if kill == 6 {
                nats.restart();
            }
        }
        producer.await.unwrap();
        let mut last = relay(&url, &nats.url(), &stream, &prefix);
        wait_until_published(&db, Duration::from_secs(120)).await;
        sigterm(&last);
        last.wait().unwrap();
        let seen = consume(&nats.url(), &stream).await;
        assert_exactly_once_in_order(&db, &seen, backend).await;
    }
}

/// The `published`/`duplicates` counts a relay logs when it stops.
fn stopped_counts(child: Child) -> (u64, u64) {
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let line = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("relay stopped"))
        })
        .unwrap_or_else(|| panic!("no `relay stopped` line in:\n{text}"));
    (
        line["published"].as_u64().unwrap(),
        line["duplicates"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_on_one_postgresql_database_never_both_publish_an_event() {
    let Some(bin) = nats_server() else { return };
    let dbs = fresh_databases("relay_pair").await;
    let Some(url) = dbs.postgres().map(str::to_string) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path());
    let db = Db::connect(&url, 4, &SCHEMA).await.unwrap();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (stream, prefix) = (format!("S{tag}"), format!("t{tag}"));
    let first = relay(&url, &nats.url(), &stream, &prefix);
    let second = relay(&url, &nats.url(), &stream, &prefix);
    produce(db.clone(), 3_000, 0).await;
    wait_until_published(&db, Duration::from_secs(60)).await;
    sigterm(&first);
    sigterm(&second);
    let (a, a_dup) = stopped_counts(first);
    let (b, b_dup) = stopped_counts(second);
    assert_eq!(a + b, 3_000, "every event published once: {a} + {b}");
    assert_eq!((a_dup, b_dup), (0, 0), "no event was published by both");
    assert!(a > 0 && b > 0, "both relays shared the work: {a} and {b}");
    let seen = consume(&nats.url(), &stream).await;
    assert_exactly_once_in_order(&db, &seen, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_publishes_the_backlog_then_exits_with_its_count_and_fails_fast_without_nats() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path());
    let dbs = fresh_databases("relay_drain").await;
    let url = dbs.sqlite().to_string();
    let db = Db::connect(&url, 4, &SCHEMA).await.unwrap();
    produce(db.clone(), 600, 0).await;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (stream, prefix) = (format!("S{tag}"), format!("t{tag}"));
    let drain = |nats_url: &str| {
        Command::new(env!("CARGO_BIN_EXE_caseops"))
            .args([
                "relay",
                "--drain",
                "--database",
                &url,
                "--nats-url",
                nats_url,
            ])
            .args(["--relay-stream", &stream, "--relay-subject-prefix", &prefix])
            .output()
            .unwrap()
    };

    let refused = drain(&format!("nats://127.0.0.1:{}", free_port()));
    assert!(!refused.status.success(), "a drain without NATS must fail");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("cannot reach NATS"), "{err}");
    assert_eq!(outbox::backlog(&db).await.unwrap().0, 600);

    let out = drain(&nats.url());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("published 600 events (0 already in the stream)"),
        "{stdout}"
    );
    assert_eq!(outbox::backlog(&db).await.unwrap().0, 0);
    let seen = consume(&nats.url(), &stream).await;
    assert_exactly_once_in_order(&db, &seen, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_reports_how_long_relayed_events_take_from_commit_to_a_consumer() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path());
    let dbs = fresh_databases("relay_bench").await;
    let server = serve_support::serve(dbs.sqlite(), &["--relay", &nats.url()], &[], true);
    // `agent-run` does not call MCP itself.
    let mcp = "http://127.0.0.1:9/mcp";
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["bench", "--scenario", "agent-run", "--concurrency", "4"])
        .args(["--warmup", "1", "--duration", "2", "--json"])
        .args(["--api", &server.api, "--mcp", mcp])
        .args(["--events-from", &nats.url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let completed = report["completed"].as_u64().unwrap();
    let events = &report["events"];
    assert!(completed > 0, "{report}");
    // Each measured run committed its `completed` event inside the window, and a
    // started event too: at least one event per run must have been counted.
    assert!(
        events["received"].as_u64().unwrap() >= completed,
        "{report}"
    );
    let (p50, max) = (
        events["p50_ms"].as_f64().unwrap(),
        events["max_ms"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= max, "{report}");
}

async fn get(url: &str) -> (u16, String) {
    caseops_host::install_tls_provider();
    let r = reqwest::get(url).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_relay_is_unready_while_nats_is_down_and_serves_its_backlog_as_metrics() {
    let Some(bin) = nats_server() else { return };
    let dbs = fresh_databases("relay_probes").await;
    let url = dbs.sqlite().to_string();
    let db = Db::connect(&url, 4, &SCHEMA).await.unwrap();
    produce(db.clone(), 40, 0).await;
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["relay", "--database", &url, "--listen", "127.0.0.1:0"])
        .args(["--nats-url", &format!("nats://127.0.0.1:{port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let probes = loop {
        let line = lines
            .next()
            .expect("the relay printed its probe address")
            .unwrap();
        if let Some(rest) = line.strip_prefix("caseops relay probes on ") {
            break rest.trim().to_string();
        }
    };
    assert_eq!(get(&format!("{probes}/health/live")).await.0, 200);
    let (status, body) = get(&format!("{probes}/health/ready")).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("cannot reach NATS"), "{body}");
    let (_, metrics) = get(&format!("{probes}/metrics")).await;
    assert!(
        metrics.contains("caseops_outbox_backlog_events 40"),
        "{metrics}"
    );

    let dir = tempfile::tempdir().unwrap();
    let _nats = Nats::start_on(bin, dir.path(), port);
    wait_until_published(&db, Duration::from_secs(30)).await;
    let (status, body) = get(&format!("{probes}/health/ready")).await;
    assert_eq!(status, 200, "{body}");
    let (_, metrics) = get(&format!("{probes}/metrics")).await;
    assert!(
        metrics.contains("caseops_outbox_backlog_events 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("caseops_outbox_published_total 40"),
        "{metrics}"
    );
    sigterm(&child);
    assert!(child.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_relay_publishes_at_its_servers_commit_not_at_its_next_poll() {
    let Some(bin) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(bin, dir.path());
    let dbs = fresh_databases("relay_wake").await;
    // An idle relay would look again only after ten minutes.
    let args = ["--relay", &nats.url(), "--relay-idle-ms", "600000"];
    let server = serve_support::serve(dbs.sqlite(), &args, &[], true);
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = jetstream::new(client);
    let deadline = Instant::now() + Duration::from_secs(30);
    let stream = loop {
        match js.get_stream("CASEOPS").await {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => panic!("the relay made no stream: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    // Let the relay's first claim find nothing, so it is idle when the run commits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let run = server.start_c102("relay-wake-0001", &[]).await;
    assert_eq!(run["status"], "completed", "{run}");
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut types = Vec::new();
    let mut request_ids = Vec::new();
    while types.len() < 2 {
        let m = tokio::time::timeout(Duration::from_secs(30), messages.next())
            .await
            .unwrap_or_else(|_| panic!("events still unpublished; seen {types:?}"))
            .unwrap()
            .unwrap();
        let envelope: Value = serde_json::from_slice(&m.payload).unwrap();
        types.push(envelope["type"].as_str().unwrap().to_string());
        request_ids.push(envelope["data"]["request_id"].clone());
    }
    assert_eq!(
        types,
        ["case.agent-run.started.v1", "case.agent-run.completed.v1"]
    );
    // Started without an `X-Request-Id`, the run is its request's id (which its
    // row does not store twice, and the relay rebuilds).
    assert_eq!(request_ids, [run["run_id"].clone(), run["run_id"].clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_probe_address_is_taken_says_which_flag_and_exits() {
    let dbs = fresh_databases("relay_listen_taken").await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["relay", "--database", dbs.sqlite(), "--listen", &addr])
        .args(["--nats-url", &format!("nats://127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on `{addr}` (--listen)")),
        "{err}"
    );
}
