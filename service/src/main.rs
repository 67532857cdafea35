//! `caseops`: the CaseOps claims-investigation service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use caseops_generated::Bundle;
use caseops_host::cli::{AuditCommand, DbArgs, HostCli, MigrateArgs, RunsCommand, ServeArgs};
use caseops_host::host::{DEV_SIGNING_KEY, HostConfig};
use caseops_host::openai::{OpenAiConfig, OpenAiResponsesPlanner};
use caseops_host::out;
use caseops_host::store::redact;
use caseops_runtime::ContractBundle;
use caseops_service::domain::reference_data;
use caseops_service::keys::{all_scopes, dev_keys};
use caseops_service::planner::{AnyPlanner, ConformancePlanner};
use caseops_service::reference::{SCHEMA, seed};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

/// What the host's shared verbs need to know of this binary.
const HOST_CLI: HostCli = HostCli {
    name: "caseops",
    default_database: "sqlite://caseops.db",
    default_tenant: Some("tenant-demo"),
    schema: &SCHEMA,
    resource_key: Bundle::RESOURCE_ID_FIELD,
    scopes: all_scopes,
};

// A run allocates many small short-lived values (JSON, SQL rows, HTTP headers);
// under load glibc's malloc took about a fifth of the server's CPU (perf).
#[global_allocator]
static ALLOCATOR: caseops_service::allocator::Allocator = caseops_service::allocator::Allocator;

/// Governed AI-agent tool calling for claims investigation: an API that starts agent
/// runs on cases, tools served over MCP behind task tokens, runs durable in SQLite
/// (default) or PostgreSQL.
#[derive(Parser)]
#[command(name = "caseops", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        serve: Box<ServeArgs>,
        #[command(flatten)]
        planner: PlannerArgs,
    },
    /// Create or upgrade the database schema.
    Migrate(MigrateArgs),
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
        /// The MCP era `mcp-call` speaks: `2025-11-25` (a bare request, as after the
        /// handshake) or `2026-07-28` (the per-request `_meta` envelope and the
        /// standard headers; `auto` means the same).
        #[arg(long, env = "CASEOPS_BENCH_MCP_ERA", default_value = "2025-11-25")]
        mcp_era: caseops_host::mcp::era::Preference,
        /// The server's task-token signing key (for `mcp-call`).
        #[arg(long, env = "CASEOPS_SIGNING_KEY", default_value = DEV_SIGNING_KEY, hide_default_value = true, hide_env_values = true)]
        signing_key: String,
        /// The server's task-token issuer, for `mcp-call` (default: `--api`).
        #[arg(long, env = "CASEOPS_TOKEN_ISSUER")]
        token_issuer: Option<String>,
        /// Print one JSON object instead of a table row.
        #[arg(long)]
        json: bool,
        /// Print the request the scenario sends, as HTTP/1.1 text, and send nothing:
        /// for another load tool (`tests/load/mcp_call.lua` has `wrk` send it).
        /// `mcp-call` and `replay` only; an `agent-run` needs a new key each time.
        #[arg(long, conflicts_with_all = ["json", "events_from"])]
        print_request: bool,
        /// Allow a target that is not a loopback address.
        #[arg(long)]
        allow_remote: bool,
        /// Also measure how long events take from their commit to a JetStream
        /// consumer: read the relay's stream on this NATS server (the one `serve
        /// --relay` publishes to) and report p50/p95/p99/max.
        #[arg(long, env = "CASEOPS_BENCH_EVENTS_FROM", value_name = "NATS_URL")]
        events_from: Option<String>,
        /// The stream `--events-from` reads.
        #[arg(long, env = "CASEOPS_RELAY_STREAM", default_value = "CASEOPS")]
        events_stream: String,
    },
    /// Audit trail tools.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Publish the outbox's events (runs started and finished, approvals, write
    /// effects) to NATS JetStream until stopped; see docs/events.md. Several relays
    /// may share one PostgreSQL database; on SQLite run one.
    Relay(caseops_host::cli::RelayArgs),
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

#[derive(Clone, Copy, ValueEnum)]
enum ScenarioArg {
    AgentRun,
    Replay,
    McpCall,
}

