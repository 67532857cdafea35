//! Command-line building blocks every host binary shares: the `serve` options (with
//! production's refusals), `migrate`, `runs list|show` and `audit verify`. A binary
//! flattens these into its own `clap` command and adds what is its own (a demo,
//! seeding its reference data, a benchmark).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::api::ApiPrincipal;
use crate::host::{DEV_SIGNING_KEY, HostConfig, McpTransport, Only, RunningHost};
use crate::store::row_format::RowFormat;
use crate::store::runs::SqlRunStore;
use crate::store::{AppSchema, Db, audit, redact};

/// `println!` that ends the process quietly when standard output is closed
/// (`caseops demo | head`) instead of panicking.
#[macro_export]
macro_rules! out {
    () => { $crate::out!("") };
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

/// What a binary tells the shared verbs about itself.
#[derive(Debug, Clone, Copy)]
pub struct HostCli {
    /// The binary's name, as its messages start.
    pub name: &'static str,
    /// The database when `--database` and `CASEOPS_DATABASE_URL` are unset.
    pub default_database: &'static str,
    /// The tenant `runs` reads when `--tenant` is not given (a development tenant).
    pub default_tenant: Option<&'static str>,
    pub schema: &'static AppSchema,
    /// The run contract's resource id field (`ContractBundle::RESOURCE_ID_FIELD`).
    pub resource_key: &'static str,
    /// The scopes an API key from `CASEOPS_API_KEYS` carries: every tool's.
    pub scopes: fn() -> Vec<String>,
}

/// The verbs every host binary has; a binary with no verbs of its own uses this as
/// its whole command and [`HostCli::run`] as its `main`.
#[derive(Subcommand, Clone, Debug)]
pub enum HostCommand {
    /// Serve the API and the MCP tool server.
    Serve(Box<ServeArgs>),
    /// Create or upgrade the database schema.
    Migrate(MigrateArgs),
    /// Inspect runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Audit trail tools.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Publish the outbox's events to NATS JetStream until stopped (SIGTERM or
    /// SIGINT). Several relays may share one PostgreSQL database; on SQLite run one.
    Relay(RelayArgs),
}

impl HostCli {
    /// Carries out `command`: `serve` through the binary's own `serve` (it brings
    /// its tools and planner), the rest here. An error is one `error:` line, exit 1.
    pub async fn run<F, Fut>(&self, command: HostCommand, serve: F) -> std::process::ExitCode
    where
        F: FnOnce(ServeArgs) -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let result = match command {
            HostCommand::Serve(args) => serve(*args).await,
            HostCommand::Migrate(args) => migrate_with(self, &args).await,
            HostCommand::Runs(command) => runs(self, command).await,
            HostCommand::Audit(command) => audit(self, command).await,
            HostCommand::Relay(args) => relay(self, args).await,
        };
        match result {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("error: {message}");
                std::process::ExitCode::from(1)
            }
        }
    }
}

#[derive(Args, Clone, Debug)]
pub struct DbArgs {
    /// Database URL: `sqlite:///path/file.db` or `postgres://user@host/db`.
    #[arg(long = "database", env = "CASEOPS_DATABASE_URL")]
    pub database: Option<String>,
}

