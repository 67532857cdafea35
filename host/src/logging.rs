//! Logs: one subscriber for every host binary, configured by `--log-level`,
//! `--log-format` or `RUST_LOG`, and one line per HTTP request on both listeners;
//! the same subscriber carries spans to [`crate::traces`] when traces are exported.
//!
//! INVARIANT: no log line holds an API key, a task token, a signing key or a
//! database password. The request line names the tenant a key belongs to, never the
//! key; database URLs go through `store::redact`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use clap::{Args, ValueEnum};
use tracing::Instrument;
use tracing::field::Empty;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterExt, LevelFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt;

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
    /// Export traces over OTLP/HTTP (protobuf) to this collector, e.g.
    /// `http://127.0.0.1:4318` (`/v1/traces` is added). Unset: the standard
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, else off.
    #[arg(long, env = "CASEOPS_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

impl Default for LogArgs {
    fn default() -> Self {
        LogArgs {
            log_level: "info".into(),
            log_format: LogFormat::Text,
            otlp_endpoint: None,
        }
    }
}

/// Installs the process's log subscriber, writing to standard error (standard
/// output carries the start-up lines a supervisor reads). A second call does nothing.
pub fn init(args: &LogArgs) -> Result<(), String> {
    let subscriber = subscriber(args)?;
    // Err only when a subscriber is already installed (tests start hosts in-process).
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

/// The log, and the trace export when an endpoint is configured.
fn subscriber(args: &LogArgs) -> Result<Box<dyn tracing::Subscriber + Send + Sync>, String> {
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
    // The log takes events only: spans are for traces, and with no exporter no
    // layer wants them, so none is created.
    let filter = filter.and(filter_fn(|m| m.is_event()));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false);
    let fmt = match args.log_format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).with_filter(filter).boxed(),
    };
    let env = |name: &str| std::env::var(name).ok();
    let endpoint = crate::traces::endpoint(
        args.otlp_endpoint.as_deref(),
        env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").as_deref(),
        env("OTEL_EXPORTER_OTLP_ENDPOINT").as_deref(),
    );
    let traces =
        match &endpoint {
            Some(endpoint) => Some(crate::traces::layer(endpoint, "caseops")?.with_filter(
                filter_fn(|m| m.is_span() && m.target().starts_with("caseops")),
            )),
            None => None,
        };
    // Without an exporter the trace layer is left out, not added as `None`: an
    // absent `Option` layer declares an interest in every callsite, which enabled
    // every span (each one built, its fields formatted and stored) for nobody.
    let logged = tracing_subscriber::registry().with(fmt);
    Ok(match traces {
        Some(traces) => Box::new(logged.with(traces)),
        None => Box::new(logged),
    })
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
        .filter(|v| v.len() <= crate::api::MAX_REQUEST_ID_LEN)
        .map(str::to_string);
    let span = tracing::info_span!(
        "request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = Empty,
        caseops.listener = listener,
    );
    if let Some(parent) = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
    {
        crate::traces::set_parent(&span, parent);
    }
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_exporter_no_span_is_built_and_events_are_still_logged() {
        // The environment may choose a filter or an exporter; this is about neither.
        for name in [
            "RUST_LOG",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            if std::env::var_os(name).is_some() {
                eprintln!("skipped: `{name}` is set");
                return;
            }
        }
        let args = LogArgs::default();
        let Ok(subscriber) = subscriber(&args) else {
            panic!("the default log arguments build a subscriber")
        };
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("invoke_agent", caseops.run.id = "r-1");
            assert!(span.is_disabled(), "a span was built with no exporter");
            assert!(tracing::event_enabled!(tracing::Level::INFO));
            assert!(!tracing::event_enabled!(tracing::Level::DEBUG));
        });
    }
}
