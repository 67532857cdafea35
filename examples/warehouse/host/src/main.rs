//! `warehouse`: a second agent on `caseops-host`. Everything governed — the API,
//! MCP tools behind task tokens, Cedar, leases, the ledger, audit and outbox — is
//! the host's; this file brings the bundle, a deterministic driver and wiring.

use std::collections::HashMap;
use std::net::SocketAddr;

use caseops_host::api::ApiPrincipal;
use caseops_host::host::{self, App, DEV_SIGNING_KEY, HostConfig};
use caseops_runtime::context::PlannerView;
use caseops_runtime::{Planner, PlannerError};
use clap::Parser;
use serde_json::{Value, json};
use warehouse_generated::{Bundle, Dispatcher};
use warehouse_host::tools::{SCHEMA, Warehouse};

/// Serves the warehouse restocking agent: `POST /v1/shelves/{shelf_id}/restock-runs`
/// with `{"goal": "reserve 5 WIDGET-7"}` and the header `X-API-Key: dev-key-warehouse`.
#[derive(Parser)]
#[command(name = "warehouse", version, about)]
struct Cli {
    /// `sqlite://warehouse.db` or `postgres://…`.
    #[arg(
        long,
        env = "CASEOPS_DATABASE_URL",
        default_value = "sqlite://warehouse.db"
    )]
    database: String,
    #[arg(long, env = "CASEOPS_LISTEN", default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    #[arg(long, env = "CASEOPS_MCP_LISTEN", default_value = "127.0.0.1:8091")]
    mcp_listen: SocketAddr,
    /// How long a run's lease lasts without renewal.
    #[arg(long, env = "CASEOPS_LEASE_SECONDS", default_value_t = 5)]
    lease_seconds: u64,
}

/// The deterministic driver: look the product up, reserve if stock allows, answer.
/// Goals read `reserve <units> <sku>`.
struct Driver;

fn parse_goal(goal: &str) -> Option<(i64, String)> {
    match goal.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["reserve", units, sku] => Some((units.parse().ok()?, sku.to_string())),
        _ => None,
    }
}

impl Planner for Driver {
    fn kind(&self) -> &'static str {
        "warehouse-driver"
    }

    fn is_external(&self) -> bool {
        false
    }

    async fn propose(&self, view: &PlannerView) -> Result<Value, PlannerError> {
        let Some((units, sku)) = parse_goal(&view.goal.text) else {
            return Ok(
                json!({"decision": "needs_human", "reason": "goal is not `reserve <units> <sku>`"}),
            );
        };
        let shelf = &view.goal.resource_id;
        let seen = |tool: &str| view.observations.iter().find(|o| o.tool == tool);
        let answer = |outcome: &str, reserved: i64, summary: String, refs: Vec<&Value>| {
            json!({"decision": "final", "answer": {"outcome": outcome, "summary": summary,
                "reserved_units": reserved, "evidence_refs": refs}})
        };
        Ok(
            match (seen("inventory_lookup"), seen("inventory_reserve")) {
                (None, _) => json!({"decision": "tool_call", "tool": "inventory_lookup",
                "arguments": {"shelf_id": shelf, "sku": sku}}),
                (Some(l), None) => {
                    let free = l.result["on_hand"].as_i64().unwrap_or(0)
                        - l.result["reserved"].as_i64().unwrap_or(0);
                    if free < units {
                        answer(
                            "BLOCKED",
                            0,
                            format!("only {free} {sku} left on {shelf}"),
                            vec![&l.result["evidence_ref"]],
                        )
                    } else {
                        json!({"decision": "tool_call", "tool": "inventory_reserve",
                        "arguments": {"shelf_id": shelf, "sku": sku, "units": units}})
                    }
                }
                (Some(l), Some(r)) => answer(
                    "RESTOCKED",
                    units,
                    format!("reserved {units} {sku} on {shelf}"),
                    vec![&l.result["evidence_ref"], &r.result["evidence_ref"]],
                ),
            },
        )
    }
}

#[tokio::main]
async fn main() -> Result<(), String> {
    caseops_host::install_tls_provider();
    let cli = Cli::parse();
    let keys = HashMap::from([(
        "dev-key-warehouse".to_string(),
        ApiPrincipal {
            tenant_id: "tenant-a".into(),
            actor: "user:stock-keeper".into(),
            scopes: vec!["inventory:read".into(), "inventory:reserve".into()],
        },
    )]);
    let config = HostConfig {
        database_url: cli.database.clone(),
        schema: &SCHEMA,
        api_listen: cli.listen,
        mcp_listen: cli.mcp_listen,
        signing_key: DEV_SIGNING_KEY.into(),
        keys,
        mcp_url: None,
        only: None,
        lease_ms: cli.lease_seconds as i64 * 1000,
        workers: 16,
    };
    let app = App {
        planner: Driver,
        tools: |db: &caseops_host::store::Db| Dispatcher(Warehouse { db: db.clone() }),
        resources: |db: &caseops_host::store::Db| Warehouse { db: db.clone() },
    };
    let running = host::start::<Bundle, _, _, _>(config, app)
        .await
        .map_err(|e| e.to_string())?;
    Warehouse {
        db: running.db.clone(),
    }
    .seed()
    .await
    .map_err(|e| e.to_string())?;
    if let (Some(api), Some(mcp)) = (running.api_addr, running.mcp_addr) {
        println!("warehouse api on http://{api}, mcp on http://{mcp}/mcp");
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    running.shutdown(std::time::Duration::from_secs(10)).await;
    Ok(())
}