impl DbArgs {
    pub fn url(&self, cli: &HostCli) -> String {
        self.database
            .clone()
            .unwrap_or_else(|| cli.default_database.to_string())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum McpTransportArg {
    #[default]
    Auto,
    Http,
    InProcess,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnlyArg {
    Api,
    Mcp,
}

/// The options of `serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub db: DbArgs,
    #[command(flatten)]
    pub logs: crate::logging::LogArgs,
    /// API address: `host:port`, `localhost:port`, or a port alone (loopback).
    #[arg(long, env = "CASEOPS_LISTEN", default_value = "127.0.0.1:8080", value_parser = listen_address)]
    pub listen: SocketAddr,
    /// MCP tool server address, in the same forms as `--listen`.
    #[arg(long, env = "CASEOPS_MCP_LISTEN", default_value = "127.0.0.1:8081", value_parser = listen_address)]
    pub mcp_listen: SocketAddr,
    /// Serve only one half (for separate processes).
    #[arg(long, value_enum)]
    pub only: Option<OnlyArg>,
    /// The MCP server's URL when serving `--only api`.
    #[arg(long, env = "CASEOPS_MCP_URL")]
    pub mcp_url: Option<String>,
    /// The MCP era the runs' executor speaks to the tool server: `auto` tries
    /// 2026-07-28 (`server/discover`) and falls back to the 2025-11-25 handshake;
    /// `2026-07-28` or `2025-11-25` insist on one.
    #[arg(long, env = "CASEOPS_MCP_ERA", default_value = "auto")]
    pub mcp_era: crate::mcp::era::Preference,
    /// How the runs' executor reaches the MCP server: `in-process` hands each
    /// request to the server of this same process without a socket (not with
    /// `--only api`); `http` goes through its listener, as a separate API does;
    /// `auto` is `in-process` when this process serves both halves, else `http`.
    /// Either way the server makes every check of the tool plane (Host, task
    /// token, scopes, Cedar, schemas); `in-process` spares each tool call's HTTP
    /// and system-call work.
    #[arg(
        long,
        env = "CASEOPS_MCP_TRANSPORT",
        value_enum,
        default_value = "auto"
    )]
    pub mcp_transport: McpTransportArg,
    /// The URL clients reach this MCP server at, when it is not the bind address
    /// (another host, a port-forward, a proxy): the task tokens' audience and what
    /// its challenges and metadata advertise. Required with an all-interfaces bind.
    #[arg(long, env = "CASEOPS_MCP_PUBLIC_URL")]
    pub mcp_public_url: Option<String>,
    /// `Host` values the MCP server accepts besides its public URL's (and, for a
    /// loopback bind, the loopback names); comma-separated `host:port`.
    #[arg(long, env = "CASEOPS_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin` values the MCP server accepts besides its public URL's;
    /// comma-separated `scheme://host:port`.
    #[arg(long, env = "CASEOPS_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// The issuer of task tokens: the API's URL (default `http://<--listen>`).
    /// An API and an MCP server run apart need the same value.
    #[arg(long, env = "CASEOPS_TOKEN_ISSUER")]
    pub token_issuer: Option<String>,
    /// HS256 key for task tokens (at least 32 bytes in production).
    #[arg(long, env = "CASEOPS_SIGNING_KEY", hide_env_values = true)]
    pub signing_key: Option<String>,
    /// Refuse what is unsafe outside development, all reported at once: SQLite,
    /// development or low-entropy keys, plain HTTP on a non-loopback address
    /// (`1`, `yes`, `true`, `on` in any case enable it from the environment).
    #[arg(long, env = "CASEOPS_PRODUCTION", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub production: bool,
    /// TLS is terminated by a proxy in front of this process: production mode then
    /// accepts a non-loopback plain-HTTP bind.
    #[arg(long, env = "CASEOPS_BEHIND_TLS_PROXY", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub behind_tls_proxy: bool,
    /// Seconds a run's lease lasts without a renewal before another replica may
    /// take the run over (its driver renews it every third of this).
    #[arg(long, env = "CASEOPS_LEASE_SECONDS", default_value_t = 5)]
    pub lease_seconds: u64,
    /// Seconds a person has to approve or reject a call that needs approval (an
    /// irreversible write); past it the approval expires and its run stops with
    /// `APPROVAL_EXPIRED`.
    #[arg(long, env = "CASEOPS_APPROVAL_TTL_SECONDS", default_value_t = 86_400)]
    pub approval_ttl_seconds: u64,
    /// Runs this process drives at once; more wait for a free worker here or
    /// on another replica.
    #[arg(long, env = "CASEOPS_WORKERS", default_value_t = 64)]
    pub workers: usize,
    /// Database connections this process keeps open at most. On PostgreSQL each
    /// is a server backend: replicas times this must stay under the server's
    /// `max_connections`. On SQLite, the reader connections beside its one writer.
    #[arg(long, env = "CASEOPS_DB_CONNECTIONS", default_value_t = crate::host::DEFAULT_DB_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub db_connections: u32,
    /// Seconds a client has to send a request's headers (from its first byte, or
    /// from the end of its previous request on a kept-alive connection).
    #[arg(long, env = "CASEOPS_HEADER_TIMEOUT_SECONDS", default_value_t = 10)]
    pub header_timeout_seconds: u64,
    /// Seconds a client has to send a request's body.
    #[arg(long, env = "CASEOPS_BODY_TIMEOUT_SECONDS", default_value_t = 10)]
    pub body_timeout_seconds: u64,
    /// Seconds a connection may sit with no bytes either way before it is closed
    /// (a request still being answered is finished first).
    #[arg(long, env = "CASEOPS_IDLE_TIMEOUT_SECONDS", default_value_t = 60)]
    pub idle_timeout_seconds: u64,
    /// Open connections per listener at most; more are answered 503 and closed
    /// (default: half the file-descriptor limit, at most 4096).
    #[arg(long, env = "CASEOPS_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// On SIGTERM or SIGINT, seconds to let runs finish the step they are in
    /// before they are handed over to another replica mid-step.
    #[arg(long, env = "CASEOPS_SHUTDOWN_GRACE_SECONDS", default_value_t = 10)]
    pub shutdown_grace_seconds: u64,
    /// Also publish the outbox to this NATS server's JetStream from this process,
    /// e.g. `nats://127.0.0.1:4222` (see `relay` for a relay of its own).
    #[arg(long = "relay", env = "CASEOPS_RELAY", value_name = "NATS_URL")]
    pub relay: Option<String>,
    #[command(flatten)]
    pub relay_options: RelayOptions,
}

