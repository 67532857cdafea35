//! Traces: the spans of requests, runs (`invoke_agent`), planner rounds, tool
//! calls (`execute_tool`), commits and the MCP server's handling, exported over
//! OTLP/HTTP (protobuf) when `--otlp-endpoint` is set, and W3C trace context
//! carried from the API to the MCP server in the HTTP `traceparent` header and in
//! `params._meta.traceparent`.
//!
//! Export is batched on the SDK's own thread with a bounded queue: a slow or absent
//! collector drops spans, it never slows a run. With no endpoint no span is even
//! created (the log layer takes events only).

use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Span;
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::registry::LookupSpan;

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The OTLP/HTTP traces URL for `endpoint`: a collector's base URL
/// (`http://collector:4318`) gets `/v1/traces`, a full one is kept.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let e = endpoint.trim().trim_end_matches('/');
    if !(e.starts_with("http://") || e.starts_with("https://")) {
        return Err(format!(
            "--otlp-endpoint `{endpoint}` is not an http:// or https:// URL"
        ));
    }
    Ok(if e.ends_with("/v1/traces") {
        e.to_string()
    } else {
        format!("{e}/v1/traces")
    })
}

/// Where traces go: `--otlp-endpoint` (or `CASEOPS_OTLP_ENDPOINT`), else the
/// OpenTelemetry variables an operator may already set for every service,
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (a full URL) then
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL); none of them means no export.
pub fn endpoint(
    flag: Option<&str>,
    traces_env: Option<&str>,
    base_env: Option<&str>,
) -> Option<String> {
    [flag, traces_env, base_env]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|e| !e.is_empty())
        .map(str::to_string)
}

/// The layer that turns the process's spans into OpenTelemetry spans exported to
/// `endpoint`, as service `service`.
pub fn layer<S>(
    endpoint: &str,
    service: &'static str,
) -> Result<OpenTelemetryLayer<S, SdkTracer>, String>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let url = traces_url(endpoint)?;
    crate::install_tls_provider();
    // The exporter's blocking HTTP client may not be built on an async thread.
    let built = std::thread::spawn(move || {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .build()
            .map_err(|e| format!("the OTLP exporter cannot start: {e}"))?;
        // The SDK reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; our name
        // is only the default, so replicas can be told apart.
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service);
        }
        Ok::<_, String>(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource.build())
                .build(),
        )
    })
    .join()
    .map_err(|_| "the OTLP exporter panicked while starting".to_string())??;
    let tracer = built.tracer("caseops");
    let _ = PROVIDER.set(built);
    Ok(tracing_opentelemetry::layer().with_tracer(tracer))
}

/// Exports what is still queued and stops the exporter (at the end of `serve`).
pub async fn flush() {
    if let Some(provider) = PROVIDER.get() {
        let provider = provider.clone();
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}

/// The current span's context as a `traceparent` value, when traces are exported.
pub fn traceparent() -> Option<String> {
    PROVIDER.get()?;
    let cx = Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

/// Makes the remote span named by `traceparent` the parent of `span`; an invalid
/// value is ignored (the span stays where it was).
pub fn set_parent(span: &Span, traceparent: &str) {
    if PROVIDER.get().is_none() {
        return;
    }
    let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_flag_wins_over_the_opentelemetry_variables_and_empty_ones_are_unset() {
        use super::endpoint;
        assert_eq!(
            endpoint(
                Some("http://a:4318"),
                Some("http://b/v1/traces"),
                Some("http://c")
            ),
            Some("http://a:4318".into())
        );
        assert_eq!(
            endpoint(None, Some("http://b/v1/traces"), Some("http://c")),
            Some("http://b/v1/traces".into())
        );
        assert_eq!(
            endpoint(None, Some(" "), Some("http://c")),
            Some("http://c".into())
        );
        assert_eq!(endpoint(None, None, None), None);
    }

    #[test]
    fn a_collector_base_url_gets_the_traces_path_and_a_full_one_is_kept() {
        assert_eq!(
            traces_url("http://collector:4318").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/v1/traces/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        let refused = traces_url("collector:4318").unwrap_err();
        assert!(
            refused.contains("--otlp-endpoint `collector:4318`"),
            "{refused}"
        );
    }
}
