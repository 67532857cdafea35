//! `caseops-host`: everything a governed-agent service needs besides its tools,
//! generic over a compiled contract bundle ([`caseops_runtime::ContractBundle`]).
//!
//! - [`host`]: wiring — the database, the MCP tool server and the API on their
//!   sockets, graceful shutdown;
//! - [`api`], [`events`], [`approvals_api`]: the HTTP API that starts runs (on the
//!   route the run contract declares) and reads them, their server-sent events, and
//!   the approvals people decide;
//! - [`console`]: the operator console at `/ui` (runs, a run's timeline, the
//!   approval queue, the audit chain) behind cookie sessions;
//! - [`mcp`]: the MCP server (tools behind audience-bound task tokens) and client;
//! - [`store`]: SQLite and PostgreSQL runs with leases, idempotency, the audit
//!   chain and the outbox, and the application's own migrations;
//! - [`worker`]: the run workers that own, resume and hand over runs;
//! - [`openai`]: the OpenAI Responses planner;
//! - [`metrics`]: Prometheus text metrics;
//! - [`traces`]: OTLP trace export and W3C trace context across the MCP hop;
//! - [`logging`]: the log subscriber and the per-request log line.
//!
//! Nothing here names an application's tools, resources or reference data: a host
//! binary brings its generated bundle, its tool handlers, a planner and the check
//! that a resource exists (see `docs/` in the repository for a walk-through).

pub mod api;
pub mod approvals_api;
pub mod cli;
pub mod console;
mod detachable;
pub mod event_types;
pub mod events;
pub mod fault;
pub mod host;
pub mod http;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod openai;
pub mod relay;
pub mod relay_probes;
pub mod store;
pub mod traces;
pub mod worker;

/// Installs the process's TLS crypto provider (ring) once; reqwest is built without
/// one so that no second crypto library (aws-lc) is compiled. Every HTTP client in
/// this crate calls this before it is built.
pub fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means another provider is already installed, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