/// How a relay publishes (shared by `relay` and `serve --relay`).
#[derive(Args, Clone, Debug)]
pub struct RelayOptions {
    /// The JetStream stream events go to (created with subjects `<prefix>.>` when
    /// missing, file storage, a 2-minute duplicate window).
    #[arg(long, env = "CASEOPS_RELAY_STREAM", default_value = "CASEOPS")]
    pub relay_stream: String,
    /// Subjects are `<prefix>.<tenant>.<event type>`.
    #[arg(long, env = "CASEOPS_RELAY_SUBJECT_PREFIX", default_value = "caseops")]
    pub relay_subject_prefix: String,
    /// Events claimed per batch.
    #[arg(long, env = "CASEOPS_RELAY_BATCH", default_value_t = 1000)]
    pub relay_batch: usize,
    /// Publishes awaiting JetStream's acknowledgement at once.
    #[arg(long, env = "CASEOPS_RELAY_WINDOW", default_value_t = 1024)]
    pub relay_window: usize,
    /// Batches published at once, each of another tenant, on PostgreSQL (SQLite
    /// always publishes one at a time).
    #[arg(long, env = "CASEOPS_RELAY_LANES", default_value_t = 2)]
    pub relay_lanes: usize,
    /// Milliseconds an idle relay waits before it looks for new events again; one
    /// inside `serve` is also woken by each of its server's commits.
    #[arg(long, env = "CASEOPS_RELAY_IDLE_MS", default_value_t = 20)]
    pub relay_idle_ms: u64,
    /// Hours a published event stays in the outbox before it is deleted.
    #[arg(long, env = "CASEOPS_OUTBOX_RETENTION_HOURS", default_value_t = 168)]
    pub outbox_retention_hours: u64,
}

impl RelayOptions {
    pub fn config(&self, nats_url: &str) -> crate::relay::RelayConfig {
        crate::relay::RelayConfig {
            nats_url: nats_url.to_string(),
            stream: self.relay_stream.clone(),
            subject_prefix: self.relay_subject_prefix.clone(),
            batch: self.relay_batch.max(1),
            window: self.relay_window.max(1),
            lanes: self.relay_lanes.max(1),
            idle: Duration::from_millis(self.relay_idle_ms.max(1)),
            retention: Duration::from_secs(self.outbox_retention_hours.saturating_mul(3600)),
            ..Default::default()
        }
    }
}

/// The options of `relay`.
#[derive(Args, Clone, Debug)]
pub struct RelayArgs {
    #[command(flatten)]
    pub db: DbArgs,
    #[command(flatten)]
    pub logs: crate::logging::LogArgs,
    /// The NATS server with JetStream.
    #[arg(
        long,
        env = "CASEOPS_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats_url: String,
    /// Publish what the outbox holds, then exit and print how many events went
    /// out and how fast; fail at once, instead of retrying, when NATS does not
    /// answer or refuses an event.
    #[arg(long)]
    pub drain: bool,
    /// Serve `/health/live`, `/health/ready` (NATS and the database) and `/metrics`
    /// (the outbox backlog, events published) on this address, e.g.
    /// `127.0.0.1:9465`; port 0 picks one, printed on standard output.
    #[arg(long, env = "CASEOPS_RELAY_LISTEN", value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub options: RelayOptions,
}

