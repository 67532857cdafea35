//! Logs: one subscriber for every host binary, configured by `--log-level`,
//! `--log-format` or `RUST_LOG`, and one line per HTTP request on both listeners.
//!
//! INVARIANT: no log line holds an API key, a task token, a signing key or a
//! database password. The request line names the tenant a key belongs to, never the
//! key; database URLs go through `store::redact`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line (for a log collector).
    Json,
}

/// Where logs go and how much of them.
#[derive(Args, Clone, Debug)]
pub struct LogArgs {
    /// Least severe level logged: `error`, `warn`, `info`, `debug` (every run state
    /// change) or `trace`. `RUST_LOG` (e.g. `caseops_host=debug`), when set, wins.
    #[arg(long, env = "CASEOPS_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// `text` or `json`.
    #[arg(long, env = "CASEOPS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Default for LogArgs {
    fn default() -> Self {
        LogArgs {
            log_level: "info".into(),
            log_format: LogFormat::Text,
        }
    }
}

/// Installs the process's log subscriber, writing to standard error (standard
/// output carries the start-up lines a supervisor reads). A second call does nothing.
pub fn init(args: &LogArgs) -> Result<(), String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec)
            .map_err(|e| format!("RUST_LOG `{spec}` is not a log filter: {e}"))?,
        _ => {
            let level: LevelFilter = args.log_level.parse().map_err(|_| {
                format!(
                    "--log-level `{}` is not a level: use error, warn, info, debug, trace or off",
                    args.log_level
                )
            })?;
            EnvFilter::default().add_directive(level.into())
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    // Err only when a subscriber is already installed (tests start hosts in-process).
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
}

/// The tenant a request acted for, set by the handler that authenticated it (an
/// extension of the response), for the request line.
#[derive(Debug, Clone)]
pub struct LogTenant(pub String);

/// Logs one line per request when its response is ready: method, route template
/// (never the raw path, which may hold a resource id of another tenant), status,
/// latency, request id and tenant.
pub async fn request_line(listener: &'static str, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "(no route)".to_string(), |m| m.as_str().to_string());
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= 200)
        .map(str::to_string);
    let response = next.run(request).await;
    let tenant = response
        .extensions()
        .get::<LogTenant>()
        .map(|t| t.0.as_str());
    tracing::info!(
        listener,
        method = %method,
        route,
        status = response.status().as_u16(),
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        request_id,
        tenant,
        "request"
    );
    response
}
