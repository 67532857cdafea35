//! `caseops-service`: the CaseOps claims-investigation host. It serves the four
//! read-only tools over MCP and (with the API) drives agent runs with the runtime.

pub mod api;
pub mod domain;
pub mod fault;
pub mod host;
pub mod mcp;
pub mod openai;
pub mod planner;
pub mod store;
pub mod tools;