/// `relay`: publishes the outbox until SIGTERM or SIGINT, then logs its counts.
pub async fn relay(cli: &HostCli, args: RelayArgs) -> Result<(), String> {
    crate::logging::init(&args.logs)?;
    let url = args.db.url(cli);
    let db = Db::connect(&url, 2, cli.schema)
        .await
        .map_err(|e| e.to_string())?;
    let health = std::sync::Arc::new(crate::relay::RelayHealth::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let config = crate::relay::RelayConfig {
        drain: args.drain,
        ..args.options.config(&args.nats_url)
    };
    let name = cli.name;
    let probes = match args.listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen on `{addr}` (--listen): {e}"))?;
            let bound = listener.local_addr().map_err(|e| e.to_string())?;
            out!("{name} relay probes on http://{bound}");
            Some(crate::http::Server::spawn(
                "relay probes",
                listener,
                crate::relay_probes::router(db.clone(), health.clone()),
                crate::http::Limits::default(),
            ))
        }
        None => None,
    };
    let started = std::time::Instant::now();
    let mut task = tokio::spawn(crate::relay::run(db, config, health.clone(), stopped, None));
    tracing::info!(database = %redact(&url), nats = %args.nats_url, "{name} relay started");
    let joined = tokio::select! {
        signal = stop_signal() => {
            let signal = signal?;
            tracing::info!("{name} relay: {signal}: stopping");
            let _ = stop.send(true);
            task.await
        }
        joined = &mut task => joined,
    };
    if let Some(probes) = probes {
        probes.stop(Duration::from_secs(1)).await;
    }
    let result = joined.map_err(|e| e.to_string())?;
    let (published, duplicates) = health.counts();
    let seconds = started.elapsed().as_secs_f64();
    tracing::info!(published, duplicates, seconds, "{name} relay stopped");
    result.map_err(|e| e.to_string())?;
    if args.drain {
        out!(
            "published {published} events ({duplicates} already in the stream) in {seconds:.2} s: {:.0} events/s",
            published as f64 / seconds.max(1e-9)
        );
    }
    Ok(())
}

impl ServeArgs {
    pub fn grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_seconds)
    }

    /// The host configuration these options describe. API keys come from
    /// `CASEOPS_API_KEYS`, else `dev_keys`; production refuses SQLite, the
    /// development signing key and development keys. Every host serves through
    /// this, so it also installs the log subscriber `--log-level`/`--log-format`
    /// describe.
    pub fn config(
        &self,
        cli: &HostCli,
        dev_keys: HashMap<String, ApiPrincipal>,
    ) -> Result<HostConfig, String> {
        crate::logging::init(&self.logs)?;
        let database = self.db.url(cli);
        let signing_key = self
            .signing_key
            .clone()
            .unwrap_or_else(|| DEV_SIGNING_KEY.to_string());
        let keys = match std::env::var("CASEOPS_API_KEYS") {
            Ok(spec) if !spec.trim().is_empty() => Some(parse_api_keys(&spec, &(cli.scopes)())?),
            _ => None,
        };
        if self.production {
            let refused =
                self.production_refusals(&database, &signing_key, keys.as_ref(), &dev_keys);
            if !refused.is_empty() {
                return Err(format!("production mode refuses {}", refused.join("; ")));
            }
        }
        let keys = keys.unwrap_or(dev_keys);
        let only = self.only.map(|o| match o {
            OnlyArg::Api => Only::Api,
            OnlyArg::Mcp => Only::Mcp,
        });
        let mcp_transport = match self.mcp_transport {
            McpTransportArg::Auto => McpTransport::Auto,
            McpTransportArg::Http => McpTransport::Http,
            McpTransportArg::InProcess => McpTransport::InProcess,
        };
        Ok(HostConfig {
            database_url: database,
            schema: cli.schema,
            api_listen: self.listen,
            mcp_listen: self.mcp_listen,
            signing_key,
            keys,
            mcp_url: self.mcp_url.clone(),
            mcp_era: self.mcp_era,
            mcp_transport,
            mcp_public_url: self.mcp_public_url.clone(),
            allowed_hosts: self.allowed_hosts.clone(),
            allowed_origins: self.allowed_origins.clone(),
            token_issuer: self.token_issuer.clone(),
            only,
            lease_ms: (self.lease_seconds.max(1) * 1000) as i64,
            approval_ttl: Duration::from_secs(self.approval_ttl_seconds.max(1)),
            workers: self.workers,
            db_connections: self.db_connections,
            limits: crate::http::Limits {
                header_read: Duration::from_secs(self.header_timeout_seconds.max(1)),
                body_read: Duration::from_secs(self.body_timeout_seconds.max(1)),
                idle: Duration::from_secs(self.idle_timeout_seconds.max(1)),
                max_connections: self
                    .max_connections
                    .unwrap_or_else(crate::http::default_max_connections)
                    .max(1),
            },
            relay: self
                .relay
                .as_deref()
                .map(|url| self.relay_options.config(url)),
        })
    }
}

