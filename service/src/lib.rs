//! `caseops-service`: the CaseOps claims-investigation host. What is CaseOps lives
//! here — the claims reference data and its tables, the four read-only tool
//! handlers, the C-102 conformance driver, the development keys and the `caseops`
//! binary; everything generic comes from `caseops-host`.

pub mod allocator;
pub mod bench;
pub mod domain;
pub mod event_latency;
pub mod findings;
pub mod keys;
pub mod planner;
pub mod reference;
pub mod tools;

/// The instructions the OpenAI planner is given for claim investigations.
pub const OPENAI_INSTRUCTIONS: &str = "You investigate one insurance claim case. Call one tool at a time to gather evidence. \
When the evidence is sufficient, answer with the final JSON object only. Never invent document codes or evidence references.";

use caseops_generated::{Bundle, Dispatcher};
use caseops_host::host::{App, HostConfig, HostError, RunningHost};

/// Starts a CaseOps host: the generated bundle, the claims tools and case lookups
/// on the host's database, and `planner`. `config.schema` should be
/// [`reference::SCHEMA`].
pub async fn start(
    config: HostConfig,
    planner: planner::AnyPlanner,
) -> Result<RunningHost, HostError> {
    start_seeded(config, planner, None).await
}

/// [`start`], with `data` loaded into the host's database before anything
/// answers (a development server's demo tenants and cases): a request sent as
/// soon as `/health/ready` answers finds them.
pub async fn start_seeded(
    config: HostConfig,
    planner: planner::AnyPlanner,
    data: Option<&domain::ReferenceData>,
) -> Result<RunningHost, HostError> {
    caseops_host::host::start_prepared::<Bundle, _, _, _>(
        config,
        App {
            planner,
            tools: |db: &caseops_host::store::Db| {
                Dispatcher(tools::CaseOpsTools {
                    repo: reference::SqlRepository { db: db.clone() },
                })
            },
            resources: |db: &caseops_host::store::Db| reference::SqlRepository { db: db.clone() },
            conclusion: Some(std::sync::Arc::new(findings::DocumentRules)),
        },
        async |db: &caseops_host::store::Db| match data {
            Some(data) => reference::seed(db, data).await,
            None => Ok(()),
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// What `GET /health/live` on `port` answers within `wait` (empty: nothing).
    async fn live(port: u16, wait: Duration) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("the port is bound");
        stream
            .write_all(b"GET /health/live HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nothing_answers_until_the_data_loaded_at_start_is_in() {
        let dir = tempfile::tempdir().unwrap();
        let free = || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let api = free();
        let config = HostConfig {
            database_url: format!("sqlite://{}", dir.path().join("c.db").display()),
            schema: &reference::SCHEMA,
            api_listen: api,
            mcp_listen: free(),
            signing_key: caseops_host::host::DEV_SIGNING_KEY.to_string(),
            keys: keys::dev_keys(),
            mcp_url: None,
            mcp_era: Default::default(),
            mcp_transport: Default::default(),
            mcp_public_url: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            token_issuer: None,
            only: None,
            lease_ms: caseops_host::store::runs::DEFAULT_LEASE_MS,
            approval_ttl: Duration::from_secs(60),
            workers: 2,
            db_connections: caseops_host::host::DEFAULT_DB_CONNECTIONS,
            limits: Default::default(),
            relay: None,
        };
        let data = domain::reference_data();
        let app = App {
            planner: planner::AnyPlanner::Conformance(planner::ConformancePlanner),
            tools: |db: &caseops_host::store::Db| {
                Dispatcher(tools::CaseOpsTools {
                    repo: reference::SqlRepository { db: db.clone() },
                })
            },
            resources: |db: &caseops_host::store::Db| reference::SqlRepository { db: db.clone() },
            conclusion: None,
        };
        let running = caseops_host::host::start_prepared::<Bundle, _, _, _>(
            config,
            app,
            async |db: &caseops_host::store::Db| {
                // The address is bound, but nobody may answer on it yet.
                let early = live(api.port(), Duration::from_millis(300)).await;
                assert_eq!(early, "", "answered before the data was loaded");
                reference::seed(db, &data).await
            },
        )
        .await
        .unwrap();
        let answer = live(api.port(), Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        running.shutdown(Duration::from_secs(5)).await;
    }
}