#[tokio::main]
async fn main() -> ExitCode {
    caseops_host::install_tls_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { db } => demo(db.database).await,
        Command::Serve {
            serve: args,
            planner: planner_args,
        } => match planner(planner_args) {
            Ok(planner) => serve(*args, planner).await,
            Err(e) => Err(e),
        },
        Command::Migrate(args) => caseops_host::cli::migrate_with(&HOST_CLI, &args).await,
        Command::Seed { db } => match caseops_host::cli::migrate(&HOST_CLI, &db).await {
            Ok(db) => seed(&db, &reference_data())
                .await
                .map(|_| out!("reference data loaded"))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        },
        Command::Runs { command } => caseops_host::cli::runs(&HOST_CLI, command).await,
        Command::Audit { command } => caseops_host::cli::audit(&HOST_CLI, command).await,
        Command::Relay(args) => caseops_host::cli::relay(&HOST_CLI, args).await,
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
            mcp_era,
            token_issuer,
            json,
            print_request,
            allow_remote,
            events_from,
            events_stream,
        } => {
            let config = caseops_service::bench::BenchConfig {
                scenario: match scenario {
                    ScenarioArg::AgentRun => caseops_service::bench::Scenario::AgentRun,
                    ScenarioArg::Replay => caseops_service::bench::Scenario::Replay,
                    ScenarioArg::McpCall => caseops_service::bench::Scenario::McpCall,
                },
                token_issuer: token_issuer.unwrap_or_else(|| api.trim_end_matches('/').to_string()),
                api_url: api,
                mcp_url: mcp,
                api_key,
                signing_key,
                mcp_era,
                concurrency,
                duration: std::time::Duration::from_secs(duration),
                requests,
                warmup: std::time::Duration::from_secs(warmup),
                allow_remote,
                events_from: events_from.map(|url| (url, events_stream)),
            };
            if print_request {
                // Exactly the request, without a final newline: a load tool sends
                // the file as it is.
                return match caseops_service::bench::fixed_request(&config)
                    .and_then(|r| r.http_text())
                    .and_then(|text| {
                        use std::io::Write as _;
                        let mut stdout = std::io::stdout();
                        stdout
                            .write_all(text.as_bytes())
                            .and_then(|()| stdout.flush())
                            .map_err(|e| format!("cannot write the request: {e}"))
                    }) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(message) => {
                        eprintln!("error: {message}");
                        ExitCode::from(1)
                    }
                };
            }
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
                    if let Some(e) = r.events {
                        out!(
                            "events: {} committed while measuring reached the consumer; commit to consumer p50 {:.3} ms, p95 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
                            e.received,
                            e.p50_ms,
                            e.p95_ms,
                            e.p99_ms,
                            e.max_ms
                        );
                    }
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