impl ServeArgs {
    /// Every weak setting at once, so that one attempt shows all there is to fix.
    fn production_refusals(
        &self,
        database: &str,
        signing_key: &str,
        keys: Option<&HashMap<String, ApiPrincipal>>,
        dev_keys: &HashMap<String, ApiPrincipal>,
    ) -> Vec<String> {
        let mut refused = Vec::new();
        if database.starts_with("sqlite:") {
            refused.push("SQLite (set CASEOPS_DATABASE_URL to a PostgreSQL URL)".to_string());
        }
        if signing_key == DEV_SIGNING_KEY {
            refused.push("the development signing key (set CASEOPS_SIGNING_KEY: 32+ bytes, 16+ distinct characters)".into());
        } else if signing_key.len() < 32 || distinct(signing_key) < 16 {
            refused.push("a weak signing key (CASEOPS_SIGNING_KEY needs 32+ bytes and 16+ distinct characters)".into());
        }
        match keys {
            None => refused.push(
                "the development API keys (set CASEOPS_API_KEYS: `key=tenant:actor;…`)".into(),
            ),
            Some(keys) => {
                if keys.keys().any(|k| dev_keys.contains_key(k)) {
                    refused.push("development API keys in CASEOPS_API_KEYS".into());
                }
                let weak = keys.keys().filter(|k| distinct(k) < 16).count();
                if weak > 0 {
                    refused.push(format!(
                        "{weak} API key(s) in CASEOPS_API_KEYS with fewer than 16 distinct characters"
                    ));
                }
            }
        }
        if !self.behind_tls_proxy {
            let api = (self.only != Some(OnlyArg::Mcp)).then_some((self.listen, "--listen"));
            let mcp =
                (self.only != Some(OnlyArg::Api)).then_some((self.mcp_listen, "--mcp-listen"));
            for (addr, flag) in [api, mcp].into_iter().flatten() {
                if !addr.ip().is_loopback() {
                    refused.push(format!(
                        "plain HTTP on `{addr}` ({flag}) (terminate TLS in front of it and pass --behind-tls-proxy)"
                    ));
                }
            }
        }
        refused
    }
}

fn distinct(text: &str) -> usize {
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    chars.len()
}

/// Prints where a started host listens, waits for SIGTERM or SIGINT, then shuts it
/// down gracefully.
pub async fn serve_until_stopped(
    cli: &HostCli,
    running: RunningHost,
    database_url: &str,
    grace: Duration,
) -> Result<(), String> {
    let name = cli.name;
    // A server outlives whoever reads its start-up lines (a test, a supervisor that
    // closes the pipe): a closed stdout must not stop it, unlike `out!`.
    let say = |line: String| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), "{line}");
    };
    if let Some(a) = running.api_addr {
        say(format!(
            "{name} api on http://{a} (database {})",
            redact(database_url)
        ));
    }
    if let Some(m) = running.mcp_addr {
        let bound = format!("http://{m}/mcp");
        match running.mcp_url == bound {
            true => say(format!("{name} mcp on {bound}")),
            false => say(format!(
                "{name} mcp on {bound} (public URL {})",
                running.mcp_url
            )),
        }
    }
    if running.api_addr.is_some() {
        match running.tools_in_process {
            true => say(format!("{name} runs call their tools in process")),
            false => say(format!(
                "{name} runs call their tools at {}",
                running.mcp_url
            )),
        }
    }
    let signal = stop_signal().await?;
    say(format!(
        "{name}: {signal}: shutting down (grace {} s)",
        grace.as_secs()
    ));
    running.shutdown(grace).await;
    crate::traces::flush().await;
    say(format!("{name}: stopped"));
    Ok(())
}

