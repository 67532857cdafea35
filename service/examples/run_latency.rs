//! Latency of a C-102 run, on SQLite and (with `CASEOPS_BENCH_POSTGRES_URL`)
//! PostgreSQL: in-process (engine + store, tools called directly, no HTTP) and
//! through the API with the MCP transport (host started in this process).
//!
//! `cargo run --release -p caseops-service --example run_latency -- [runs]`

use std::net::SocketAddr;
use std::time::Instant;

use caseops_generated::{Bundle, Dispatcher};
use caseops_host::host::{DEV_SIGNING_KEY, HostConfig};
use caseops_host::store::Db;
use caseops_host::store::runs::{NewRun, SqlRunStore};
use caseops_runtime::{
    ContractBundle, Engine, ExecError, Executor, RunSpec, ToolCall, ToolDispatch,
};
use caseops_service::domain::reference_data;
use caseops_service::keys::dev_keys;
use caseops_service::planner::{AnyPlanner, ConformancePlanner};
use caseops_service::reference::{SqlRepository, seed};
use caseops_service::tools::CaseOpsTools;
use serde_json::{Value, json};

struct Direct(Dispatcher<CaseOpsTools<SqlRepository>>);

impl Executor for Direct {
    async fn execute(&self, call: &ToolCall) -> Result<Value, ExecError> {
        self.0
            .call(call.tool, &call.context, call.arguments.clone())
            .await
            .map_err(|e| ExecError::Business {
                code: "E".into(),
                message: e.to_string(),
            })
    }
}

fn report(label: &str, mut ms: Vec<f64>) {
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |p: f64| ms[((ms.len() as f64 * p) as usize).min(ms.len() - 1)];
    println!(
        "{label:<34} n={:<5} p50 {:>7.3} ms  p95 {:>7.3} ms  max {:>7.3} ms",
        ms.len(),
        q(0.5),
        q(0.95),
        ms[ms.len() - 1]
    );
}

fn spec(i: usize) -> RunSpec {
    RunSpec {
        run_id: format!("bench-{}-{i}", uuid::Uuid::new_v4().simple()),
        tenant_id: "tenant-demo".into(),
        task_id: format!("task-{i}"),
        subject: "bench".into(),
        resource_id: "C-102".into(),
        scopes: Bundle::TOOLS
            .iter()
            .map(|t| t.required_scope.to_string())
            .collect(),
        catalog: Bundle::CATALOG.iter().map(|s| s.to_string()).collect(),
        stage: "investigating".into(),
        goal: "check".into(),
        correlation_id: "bench".into(),
    }
}

async fn in_process(url: &str, runs: usize) -> (Vec<f64>, usize) {
    let db = Db::connect(url, 8, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    seed(&db, &reference_data()).await.unwrap();
    let store = SqlRunStore::new(db.clone());
    let direct = Direct(Dispatcher(CaseOpsTools {
        repo: SqlRepository { db: db.clone() },
    }));
    let engine = Engine::<Bundle>::new().unwrap();
    let before = db.commits();
    let sent_before = caseops_host::store::sql::statements_sent();
    let mut ms = Vec::new();
    for i in 0..runs {
        let s = spec(i);
        let t = Instant::now();
        store
            .allocate(&NewRun {
                spec: s.clone(),
                actor: "bench".into(),
                idempotency_key: format!("k-{}", s.run_id),
                request_hash: "h".into(),
                request_id: None,
                planner_kind: "conformance".into(),
                model: None,
                bundle_digest: Bundle::BUNDLE_DIGEST.into(),
            })
            .await
            .unwrap();
        let out = engine
            .start(s, &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed");
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let statements = caseops_host::store::sql::statements_sent() - sent_before;
    println!(
        "statements per in-process run (allocation included): {}",
        statements / runs
    );
    (ms, (db.commits() - before) / runs)
}

async fn through_api(url: &str, runs: usize) -> Vec<f64> {
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let running = caseops_service::start(
        HostConfig {
            database_url: url.into(),
            schema: &caseops_service::reference::SCHEMA,
            api_listen: loopback,
            mcp_listen: loopback,
            signing_key: DEV_SIGNING_KEY.into(),
            keys: dev_keys(),
            mcp_url: None,
            mcp_era: Default::default(),
            mcp_transport: Default::default(),
            mcp_public_url: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            token_issuer: None,
            only: None,
            lease_ms: 30_000,
            approval_ttl: std::time::Duration::from_secs(86_400),
            workers: 8,
            db_connections: caseops_host::host::DEFAULT_DB_CONNECTIONS,
            limits: Default::default(),
            relay: None,
        },
        AnyPlanner::Conformance(ConformancePlanner),
    )
    .await
    .unwrap();
    seed(&running.db, &reference_data()).await.unwrap();
    let api = format!("http://{}", running.api_addr.unwrap());
    let http = reqwest::Client::new();
    let mut ms = Vec::new();
    let sent_before = caseops_host::store::sql::statements_sent();
    for i in 0..runs + 20 {
        let t = Instant::now();
        let r = http
            .post(format!("{api}/v1/cases/C-102/agent-runs"))
            .header("x-api-key", "dev-key-tenant-demo")
            .header(
                "idempotency-key",
                format!("api-bench-{}", uuid::Uuid::new_v4().simple()),
            )
            .json(&json!({"goal": "check C-102"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        r.bytes().await.unwrap();
        if i >= 20 {
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let statements = caseops_host::store::sql::statements_sent() - sent_before;
    println!(
        "statements per run through the API (tool reads included): {}",
        statements / (runs + 20)
    );
    ms
}

#[tokio::main]
async fn main() {
    caseops_host::install_tls_provider();
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let dir = std::env::temp_dir().join(format!("caseops-bench-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut backends = vec![(
        "sqlite",
        format!("sqlite://{}", dir.join("bench.db").display()),
    )];
    if let Ok(url) = std::env::var("CASEOPS_BENCH_POSTGRES_URL") {
        backends.push(("postgres", url));
    }
    for (name, url) in backends {
        let (ms, commits) = in_process(&url, runs).await;
        report(&format!("{name}: in-process run"), ms);
        println!("{name}: commits per run {commits}");
        report(
            &format!("{name}: through API + MCP"),
            through_api(&url, runs).await,
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
