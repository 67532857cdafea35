//! `caseops`: the CaseOps claims-investigation service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use caseops_generated::Bundle;
use caseops_host::host::{DEV_SIGNING_KEY, HostConfig, Only};
use caseops_host::openai::{OpenAiConfig, OpenAiResponsesPlanner};
use caseops_host::store::audit;
use caseops_host::store::runs::SqlRunStore;
use caseops_host::store::{Db, redact};
use caseops_runtime::ContractBundle;
use caseops_service::domain::reference_data;
use caseops_service::keys::dev_keys;
use caseops_service::planner::{AnyPlanner, ConformancePlanner};
use caseops_service::reference::{SCHEMA, seed};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

/// `println!` that ends the process quietly when standard output is closed
/// (`caseops demo | head`) instead of panicking.
macro_rules! out {
    () => { out!("") };
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

// A run allocates many small short-lived values (JSON, SQL rows, HTTP headers);
// under load glibc's malloc took about a fifth of the server's CPU (perf).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Governed AI-agent tool calling for claims investigation: an API that starts agent
/// runs on cases, tools served over MCP behind task tokens, runs durable in SQLite
/// (default) or PostgreSQL.
#[derive(Parser)]
#[command(name = "caseops", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct DbArgs {
    /// Database URL: `sqlite:///path/file.db` or `postgres://user@host/db`.
    #[arg(long = "database", env = "CASEOPS_DATABASE_URL")]
    database: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the C-102 investigation end to end on a fresh embedded database and print
    /// the tool ledger, the checkpoints and the result; then replay it.
    Demo {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Serve the API and the MCP tool server.
    Serve {
        #[command(flatten)]
        db: DbArgs,
        /// API address: `host:port`, `localhost:port`, or a port alone (loopback).
        #[arg(long, env = "CASEOPS_LISTEN", default_value = "127.0.0.1:8080", value_parser = listen_address)]
        listen: SocketAddr,
        /// MCP tool server address, in the same forms as `--listen`.
        #[arg(long, env = "CASEOPS_MCP_LISTEN", default_value = "127.0.0.1:8081", value_parser = listen_address)]
        mcp_listen: SocketAddr,
        /// Serve only one half (for separate processes).
        #[arg(long, value_enum)]
        only: Option<OnlyArg>,
        /// The MCP server's URL when serving `--only api`.
        #[arg(long, env = "CASEOPS_MCP_URL")]
        mcp_url: Option<String>,
        /// HS256 key for task tokens (at least 32 bytes in production).
        #[arg(long, env = "CASEOPS_SIGNING_KEY", hide_env_values = true)]
        signing_key: Option<String>,
        /// Refuse SQLite, the development API keys and the development signing key.
        #[arg(long, env = "CASEOPS_PRODUCTION")]
        production: bool,
        /// Seconds a run's lease lasts without a renewal before another replica may
        /// take the run over (its driver renews it every third of this).
        #[arg(long, env = "CASEOPS_LEASE_SECONDS", default_value_t = 5)]
        lease_seconds: u64,
        /// Runs this process drives at once; more wait for a free worker here or
        /// on another replica.
        #[arg(long, env = "CASEOPS_WORKERS", default_value_t = 64)]
        workers: usize,
        /// On SIGTERM or SIGINT, seconds to let runs finish the step they are in
        /// before they are handed over to another replica mid-step.
        #[arg(long, env = "CASEOPS_SHUTDOWN_GRACE_SECONDS", default_value_t = 10)]
        shutdown_grace_seconds: u64,
        #[command(flatten)]
        planner: PlannerArgs,
    },
    /// Create or upgrade the database schema.
    Migrate {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Load the reference data (tenants, policy, case C-102, documents, alias rules).
    Seed {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Inspect runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Load a running `caseops serve` (loopback only unless --allow-remote) and print
    /// completed, errors, requests per second and p50/p95/p99/max latency.
    Bench {
        /// `agent-run` (fresh key per request), `replay` (one key) or `mcp-call`.
        #[arg(long, value_enum, default_value_t = ScenarioArg::AgentRun)]
        scenario: ScenarioArg,
        /// The API base URL.
        #[arg(
            long,
            env = "CASEOPS_BENCH_API",
            default_value = "http://127.0.0.1:8080"
        )]
        api: String,
        /// The MCP endpoint.
        #[arg(
            long,
            env = "CASEOPS_BENCH_MCP",
            default_value = "http://127.0.0.1:8081/mcp"
        )]
        mcp: String,
        /// Concurrent clients.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Seconds to measure (after the warm-up).
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Stop after this many requests instead of after `--duration`.
        #[arg(long)]
        requests: Option<u64>,
        /// Seconds of warm-up before measuring.
        #[arg(long, default_value_t = 2)]
        warmup: u64,
        #[arg(
            long,
            env = "CASEOPS_BENCH_API_KEY",
            default_value = "dev-key-tenant-demo",
            hide_env_values = true
        )]
        api_key: String,
        /// The server's task-token signing key (for `mcp-call`).
        #[arg(long, env = "CASEOPS_SIGNING_KEY", default_value = DEV_SIGNING_KEY, hide_default_value = true, hide_env_values = true)]
        signing_key: String,
        /// Print one JSON object instead of a table row.
        #[arg(long)]
        json: bool,
        /// Allow a target that is not a loopback address.
        #[arg(long)]
        allow_remote: bool,
    },
    /// Audit trail tools.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