/// `8080` → `127.0.0.1:8080`; `localhost:8080` and other names are resolved (the
/// first address wins); `0.0.0.0:8080` and `[::1]:8080` are taken as they are.
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
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

/// Waits for SIGTERM (what orchestrators send) or SIGINT (Ctrl-C); names it.
pub async fn stop_signal() -> Result<&'static str, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

/// `key=tenant:actor;key2=tenant2:actor2` → API principals with `scopes`.
pub fn parse_api_keys(
    spec: &str,
    scopes: &[String],
) -> Result<HashMap<String, ApiPrincipal>, String> {
    let mut keys = HashMap::new();
    for (i, entry) in spec
        .split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .enumerate()
    {
        let bad = || {
            format!(
                "CASEOPS_API_KEYS entry {} is not `key=tenant:actor` (optionally followed by ` +scope`, e.g. ` +approval:decide`)",
                i + 1
            )
        };
        let (key, rest) = entry.split_once('=').ok_or_else(bad)?;
        let mut words = rest.split_whitespace();
        let who = words.next().ok_or_else(bad)?;
        let (tenant, actor) = who.split_once(':').ok_or_else(bad)?;
        if key.len() < 16 || tenant.is_empty() || actor.is_empty() {
            return Err(format!("{} (keys are at least 16 characters)", bad()));
        }
        // Scopes beyond the tools' (deciding approvals): granted per key.
        let mut granted = scopes.to_vec();
        for extra in words {
            match extra.strip_prefix('+') {
                Some(scope) if !scope.is_empty() => {
                    if !granted.iter().any(|s| s == scope) {
                        granted.push(scope.to_string());
                    }
                }
                _ => return Err(bad()),
            }
        }
        keys.insert(
            key.to_string(),
            ApiPrincipal {
                tenant_id: tenant.into(),
                actor: actor.into(),
                scopes: granted,
            },
        );
    }
    Ok(keys)
}

/// `migrate`: creates or upgrades the schema (the host's and the application's).
pub async fn migrate(cli: &HostCli, db: &DbArgs) -> Result<Db, String> {
    Db::connect(&db.url(cli), 4, cli.schema)
        .await
        .map_err(|e| e.to_string())
}

/// The options of `migrate`.
#[derive(Args, Clone, Debug)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Also make the database write compact rows (for the reference agent's
    /// acceptance run, ≈ 5.1 KB less per run on SQLite): ledger rows, transitions,
    /// run rows and a run's own audit and outbox events leave out what a reader
    /// derives from other stored values. Versions before this one cannot read such rows, so run
    /// it only once every replica runs this version; replicas write compact rows
    /// from their next start. A new database is compact from its first migration.
    #[arg(long)]
    pub compact_rows: bool,
}

/// `migrate`, then `--compact-rows` if asked; prints the format rows are written in.
pub async fn migrate_with(cli: &HostCli, args: &MigrateArgs) -> Result<(), String> {
    let db = migrate(cli, &args.db).await?;
    if args.compact_rows {
        RowFormat::make_compact(&db)
            .await
            .map_err(|e| e.to_string())?;
    }
    let format = RowFormat::of(&db).await.map_err(|e| e.to_string())?;
    out!(
        "database is up to date; rows are written `{}`: {}",
        format.name(),
        match format {
            f if f < RowFormat::NEWEST =>
                "less compact than this version can (`migrate --compact-rows` once every replica runs this version)",
            _ => "compact",
        }
    );
    Ok(())
}

/// Opens an existing database without creating or migrating anything.
async fn open_existing(cli: &HostCli, db: &DbArgs) -> Result<Db, String> {
    Db::open_existing(&db.url(cli), 2, cli.schema)
        .await
        .map_err(|e| e.to_string())
}

