//! Wiring: the database, the MCP tool server and the API on loopback sockets.

use std::net::SocketAddr;
use std::sync::Arc;

use caseops_runtime::{ContractBundle, Engine, Planner, ToolDispatch};

use crate::api::{self, ApiPrincipal, AppState, Resources, RunContract};
use crate::http::{Limits, Server};
use crate::mcp::client::McpClient;
use crate::mcp::server::{McpConfig, McpServer};
use crate::mcp::token::TokenIssuer;
use crate::metrics::Metrics;
use crate::store::row_format::RowFormat;
use crate::store::runs::{ResourceCondition, RunSignals, SqlRunStore};
use crate::store::{AppSchema, Db};
use crate::worker::{Driver, WorkerConfig, Workers};

/// The signing key used when none is configured; production mode refuses it.
pub const DEV_SIGNING_KEY: &str = "caseops-development-signing-key-do-not-use";
pub const TOKEN_TTL_SECONDS: u64 = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    Api,
    Mcp,
}

/// How the runs' executor reaches the tool server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum McpTransport {
    /// In process when this process serves the tool server too, else over HTTP.
    #[default]
    Auto,
    /// Over HTTP to the server's public URL, as a separate API process does.
    Http,
    /// Handed to the tool server's router in this process, without a socket: the
    /// same requests and checks, less system and HTTP work per call.
    InProcess,
}

/// Database connections a server keeps by default (`serve --db-connections`).
pub const DEFAULT_DB_CONNECTIONS: u32 = 8;

#[derive(Debug, Clone)]
pub struct HostConfig {
    pub database_url: String,
    /// The application's tables, migrated with the host's.
    pub schema: &'static AppSchema,
    pub api_listen: SocketAddr,
    pub mcp_listen: SocketAddr,
    pub signing_key: String,
    pub keys: std::collections::HashMap<String, ApiPrincipal>,
    /// With `only = Api`, where the separate MCP server is.
    pub mcp_url: Option<String>,
    /// Which MCP era the executor speaks to the tool server.
    pub mcp_era: crate::mcp::era::Preference,
    /// How the executor reaches a tool server in this process.
    pub mcp_transport: McpTransport,
    /// The URL clients reach this process's MCP server at: the token audience, and
    /// what its challenges and metadata advertise (default `http://<mcp bind>/mcp`).
    pub mcp_public_url: Option<String>,
    /// `Host` and `Origin` values the MCP server accepts besides its public URL's
    /// (and the loopback names, for a loopback bind).
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    /// The task tokens' issuer, an https or http URL naming the API that issues
    /// them (RFC 9728 `authorization_servers`); both halves of a split deployment
    /// need the same (default `http://<api address>`).
    pub token_issuer: Option<String>,
    pub only: Option<Only>,
    /// How long a run's lease lasts without a renewal (see `SqlRunStore::claim`).
    pub lease_ms: i64,
    /// Runs driven at once by this process.
    pub workers: usize,
    /// Database connections this process keeps open at most (on SQLite, its
    /// reader connections beside the one writer).
    pub db_connections: u32,
    /// Timeouts and the connection limit of both listeners.
    pub limits: Limits,
    /// How long a person has to decide on a call that needs approval.
    pub approval_ttl: std::time::Duration,
    /// Publish the outbox to NATS JetStream from this process (`serve --relay`).
    pub relay: Option<crate::relay::RelayConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Db(#[from] crate::store::DbError),
    #[error("cannot listen on `{addr}` ({flag}): {message}")]
    Listen {
        addr: SocketAddr,
        /// The option that chose the address, so the user knows what to change.
        flag: &'static str,
        message: String,
    },
    #[error("{0}")]
    Setup(String),
}

/// A started host; dropping it does not stop the servers (they run on the runtime):
/// [`RunningHost::shutdown`] does, gracefully.
pub struct RunningHost {
    pub db: Db,
    pub api_addr: Option<SocketAddr>,
    pub mcp_addr: Option<SocketAddr>,
    pub mcp_url: String,
    /// Whether this process's runs hand their tool calls to its own tool server
    /// without a socket (see [`McpTransport`]).
    pub tools_in_process: bool,
    /// The `iss` of the task tokens this host issues or accepts.
    pub token_issuer: String,
    workers: Option<Arc<Workers>>,
    api: Option<Server>,
    mcp: Option<Server>,
    relay: Option<RelayTask>,
}

/// The in-process relay and how to stop it.
struct RelayTask {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningHost {
    /// Graceful shutdown, in the order that loses nothing: the API stops accepting
    /// and its waiting requests answer 202 (the run goes on elsewhere); run drivers
    /// finish the step they are in (at most `grace`) and hand their runs over;
    /// every lease still held is released, so another replica resumes those runs
    /// at once; the MCP server stops last, because drivers here call it until then.
    pub async fn shutdown(self, grace: std::time::Duration) {
        if let Some(api) = &self.api {
            api.stop_accepting();
        }
        if let Some(workers) = &self.workers {
            workers.shutdown(grace).await;
        }
        let settle = std::time::Duration::from_secs(2);
        if let Some(api) = self.api {
            api.stop(settle).await;
        }
        if let Some(mcp) = self.mcp {
            mcp.stop(settle).await;
        }
        // Last: it publishes what the runs committed until now (what it leaves, the
        // next relay publishes).
        if let Some(relay) = self.relay {
            let _ = relay.stop.send(true);
            let _ = tokio::time::timeout(settle, relay.task).await;
        }
    }
}

async fn bind(addr: SocketAddr, flag: &'static str) -> Result<tokio::net::TcpListener, HostError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| HostError::Listen {
            addr,
            flag,
            message: e.to_string(),
        })
}

