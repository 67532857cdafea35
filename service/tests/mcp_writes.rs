//! A write tool served over MCP: the handler gets the same system-injected values
//! (the idempotency key among them) as it would in process, and the run that calls
//! it sees it because a policy permits it, not because Rust code allows its risk.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use caseops_fixture_generated::Bundle as Shelf;
use caseops_host::mcp::client::McpClient;
use caseops_host::mcp::server::{McpConfig, McpServer};
use caseops_host::mcp::token::TokenIssuer;
use caseops_runtime::context::PlannerView;
use caseops_runtime::handler::idempotency_key;
use caseops_runtime::store::MemoryStore;
use caseops_runtime::{
    CallContext, ContractBundle, Engine, Planner, PlannerError, RunSpec, ToolContract,
    ToolDispatch, ToolError,
};
use serde_json::{Value, json};

const SECRET: &[u8] = b"test-signing-key-0123456789abcdef";
const ISSUER: &str = "http://127.0.0.1/warehouse";

/// Handlers that answer by the contract and remember what each call was given.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(String, CallContext)>>>);

impl ToolDispatch for Recorder {
    async fn call(
        &self,
        tool: &'static ToolContract,
        ctx: &CallContext,
        arguments: Value,
    ) -> Result<Value, ToolError> {
        self.0
            .lock()
            .unwrap()
            .push((tool.name.to_string(), ctx.clone()));
        Ok(match tool.name {
            "inventory_lookup" => json!({"sku": arguments["sku"], "status": "LOW",
                "unit_price": 1.5, "locations": [], "evidence_ref": "inv://S-1/ABC"}),
            _ => json!({"reservation_id": "R-1", "units": arguments["units"], "type": "SOFT"}),
        })
    }
}

struct Script(Mutex<VecDeque<Value>>);

impl Planner for Script {
    fn kind(&self) -> &'static str {
        "script"
    }
    async fn propose(&self, _: &PlannerView) -> Result<Value, PlannerError> {
        self.0
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| PlannerError("done".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_tool_over_mcp_receives_the_idempotency_key_the_runtime_derives() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = McpConfig::loopback(addr, ISSUER);
    let recorder = Recorder::default();
    let server = McpServer::<Shelf, _>::new(config.clone(), SECRET, recorder.clone()).unwrap();
    tokio::spawn(async move { axum::serve(listener, server.router()).await.unwrap() });
    let issuer = TokenIssuer::new(
        SECRET,
        ISSUER,
        config.resource_url.clone(),
        Shelf::RESOURCE_ID_FIELD,
        300,
    )
    .unwrap();
    let client = McpClient::<Shelf>::new(config.resource_url.clone(), issuer);

    let spec = RunSpec {
        run_id: "w-1".into(),
        tenant_id: "t1".into(),
        task_id: "task-w-1".into(),
        subject: "user:alice".into(),
        resource_id: "S-1".into(),
        scopes: vec!["inventory:read".into(), "inventory:reserve".into()],
        catalog: Shelf::CATALOG.iter().map(|s| s.to_string()).collect(),
        stage: "restocking".into(),
        goal: "restock S-1".into(),
        correlation_id: "req".into(),
    };
    let arguments = json!({"shelf_id": "S-1", "sku": "ABC", "units": 5});
    let planner = Script(Mutex::new(VecDeque::from([
        json!({"decision": "tool_call", "tool": "inventory_lookup", "arguments": {"shelf_id": "S-1", "sku": "ABC"}}),
        json!({"decision": "tool_call", "tool": "inventory_reserve", "arguments": arguments}),
        json!({"decision": "final", "answer": {"outcome": "RESTOCKED", "reserved_units": 5}}),
    ])));
    let out = Engine::<Shelf>::new()
        .unwrap()
        .start(spec, &planner, &client, &MemoryStore::new())
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");

    let calls = recorder.0.lock().unwrap();
    let (name, ctx) = &calls[1];
    assert_eq!(name, "inventory_reserve");
    let reserve = Shelf::tool("inventory_reserve").unwrap();
    let expected = idempotency_key("t1", reserve, &arguments).unwrap();
    assert_eq!(ctx.injected.get("idempotency_key"), Some(&json!(expected)));
    assert_eq!(ctx.tenant_id, "t1");
    assert_eq!(ctx.resource_id, "S-1");
    // The read has no key: nothing is injected that its contract does not name.
    assert!(!calls[0].1.injected.contains_key("idempotency_key"));
}