#[derive(Subcommand, Clone, Debug)]
pub enum RunsCommand {
    /// List a tenant's runs, newest first.
    List {
        /// The tenant whose runs to list (default: the development tenant).
        #[arg(long, env = "CASEOPS_TENANT")]
        tenant: Option<String>,
        /// Only runs in this status (`running`, `waiting_approval`, `completed`,
        /// `needs_human`, `stopped`, `failed`).
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
        /// The tenant the run belongs to (default: the development tenant).
        #[arg(long, env = "CASEOPS_TENANT")]
        tenant: Option<String>,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Subcommand, Clone, Debug)]
pub enum AuditCommand {
    /// Recompute every tenant's audit hash chain; exit 1 if any event was edited,
    /// inserted or deleted.
    Verify {
        #[command(flatten)]
        db: DbArgs,
    },
}

fn tenant(cli: &HostCli, given: Option<String>) -> Result<String, String> {
    given
        .or(cli.default_tenant.map(str::to_string))
        .ok_or_else(|| "`--tenant` (or CASEOPS_TENANT) is required".to_string())
}

/// `runs list` and `runs show`.
pub async fn runs(cli: &HostCli, command: RunsCommand) -> Result<(), String> {
    match command {
        RunsCommand::List {
            tenant: t,
            status,
            limit,
            json,
            db,
        } => {
            let t = tenant(cli, t)?;
            list(cli, &db, &t, status.as_deref(), limit, json).await
        }
        RunsCommand::Show {
            run_id,
            tenant: t,
            db,
        } => show(cli, &db, &tenant(cli, t)?, &run_id).await,
    }
}

async fn list(
    cli: &HostCli,
    db: &DbArgs,
    tenant: &str,
    status: Option<&str>,
    limit: i64,
    json: bool,
) -> Result<(), String> {
    let store = SqlRunStore::new(open_existing(cli, db).await?);
    let runs = store
        .list(tenant, status, limit.clamp(1, 10_000))
        .await
        .map_err(|e| e.to_string())?;
    if json {
        for r in &runs {
            out!("{}", r.to_json(cli.resource_key));
        }
        return Ok(());
    }
    let resource = cli
        .resource_key
        .strip_suffix("_id")
        .unwrap_or(cli.resource_key);
    out!(
        "{:<44} {:<12} {:<10} {:>5}  {:<28} created (ms since epoch)",
        "run",
        "status",
        resource,
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

async fn show(cli: &HostCli, db: &DbArgs, tenant: &str, run_id: &str) -> Result<(), String> {
    let store = SqlRunStore::new(open_existing(cli, db).await?);
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
        serde_json::to_string_pretty(&json!({
            "run": run.to_json(cli.resource_key),
            "tool_executions": ledger,
            "checkpoints": cps,
        }))
        .unwrap_or_default()
    );
    Ok(())
}

/// `audit verify`.
pub async fn audit(cli: &HostCli, command: AuditCommand) -> Result<(), String> {
    let AuditCommand::Verify { db } = command;
    let db = open_existing(cli, &db).await?;
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

#[cfg(test)]
mod api_key_tests {
    use super::parse_api_keys;

    #[test]
    fn an_api_key_entry_may_grant_extra_scopes_such_as_deciding_approvals() {
        let tools = vec!["case:read".to_string()];
        let keys = parse_api_keys(
            "k3y-0123456789abcdef=tenant-acme:user:alice; k3y-fedcba9876543210=tenant-acme:user:bob +approval:decide",
            &tools,
        )
        .unwrap();
        assert_eq!(keys["k3y-0123456789abcdef"].scopes, ["case:read"]);
        assert_eq!(keys["k3y-0123456789abcdef"].actor, "user:alice");
        assert_eq!(
            keys["k3y-fedcba9876543210"].scopes,
            ["case:read", "approval:decide"]
        );
        let err = parse_api_keys(
            "k3y-0123456789abcdef=tenant-acme:user:bob approval:decide",
            &tools,
        )
        .unwrap_err();
        assert!(err.contains("entry 1") && err.contains("+scope"), "{err}");
    }

    #[test]
    fn an_extra_scope_the_tools_already_grant_is_listed_once() {
        let tools = vec!["case:read".to_string()];
        let keys = parse_api_keys(
            "k3y-0123456789abcdef=tenant-acme:user:bob +case:read +approval:decide +approval:decide",
            &tools,
        )
        .unwrap();
        assert_eq!(
            keys["k3y-0123456789abcdef"].scopes,
            ["case:read", "approval:decide"]
        );
    }
}