async fn serve(args: ServeArgs, planner: AnyPlanner) -> Result<(), String> {
    let config = args.config(&HOST_CLI, dev_keys())?;
    let database = config.database_url.clone();
    // Production data is the operator's: only development serving loads the demo
    // tenants and cases (`caseops seed` loads them anywhere, on request), and
    // before the servers answer, so that the first request finds them.
    let demo = (!args.production).then(reference_data);
    let running = caseops_service::start_seeded(config, planner, demo.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    if demo.is_some() {
        out!(
            "caseops: demo reference data loaded (tenant-demo, tenant-other; not in --production)"
        );
    }
    caseops_host::cli::serve_until_stopped(&HOST_CLI, running, &database, args.grace()).await
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
    let running = caseops_service::start_seeded(
        HostConfig {
            database_url: database.clone(),
            schema: &SCHEMA,
            api_listen: loopback,
            mcp_listen: loopback,
            signing_key: DEV_SIGNING_KEY.to_string(),
            keys: dev_keys(),
            mcp_url: None,
            mcp_era: Default::default(),
            mcp_transport: Default::default(),
            mcp_public_url: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            token_issuer: None,
            only: None,
            lease_ms: caseops_host::store::runs::DEFAULT_LEASE_MS,
            approval_ttl: std::time::Duration::from_secs(86_400),
            workers: 8,
            db_connections: caseops_host::host::DEFAULT_DB_CONNECTIONS,
            limits: Default::default(),
            relay: None,
        },
        AnyPlanner::Conformance(ConformancePlanner),
        Some(&reference_data()),
    )
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
                let why = c["reason"]
                    .as_str()
                    .unwrap_or("final answer accepted: grounded in observed evidence");
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

    out!("provenance (each cited reference -> the call of this run that returned it):");
    for (reference, from) in run["provenance"].as_object().into_iter().flatten() {
        out!(
            "  {reference:<40} {} attempt {} ({})",
            from["tool"].as_str().unwrap_or("?"),
            from["attempt"],
            from["tool_call_id"].as_str().unwrap_or("?")
        );
    }

    let replay: Value = json_body(post().send()).await?;
    out!();
    out!(
        "replay with the same Idempotency-Key: run_id {} (same: {}), replayed: {}",
        replay["run_id"].as_str().unwrap_or(""),
        replay["run_id"] == run["run_id"],
        replay["replayed"]
    );
    let writes = demo_writes(&http, &api).await;
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
    out!(
        "  open http://127.0.0.1:8080/ui # the console: sign in with dev-key-tenant-demo-supervisor"
    );
    running.shutdown(std::time::Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&temp);
    if run["status"] != "completed" || replay["replayed"] != true {
        return Err("the demo run did not complete as expected".into());
    }
    writes
}

/// C-103 (a reversible write, made once) and C-104 (an irreversible write that waits
/// for a person, approved by the demo supervisor).
async fn demo_writes(http: &reqwest::Client, api: &str) -> Result<(), String> {
    let start = |case: &str, goal: &str| {
        http.post(format!("{api}/v1/cases/{case}/agent-runs"))
            .header("x-api-key", "dev-key-tenant-demo")
            .header("idempotency-key", format!("demo-{}", uuid::Uuid::new_v4()))
            .json(&json!({ "goal": goal }))
            .send()
    };
    let as_key = |key: &'static str, path: String| {
        http.get(format!("{api}{path}"))
            .header("x-api-key", key)
            .send()
    };
    let evidence = |run: &Value| {
        run["result"]["evidence_refs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };

    out!();
    out!("C-103: the case lacks a document; the run asks the claimant for it (a reversible write)");
    let run: Value = json_body(start(
        "C-103",
        "Check claim case C-103 and request what it lacks.",
    ))
    .await?;
    let run_id = run["run_id"].as_str().unwrap_or_default();
    let ledger: Value = json_body(as_key(
        "dev-key-tenant-demo",
        format!("/v1/agent-runs/{run_id}/tool-executions"),
    ))
    .await?;
    if let Some(row) = ledger["tool_executions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["tool_name"] == "caseops_request_missing_documents")
    {
        out!(
            "  {} {} -> {} on attempt {} ({})",
            row["tool_name"].as_str().unwrap_or(""),
            row["arguments"],
            row["status"].as_str().unwrap_or(""),
            row["attempt_count"],
            row["result"]["evidence_ref"].as_str().unwrap_or("")
        );
    }
    out!(
        "  run {}: {} in {} steps, outcome {}, evidence {}",
        run_id,
        run["status"].as_str().unwrap_or("?"),
        run["step_count"],
        run["result"]["outcome"].as_str().unwrap_or("-"),
        evidence(&run)
    );

    out!();
    out!(
        "C-104: the case is complete; marking it ready for assessment is irreversible and waits for a person"
    );
    let run: Value = json_body(start(
        "C-104",
        "Check claim case C-104 and hand it to the assessors.",
    ))
    .await?;
    let run_id = run["run_id"].as_str().unwrap_or_default().to_string();
    out!("  run {run_id}: {}", run["status"].as_str().unwrap_or("?"));
    let pending: Value = json_body(as_key(
        "dev-key-tenant-demo",
        "/v1/approvals?status=pending".into(),
    ))
    .await?;
    let Some(approval) = pending["approvals"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["run_id"] == run_id.as_str())
        .cloned()
    else {
        return Err(format!("the C-104 run asked for no approval: {run}"));
    };
    let id = approval["approval_id"].as_str().unwrap_or_default();
    out!(
        "  approval {id}: {} {} requested by {}, approver role {}",
        approval["tool"].as_str().unwrap_or(""),
        approval["arguments"],
        approval["requested_by"].as_str().unwrap_or(""),
        approval["approver_role"].as_str().unwrap_or("")
    );
    let own = http
        .post(format!("{api}/v1/approvals/{id}/decision"))
        .header("x-api-key", "dev-key-tenant-demo")
        .json(&json!({ "decision": "approve" }))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    out!(
        "  the requester approving it: {} (it lacks `approval:decide`, and would be deciding its own run)",
        own.status()
    );
    let decided: Value = json_body(
        http.post(format!("{api}/v1/approvals/{id}/decision"))
            .header("x-api-key", "dev-key-tenant-demo-supervisor")
            .json(&json!({ "decision": "approve", "comment": "all three documents checked" }))
            .send(),
    )
    .await?;
    out!(
        "  {} by {}: {}",
        decided["status"].as_str().unwrap_or("?"),
        decided["decided_by"].as_str().unwrap_or("?"),
        decided["comment"].as_str().unwrap_or("")
    );
    let mut run = Value::Null;
    for _ in 0..100 {
        run = json_body(as_key(
            "dev-key-tenant-demo",
            format!("/v1/agent-runs/{run_id}"),
        ))
        .await?;
        if run["status"] != "running" && run["status"] != "waiting_approval" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    out!(
        "  run {run_id}: {} in {} steps, outcome {}, evidence {}",
        run["status"].as_str().unwrap_or("?"),
        run["step_count"],
        run["result"]["outcome"].as_str().unwrap_or("-"),
        evidence(&run)
    );
    if run["status"] != "completed" {
        return Err(format!("the approved C-104 run did not complete: {run}"));
    }
    Ok(())
}