#[derive(Args, Clone)]
struct PlannerArgs {
    /// Which planner proposes actions.
    #[arg(long, env = "CASEOPS_PLANNER", value_enum, default_value_t = PlannerKind::Conformance)]
    planner: PlannerKind,
    /// Responses API base URL (for `--planner openai`).
    #[arg(
        long,
        env = "CASEOPS_OPENAI_BASE_URL",
        default_value = "https://api.openai.com/v1"
    )]
    openai_base_url: String,
    /// Model name (for `--planner openai`).
    #[arg(long, env = "CASEOPS_OPENAI_MODEL", default_value = "gpt-5-mini")]
    openai_model: String,
    /// API key (for `--planner openai`); never printed.
    #[arg(long, env = "CASEOPS_OPENAI_API_KEY", hide_env_values = true)]
    openai_api_key: Option<String>,
    /// Reasoning effort: low, medium or high.
    #[arg(long, env = "CASEOPS_OPENAI_REASONING_EFFORT")]
    openai_reasoning_effort: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlannerKind {
    /// The deterministic C-102 protocol driver (not an agent).
    Conformance,
    /// A model through the OpenAI Responses API.
    Openai,
}

fn planner(args: PlannerArgs) -> Result<AnyPlanner, String> {
    match args.planner {
        PlannerKind::Conformance => Ok(AnyPlanner::Conformance(ConformancePlanner)),
        PlannerKind::Openai => {
            let api_key = args
                .openai_api_key
                .ok_or("`--planner openai` needs CASEOPS_OPENAI_API_KEY")?;
            let config = OpenAiConfig {
                base_url: args.openai_base_url,
                model: args.openai_model,
                api_key,
                reasoning_effort: args.openai_reasoning_effort,
                timeout: std::time::Duration::from_secs(60),
                instructions: Some(caseops_service::OPENAI_INSTRUCTIONS.to_string()),
            };
            OpenAiResponsesPlanner::new::<caseops_generated::Bundle>(config)
                .map(|p| AnyPlanner::OpenAi(Box::new(p)))
                .map_err(|e| e.to_string())
        }
    }
}