/// A resource condition that the database cannot run, or that takes other
/// parameters than the tenant and the resource id, would fail every run's
/// creation: it fails the start instead.
async fn check_condition(db: &Db, condition: ResourceCondition) -> Result<(), HostError> {
    let invalid = |why: String| {
        HostError::Setup(format!(
            "the application's resource condition `{}` {why}",
            condition.0
        ))
    };
    let placeholders = condition.0.matches('?').count();
    if placeholders != 2 {
        return Err(invalid(format!(
            "must have two `?` placeholders (the tenant, then the resource id), not {placeholders}"
        )));
    }
    db.fetch_optional(
        &format!("SELECT 1 AS held WHERE {}", condition.0),
        &crate::params!["", ""],
    )
    .await
    .map(drop)
    .map_err(|e| invalid(format!("does not run: {e}")))
}

/// What an application brings to a host besides configuration: its tool handlers
/// (built on the opened database), the planner, the check that a resource exists
/// (also built on the database), and the business rules a final answer must meet
/// besides citing only observed evidence (`None`: grounding alone).
pub struct App<P, T, R> {
    pub planner: P,
    pub tools: T,
    pub resources: R,
    pub conclusion: Option<Arc<dyn caseops_runtime::ConclusionCheck>>,
}

/// Starts the servers `config.only` selects for bundle `B`.
pub async fn start<B, P, H, R>(
    config: HostConfig,
    app: App<P, impl FnOnce(&Db) -> H, impl FnOnce(&Db) -> R>,
) -> Result<RunningHost, HostError>
where
    B: ContractBundle,
    P: Planner + 'static,
    H: ToolDispatch + 'static,
    R: Resources,
{
    start_prepared::<B, P, H, R>(config, app, async |_: &Db| Ok(())).await
}

