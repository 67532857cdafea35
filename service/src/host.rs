//! Wiring: the database, the MCP tool server and the API on loopback sockets.

use std::net::SocketAddr;
use std::sync::Arc;

use caseops_generated::{Bundle, Dispatcher};
use caseops_runtime::Engine;

use crate::api::{self, ApiPrincipal, AppState, Metrics};
use crate::mcp::client::McpClient;
use crate::mcp::server::{McpConfig, McpServer};
use crate::mcp::token::TokenIssuer;
use crate::store::Db;
use crate::store::reference::SqlRepository;
use crate::store::runs::SqlRunStore;
use crate::tools::CaseOpsTools;

/// The signing key used when none is configured; production mode refuses it.
pub const DEV_SIGNING_KEY: &str = "caseops-development-signing-key-do-not-use";
pub const TOKEN_ISSUER: &str = "caseops";
pub const TOKEN_TTL_SECONDS: u64 = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    Api,
    Mcp,
}

#[derive(Debug, Clone)]
pub struct HostConfig {
    pub database_url: String,
    pub api_listen: SocketAddr,
    pub mcp_listen: SocketAddr,
    pub signing_key: String,
    pub keys: std::collections::HashMap<String, ApiPrincipal>,
    /// With `only = Api`, where the separate MCP server is.
    pub mcp_url: Option<String>,
    pub only: Option<Only>,
    /// How long a run's lease lasts without a commit (see `SqlRunStore::claim`).
    pub lease_ms: i64,
    pub planner: crate::planner::AnyPlanner,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Db(#[from] crate::store::DbError),
    #[error("cannot listen on `{addr}`: {message}")]
    Listen { addr: SocketAddr, message: String },
    #[error("{0}")]
    Setup(String),
}

/// A started host; dropping it does not stop the servers (they run on the runtime).
pub struct RunningHost {
    pub db: Db,
    pub api_addr: Option<SocketAddr>,
    pub mcp_addr: Option<SocketAddr>,
    pub mcp_url: String,
}

/// Small JSON answers go out at once rather than wait on Nagle's algorithm for an
/// acknowledgement (a stall of up to the peer's delayed-ACK timer).
fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            eprintln!("caseops: cannot set TCP_NODELAY on a connection: {e}");
        }
    })
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, HostError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| HostError::Listen {
            addr,
            message: e.to_string(),
        })
}

pub async fn start(config: HostConfig) -> Result<RunningHost, HostError> {
    let db = Db::connect(&config.database_url, 8).await?;
    let key = config.signing_key.as_bytes().to_vec();
    let repo = SqlRepository { db: db.clone() };

    let mut mcp_addr = None;
    let mcp_url = if config.only != Some(Only::Api) {
        let listener = bind(config.mcp_listen).await?;
        let addr = listener
            .local_addr()
            .map_err(|e| HostError::Setup(e.to_string()))?;
        let mcp_config = McpConfig::loopback(addr, TOKEN_ISSUER);
        let url = mcp_config.resource_url.clone();
        let server = McpServer::<Bundle, _>::new(
            mcp_config,
            &key,
            Dispatcher(CaseOpsTools { repo: repo.clone() }),
        )
        .map_err(|e| HostError::Setup(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(e) = axum::serve(nodelay(listener), server.router()).await {
                eprintln!("caseops: mcp server stopped: {e}");
            }
        });
        mcp_addr = Some(addr);
        url
    } else {
        config
            .mcp_url
            .clone()
            .ok_or_else(|| HostError::Setup("`--only api` needs `--mcp-url`".into()))?
    };

    let mut api_addr = None;
    if config.only != Some(Only::Mcp) {
        let issuer = TokenIssuer::new(
            &key,
            TOKEN_ISSUER,
            mcp_url.clone(),
            "case_id",
            TOKEN_TTL_SECONDS,
        )
        .map_err(|e| HostError::Setup(e.to_string()))?;
        let state = AppState {
            runs: SqlRunStore::new(db.clone()).with_lease_ms(config.lease_ms),
            repo,
            engine: Engine::<Bundle>::new().map_err(|e| HostError::Setup(e.to_string()))?,
            executor: McpClient::new(mcp_url.clone(), issuer),
            keys: config.keys.clone(),
            metrics: Metrics::default(),
            planner: config.planner.clone(),
            run_locks: Default::default(),
        };
        let listener = bind(config.api_listen).await?;
        api_addr = Some(
            listener
                .local_addr()
                .map_err(|e| HostError::Setup(e.to_string()))?,
        );
        let state = Arc::new(state);
        let sweep_every = std::time::Duration::from_millis((config.lease_ms / 2).max(100) as u64);
        tokio::spawn(api::sweep(state.clone(), sweep_every));
        let router = api::router(state);
        tokio::spawn(async move {
            if let Err(e) = axum::serve(nodelay(listener), router).await {
                eprintln!("caseops: api server stopped: {e}");
            }
        });
    }
    Ok(RunningHost {
        db,
        api_addr,
        mcp_addr,
        mcp_url,
    })
}