#[derive(Subcommand)]
enum RunsCommand {
    /// List a tenant's runs, newest first.
    List {
        /// The tenant whose runs to list.
        #[arg(long, env = "CASEOPS_TENANT", default_value = "tenant-demo")]
        tenant: String,
        /// Only runs in this status (`running`, `completed`, `needs_human`,
        /// `stopped`, `failed`).
        #[arg(long)]
        status: Option<String>,
        /// At most this many runs.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Print a run with its ledger and checkpoints as JSON.
    Show {
        run_id: String,
        /// The tenant the run belongs to.
        #[arg(long, env = "CASEOPS_TENANT", default_value = "tenant-demo")]
        tenant: String,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Recompute every tenant's audit hash chain; exit 1 if any event was edited,
    /// inserted or deleted.
    Verify {
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ScenarioArg {
    AgentRun,
    Replay,
    McpCall,
}

#[derive(Clone, Copy, ValueEnum)]
enum OnlyArg {
    Api,
    Mcp,
}

/// `8080` → `127.0.0.1:8080`; `localhost:8080` and other names are resolved (the
/// first address wins); `0.0.0.0:8080` and `[::1]:8080` are taken as they are.
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("`{text}` names no address")),
        Err(e) => Err(format!("`{text}` is not `host:port` or a port ({e})")),
    }
}

fn default_db() -> String {
    "sqlite://caseops.db".to_string()
}

#[tokio::main]
async fn main() -> ExitCode {
    caseops_host::install_tls_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { db } => demo(db.database).await,
        Command::Serve {
            db,
            listen,
            mcp_listen,
            only,
            mcp_url,
            signing_key,
            production,
            lease_seconds,
            workers,
            shutdown_grace_seconds,
            planner: planner_args,
        } => match planner(planner_args) {
            Ok(planner) => {
                let lease_ms = (lease_seconds.max(1) * 1000) as i64;
                let grace = std::time::Duration::from_secs(shutdown_grace_seconds);
                let opts = ServeOptions {
                    listen,
                    mcp_listen,
                    only,
                    mcp_url,
                    signing_key,
                    production,
                    lease_ms,
                    planner,
                    workers,
                    grace,
                };
                serve(db.database.unwrap_or_else(default_db), opts).await
            }
            Err(e) => Err(e),
        },
        Command::Migrate { db } => open(db).await.map(|_| out!("database is up to date")),
        Command::Seed { db } => match open(db).await {
            Ok(db) => seed(&db, &reference_data())
                .await
                .map(|_| out!("reference data loaded"))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        },
        Command::Runs {
            command: RunsCommand::Show { run_id, tenant, db },
        } => show(db, &tenant, &run_id).await,
        Command::Runs {
            command:
                RunsCommand::List {
                    tenant,
                    status,
                    limit,
                    json,
                    db,
                },
        } => list(db, &tenant, status.as_deref(), limit, json).await,
        Command::Audit {
            command: AuditCommand::Verify { db },
        } => verify(db).await,
        Command::Bench {
            scenario,
            api,
            mcp,
            concurrency,
            duration,
            requests,
            warmup,
            api_key,
            signing_key,
            json,
            allow_remote,
        } => {
            let config = caseops_service::bench::BenchConfig {
                scenario: match scenario {
                    ScenarioArg::AgentRun => caseops_service::bench::Scenario::AgentRun,
                    ScenarioArg::Replay => caseops_service::bench::Scenario::Replay,
                    ScenarioArg::McpCall => caseops_service::bench::Scenario::McpCall,
                },
                api_url: api,
                mcp_url: mcp,
                api_key,
                signing_key,
                concurrency,
                duration: std::time::Duration::from_secs(duration),
                requests,
                warmup: std::time::Duration::from_secs(warmup),
                allow_remote,
            };
            match caseops_service::bench::run(config).await {
                Ok(r) if json => {
                    out!("{}", serde_json::to_string(&r).unwrap_or_default());
                    Ok(())
                }
                Ok(r) => {
                    out!(
                        "scenario    conc  completed  errors     req/s    p50 ms    p95 ms    p99 ms    max ms"
                    );
                    out!(
                        "{:<10} {:>5} {:>10} {:>7} {:>9.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                        r.scenario,
                        r.concurrency,
                        r.completed,
                        r.errors,
                        r.requests_per_second,
                        r.p50_ms,
                        r.p95_ms,
                        r.p99_ms,
                        r.max_ms
                    );
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

async fn open(db: DbArgs) -> Result<Db, String> {
    let url = db.database.unwrap_or_else(default_db);
    Db::connect(&url, 4, &SCHEMA)
        .await
        .map_err(|e| e.to_string())
}

struct ServeOptions {
    listen: SocketAddr,
    mcp_listen: SocketAddr,
    only: Option<OnlyArg>,
    mcp_url: Option<String>,
    signing_key: Option<String>,
    production: bool,
    lease_ms: i64,
    planner: AnyPlanner,
    workers: usize,
    grace: std::time::Duration,
}

async fn serve(database: String, o: ServeOptions) -> Result<(), String> {
    let ServeOptions {
        listen,
        mcp_listen,
        only,
        mcp_url,
        signing_key,
        production,
        lease_ms,
        planner,
        workers,
        grace,
    } = o;
    let signing_key = signing_key.unwrap_or_else(|| DEV_SIGNING_KEY.to_string());
    if production {
        if database.starts_with("sqlite:") {
            return Err(
                "production mode refuses SQLite: set CASEOPS_DATABASE_URL to a PostgreSQL URL"
                    .into(),
            );
        }
        if signing_key == DEV_SIGNING_KEY || signing_key.len() < 32 {
            return Err("production mode refuses the development signing key: set CASEOPS_SIGNING_KEY (32+ bytes)".into());
        }
    }
    let keys = match std::env::var("CASEOPS_API_KEYS") {
        Ok(spec) if !spec.trim().is_empty() => parse_api_keys(&spec)?,
        _ if production => {
            return Err("production mode refuses the development API keys: set CASEOPS_API_KEYS (`key=tenant:actor;…`)".into());
        }
        _ => dev_keys(),
    };
    if production && keys.keys().any(|k| dev_keys().contains_key(k)) {
        return Err(
            "production mode refuses the development API keys: remove them from CASEOPS_API_KEYS"
                .into(),
        );
    }
    let config = HostConfig {
        database_url: database.clone(),
        schema: &SCHEMA,
        api_listen: listen,
        mcp_listen,
        signing_key,
        keys,
        mcp_url,
        only: only.map(|o| match o {
            OnlyArg::Api => Only::Api,
            OnlyArg::Mcp => Only::Mcp,
        }),
        lease_ms,
        workers,
    };
    let running = caseops_service::start(config, planner)
        .await
        .map_err(|e| e.to_string())?;
    // Production data is the operator's: only development serving loads the demo
    // tenants and cases (`caseops seed` loads them anywhere, on request).
    if !production {
        seed(&running.db, &reference_data())
            .await
            .map_err(|e| e.to_string())?;
        out!(
            "caseops: demo reference data loaded (tenant-demo, tenant-other; not in --production)"
        );
    }
    if let Some(a) = running.api_addr {
        out!("caseops api on http://{a} (database {})", redact(&database));
    }
    if let Some(m) = running.mcp_addr {
        out!("caseops mcp on http://{m}/mcp");
    }
    let signal = stop_signal().await?;
    out!(
        "caseops: {signal}: shutting down (grace {} s)",
        grace.as_secs()
    );
    running.shutdown(grace).await;
    out!("caseops: stopped");
    Ok(())
}

/// Waits for SIGTERM (what orchestrators send) or SIGINT (Ctrl-C); names it.
async fn stop_signal() -> Result<&'static str, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

/// `key=tenant:actor;key2=tenant2:actor2` → API principals with every tool scope.
fn parse_api_keys(
    spec: &str,
) -> Result<std::collections::HashMap<String, caseops_host::api::ApiPrincipal>, String> {
    let scopes: Vec<String> = caseops_generated::Bundle::TOOLS
        .iter()
        .map(|t| t.required_scope.to_string())
        .collect();
    let mut keys = std::collections::HashMap::new();
    for (i, entry) in spec
        .split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .enumerate()
    {
        let bad = || format!("CASEOPS_API_KEYS entry {} is not `key=tenant:actor`", i + 1);
        let (key, who) = entry.split_once('=').ok_or_else(bad)?;
        let (tenant, actor) = who.split_once(':').ok_or_else(bad)?;
        if key.len() < 16 || tenant.is_empty() || actor.is_empty() {
            return Err(format!("{} (keys are at least 16 characters)", bad()));
        }
        keys.insert(
            key.to_string(),
            caseops_host::api::ApiPrincipal {
                tenant_id: tenant.into(),
                actor: actor.into(),
                scopes: scopes.clone(),
            },
        );
    }
    Ok(keys)
}

/// Opens an existing database without creating or migrating anything.
async fn open_existing(db: DbArgs) -> Result<Db, String> {
    let url = db.database.unwrap_or_else(default_db);
    Db::open_existing(&url, 2, &SCHEMA)
        .await
        .map_err(|e| e.to_string())
}

async fn list(
    db: DbArgs,
    tenant: &str,
    status: Option<&str>,
    limit: i64,
    json: bool,
) -> Result<(), String> {
    let store = SqlRunStore::new(open_existing(db).await?);
    let runs = store
        .list(tenant, status, limit.clamp(1, 10_000))
        .await
        .map_err(|e| e.to_string())?;
    if json {
        for r in &runs {
            out!("{}", r.to_json(Bundle::RESOURCE_ID_FIELD));
        }
        return Ok(());
    }
    out!(
        "{:<44} {:<12} {:<10} {:>5}  {:<28} created (ms since epoch)",
        "run",
        "status",
        "case",
        "steps",
        "stop reason"
    );
    for r in &runs {
        out!(
            "{:<44} {:<12} {:<10} {:>5}  {:<28} {}",
            r.run_id,
            r.status,
            r.resource_id,
            r.step_count,
            r.stop_reason.as_deref().unwrap_or("-"),
            r.created_at
        );
    }
    if runs.is_empty() {
        out!("(no runs for tenant `{tenant}`)");
    }
    Ok(())
}

async fn show(db: DbArgs, tenant: &str, run_id: &str) -> Result<(), String> {
    let store = SqlRunStore::new(open_existing(db).await?);
    let run = store
        .get(tenant, run_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no run `{run_id}` for tenant `{tenant}`"))?;
    let ledger = store
        .ledger(tenant, run_id)
        .await
        .map_err(|e| e.to_string())?;
    let checkpoints = store
        .transitions(tenant, run_id, 0)
        .await
        .map_err(|e| e.to_string())?;
    let cps: Vec<Value> = checkpoints
        .iter()
        .map(|c| json!({"sequence": c.sequence, "from": c.from, "to": c.to, "reason": c.reason}))
        .collect();
    out!(
        "{}",
        serde_json::to_string_pretty(
            &json!({ "run": run.to_json(Bundle::RESOURCE_ID_FIELD), "tool_executions": ledger, "checkpoints": cps })
        )
        .unwrap_or_default()
    );
    Ok(())
}

async fn verify(db: DbArgs) -> Result<(), String> {
    let db = open_existing(db).await?;
    let v = audit::verify(&db).await.map_err(|e| e.to_string())?;
    for p in &v.problems {
        out!("BROKEN {p}");
    }
    out!(
        "{} audit events in {} tenant chains; {} problems",
        v.events,
        v.tenants,
        v.problems.len()
    );
    if v.problems.is_empty() {
        Ok(())
    } else {
        Err("the audit trail does not verify".into())
    }
}

/// The JSON body of a response, with any transport or decoding failure as a message.
async fn json_body(
    response: impl std::future::Future<Output = Result<reqwest::Response, reqwest::Error>>,
) -> Result<Value, String> {
    let response = response.await.map_err(|e| e.to_string())?;
    response.json().await.map_err(|e| e.to_string())
}

async fn demo(database: Option<String>) -> Result<(), String> {
    let started = std::time::Instant::now();
    let temp = std::env::temp_dir().join(format!("caseops-demo-{}", uuid::Uuid::new_v4()));
    let database = match database {
        Some(url) => url,
        None => {
            std::fs::create_dir_all(&temp)
                .map_err(|e| format!("cannot create `{}`: {e}", temp.display()))?;
            format!(
                "sqlite://{}",
                PathBuf::from(&temp).join("caseops.db").display()
            )
        }
    };
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
    let running = caseops_service::start(
        HostConfig {
            database_url: database.clone(),
            schema: &SCHEMA,
            api_listen: loopback,
            mcp_listen: loopback,
            signing_key: DEV_SIGNING_KEY.to_string(),
            keys: dev_keys(),
            mcp_url: None,
            only: None,
            lease_ms: caseops_host::store::runs::DEFAULT_LEASE_MS,
            workers: 8,
        },
        AnyPlanner::Conformance(ConformancePlanner),
    )
    .await
    .map_err(|e| e.to_string())?;
    seed(&running.db, &reference_data())
        .await
        .map_err(|e| e.to_string())?;
    let api = format!("http://{}", running.api_addr.expect("api started"));
    out!("CaseOps demo");
    if database.starts_with("sqlite://") && temp.exists() {
        out!(
            "  database  {} (temporary: removed when the demo ends)",
            redact(&database)
        );
    } else {
        out!("  database  {}", redact(&database));
    }
    out!("  api       {api}");
    out!("  mcp       {}", running.mcp_url);

    let http = reqwest::Client::new();
    let ready: Value = json_body(http.get(format!("{api}/health/ready")).send()).await?;
    if ready["status"] != "ready" {
        return Err(format!("the service is not ready: {ready}"));
    }
    let key = format!("demo-{}", uuid::Uuid::new_v4());
    let post = || {
        http.post(format!("{api}/v1/cases/C-102/agent-runs"))
            .header("x-api-key", "dev-key-tenant-demo")
            .header("idempotency-key", &key)
            .json(&json!({ "goal": "Check whether claim case C-102 holds every document its policy requires." }))
    };
    let t = std::time::Instant::now();
    let response = post().send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let run: Value = response.json().await.map_err(|e| e.to_string())?;
    let run_ms = t.elapsed().as_secs_f64() * 1000.0;
    if status != 201 {
        return Err(format!("POST returned {status}: {run}"));
    }
    let run_id = run["run_id"].as_str().unwrap_or_default().to_string();
    let get = |path: String| {
        http.get(format!("{api}/v1/agent-runs/{run_id}{path}"))
            .header("x-api-key", "dev-key-tenant-demo")
            .send()
    };
    let ledger: Value = json_body(get("/tool-executions".into())).await?;
    let checkpoints: Value = json_body(get("/checkpoints".into())).await?;

    out!();
    out!(
        "run {run_id}: {} in {} steps ({run_ms:.1} ms)",
        run["status"].as_str().unwrap_or("?"),
        run["step_count"]
    );
    out!();
    out!("  #  tool                                   status     attempts  evidence");
    for (i, row) in ledger["tool_executions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        out!(
            "  {}  {:<38} {:<10} {:>8}  {}",
            i + 1,
            row["tool_name"].as_str().unwrap_or(""),
            row["status"].as_str().unwrap_or(""),
            row["attempt_count"].to_string(),
            row["result"]["evidence_ref"].as_str().unwrap_or("")
        );
    }
    out!();
    out!(
        "timeline (every transition is a checkpoint; * = committed before the next external call)"
    );
    let rows = ledger["tool_executions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let cps = checkpoints["checkpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut last_call: Option<&Value> = None;
    for c in &cps {
        let seq = c["sequence"].as_u64().unwrap_or(0);
        let to = c["to"].as_str().unwrap_or("?");
        let detail = match to {
            "tool_proposed" => {
                last_call = rows.iter().find(|r| {
                    r["tool_call_id"]
                        .as_str()
                        .is_some_and(|id| id.ends_with(&format!(":{seq}")))
                });
                last_call
                    .map(|r| {
                        format!(
                            "{} {}",
                            r["tool_name"].as_str().unwrap_or(""),
                            r["arguments"]
                        )
                    })
                    .unwrap_or_default()
            }
            "tool_authorized" => "schema-valid arguments; Cedar permits it on this case".into(),
            "tool_running" => "* executed over MCP with a task token".into(),
            "observing" => last_call
                .map(|r| {
                    format!(
                        "evidence {}",
                        r["result"]["evidence_ref"].as_str().unwrap_or("-")
                    )
                })
                .unwrap_or_default(),
            "completed" | "needs_human" | "stopped" | "failed" => {
                let why = c["reason"].as_str().unwrap_or("final answer accepted");
                format!("* {why}")
            }
            _ => c["reason"].as_str().unwrap_or("").to_string(),
        };
        let line = format!(
            "  {seq:>2}  {:<15} -> {to:<15} {detail}",
            c["from"].as_str().unwrap_or("?")
        );
        out!("{}", line.trim_end());
    }
    {
        let budgets = caseops_generated::Bundle::BUDGETS;
        out!(
            "budget: {} of {} steps, repeat limit {}, wall clock {} s",
            run["step_count"],
            budgets.max_steps,
            budgets.repeat_limit,
            budgets.max_wall_clock_seconds
        );
    }
    out!("result:");
    out!(
        "{}",
        serde_json::to_string_pretty(&run["result"]).unwrap_or_default()
    );

    let replay: Value = json_body(post().send()).await?;
    out!();
    out!(
        "replay with the same Idempotency-Key: run_id {} (same: {}), replayed: {}",
        replay["run_id"].as_str().unwrap_or(""),
        replay["run_id"] == run["run_id"],
        replay["replayed"]
    );
    out!("demo finished in {:.2} s", started.elapsed().as_secs_f64());
    out!();
    out!("next, on your own database (./caseops.db):");
    out!("  caseops serve                 # API on 127.0.0.1:8080, MCP tools on 127.0.0.1:8081");
    out!(
        "  curl -X POST http://127.0.0.1:8080/v1/cases/C-102/agent-runs -H 'X-API-Key: dev-key-tenant-demo' \\"
    );
    out!(
        "       -H 'Idempotency-Key: my-first-run-0001' -H 'Content-Type: application/json' -d '{{\"goal\": \"Check C-102.\"}}'"
    );
    out!(
        "  caseops runs list             # then: caseops runs show <run_id>, caseops audit verify"
    );
    running.shutdown(std::time::Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&temp);
    if run["status"] != "completed" || replay["replayed"] != true {
        return Err("the demo run did not complete as expected".into());
    }
    Ok(())
}
