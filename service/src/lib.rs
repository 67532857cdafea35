//! `caseops-service`: the CaseOps claims-investigation host. It serves the four
//! read-only tools over MCP and (with the API) drives agent runs with the runtime.

pub mod api;
pub mod bench;
pub mod domain;
pub mod events;
pub mod fault;
pub mod host;
pub mod mcp;
pub mod metrics;
pub mod openai;
pub mod planner;
pub mod store;
pub mod tools;
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