/// [`start`], with `prepare` run on the database once it is open and migrated,
/// before any server answers a request or any run is claimed: data a host loads
/// as it starts (a development server's demo data) is there for the first
/// request, which a client may send as soon as `/health/ready` answers.
pub async fn start_prepared<B, P, H, R>(
    config: HostConfig,
    app: App<P, impl FnOnce(&Db) -> H, impl FnOnce(&Db) -> R>,
    prepare: impl AsyncFnOnce(&Db) -> Result<(), crate::store::DbError>,
) -> Result<RunningHost, HostError>
where
    B: ContractBundle,
    P: Planner + 'static,
    H: ToolDispatch + 'static,
    R: Resources,
{
    // Before anything is bound or created: there would be no server to hand to.
    if config.mcp_transport == McpTransport::InProcess && config.only == Some(Only::Api) {
        return Err(HostError::Setup(
            "`--mcp-transport in-process` needs the mcp server in this process: drop `--only api`, or use `--mcp-transport http`".into(),
        ));
    }
    // Every connection is a descriptor: take what the system allows.
    crate::http::raise_fd_limit();
    // Both addresses first: a port in use fails before any database is created.
    let mcp_listener = match config.only {
        Some(Only::Api) => None,
        _ => Some(bind(config.mcp_listen, "--mcp-listen").await?),
    };
    let api_listener = match config.only {
        Some(Only::Mcp) => None,
        _ => Some(bind(config.api_listen, "--listen").await?),
    };
    let db = Db::connect(
        &config.database_url,
        config.db_connections.max(1),
        config.schema,
    )
    .await?;
    prepare(&db).await?;
    let key = config.signing_key.as_bytes().to_vec();
    // Commits wake an idle in-process relay, so an event leaves within
    // milliseconds of its commit instead of at the next poll.
    let signals = RunSignals::default();
    let relay_health = config
        .relay
        .as_ref()
        .map(|_| Arc::new(crate::relay::RelayHealth::default()));
    let relay = config
        .relay
        .clone()
        .zip(relay_health.clone())
        .map(|(relay_config, health)| {
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let db = db.clone();
            let wake = Some(signals.commits());
            let task = tokio::spawn(async move {
                if let Err(e) = crate::relay::run(db, relay_config, health, stopped, wake).await {
                    tracing::error!(error = %e, "the outbox relay stopped");
                }
            });
            RelayTask { stop, task }
        });

    let api_addr = match &api_listener {
        Some(l) => l
            .local_addr()
            .map_err(|e| HostError::Setup(e.to_string()))?,
        None => config.api_listen,
    };
    let issuer_url = config
        .token_issuer
        .clone()
        .unwrap_or_else(|| match api_addr.ip().is_unspecified() {
            // An identifier, not a route: an all-interfaces bind names the host.
            true => format!("http://localhost:{}", api_addr.port()),
            false => format!("http://{api_addr}"),
        })
        .trim_end_matches('/')
        .to_string();
    if !reqwest::Url::parse(&issuer_url).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
        return Err(HostError::Setup(format!(
            "`--token-issuer {issuer_url}` is not an http(s) URL"
        )));
    }

    let mut mcp_addr = None;
    let mut mcp = None;
    let mut mcp_router = None;
    let mcp_url = if let Some(listener) = mcp_listener {
        let addr = listener
            .local_addr()
            .map_err(|e| HostError::Setup(e.to_string()))?;
        let mcp_config = McpConfig::public(
            addr,
            config.mcp_public_url.as_deref(),
            &issuer_url,
            &config.allowed_hosts,
            &config.allowed_origins,
        )
        .map_err(|e| HostError::Setup(e.to_string()))?;
        let mcp_config = McpConfig {
            body_read: config.limits.body_read,
            ..mcp_config
        };
        let url = mcp_config.resource_url.clone();
        let server = McpServer::<B, _>::new(mcp_config, &key, (app.tools)(&db))
            .map_err(|e| HostError::Setup(e.to_string()))?;
        let router = server.router();
        if config.mcp_transport != McpTransport::Http {
            mcp_router = Some(router.clone());
        }
        mcp = Some(Server::spawn("mcp", listener, router, config.limits));
        mcp_addr = Some(addr);
        url
    } else {
        config
            .mcp_url
            .clone()
            .ok_or_else(|| HostError::Setup("`--only api` needs `--mcp-url`".into()))?
    };

    let mut api = None;
    let mut workers = None;
    let mut tools_in_process = false;
    if let Some(listener) = api_listener {
        let issuer = TokenIssuer::new(
            &key,
            &issuer_url,
            mcp_url.clone(),
            B::RESOURCE_ID_FIELD,
            TOKEN_TTL_SECONDS,
        )
        .map_err(|e| HostError::Setup(e.to_string()))?;
        let row_format = RowFormat::of(&db)
            .await
            .map_err(|e| HostError::Setup(e.to_string()))?;
        let runs = SqlRunStore::new(db.clone())
            .with_row_format(row_format)
            .for_bundle::<B>()
            .with_lease_ms(config.lease_ms)
            .with_signals(signals.clone());
        let mut engine = Engine::<B>::new()
            .map_err(|e| HostError::Setup(e.to_string()))?
            .with_approval_ttl(config.approval_ttl);
        if let Some(check) = app.conclusion {
            engine = engine.with_conclusion_check(check);
        }
        let metrics = Arc::new(Metrics::default());
        let budget =
            std::time::Duration::from_secs(u64::from(engine.budgets().max_wall_clock_seconds));
        let planner_kind = app.planner.kind();
        let planner_model = app.planner.model();
        // Set only when the transport allows it and the server is in this process.
        let executor = match mcp_router {
            Some(router) => {
                tools_in_process = true;
                McpClient::<B>::in_process(mcp_url.clone(), issuer, router)
                    .map_err(|e| HostError::Setup(e.to_string()))?
            }
            None => McpClient::<B>::new(mcp_url.clone(), issuer),
        };
        let driver = Driver {
            engine,
            planner: app.planner,
            executor: executor.with_preference(config.mcp_era),
        };
        let pool = Workers::start(
            driver,
            runs.clone(),
            metrics.clone(),
            signals,
            WorkerConfig::for_lease(config.workers, config.lease_ms),
        );
        // Known before the first request: an unreachable tool server refuses runs
        // from the start instead of failing them at their first call.
        if let Err(e) = pool.check_mcp().await {
            tracing::warn!("caseops: the mcp server at `{mcp_url}` is not ready: {e}");
        }
        let resources = (app.resources)(&db);
        if let Some(condition) = resources.condition() {
            check_condition(&db, condition).await?;
        }
        let state = AppState {
            contract: RunContract::of::<B>(),
            runs,
            resources: Arc::new(resources),
            workers: pool.clone(),
            keys: config.keys.clone(),
            metrics,
            planner_kind,
            planner_model,
            // A run ends within its wall-clock budget once driven; a little more
            // covers a takeover. Past it the request answers 202.
            default_wait: budget + std::time::Duration::from_secs(10),
            body_read: config.limits.body_read,
            relay: relay_health.clone(),
        };
        api = Some(Server::spawn(
            "api",
            listener,
            api::router(Arc::new(state)),
            config.limits,
        ));
        workers = Some(pool);
    }
    Ok(RunningHost {
        db,
        api_addr: api.as_ref().map(|_| api_addr),
        token_issuer: issuer_url,
        mcp_addr,
        mcp_url,
        tools_in_process,
        workers,
        api,
        mcp,
        relay,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::AppSchema;

    async fn scratch() -> (Db, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("caseops-cond-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("c.db").display());
        (Db::connect(&url, 1, &AppSchema::NONE).await.unwrap(), dir)
    }

    #[tokio::test]
    async fn a_resource_condition_that_runs_with_the_tenant_and_the_resource_is_accepted() {
        let (db, dir) = scratch().await;
        let condition =
            ResourceCondition("EXISTS (SELECT 1 FROM runs WHERE tenant_id = ? AND run_id = ?)");
        check_condition(&db, condition).await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_resource_condition_with_other_placeholders_or_unknown_tables_fails_the_start() {
        let (db, dir) = scratch().await;
        let one = ResourceCondition("EXISTS (SELECT 1 FROM runs WHERE run_id = ?)");
        let err = check_condition(&db, one).await.unwrap_err().to_string();
        assert!(err.contains("must have two `?` placeholders"), "{err}");
        assert!(err.contains("not 1"), "{err}");
        let unknown = ResourceCondition("EXISTS (SELECT 1 FROM shelves WHERE t = ? AND s = ?)");
        let err = check_condition(&db, unknown).await.unwrap_err().to_string();
        assert!(
            err.starts_with("the application's resource condition `EXISTS (SELECT 1 FROM shelves"),
            "{err}"
        );
        assert!(err.contains("does not run"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
