//! The MCP tool server: Streamable HTTP at `/mcp`, JSON responses, no sessions. It
//! serves both protocol eras: 2025-11-25 (and before) after an `initialize`
//! handshake, 2026-07-28 statelessly with a `_meta` envelope on every request
//! (see [`super::era`]). It speaks the protocol exactly and still decides tenant, scope and
//! resource itself: identity comes only from the task token.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use tracing::Instrument;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use caseops_runtime::authorization::{Authorization, AuthzDecision, Principal};
use caseops_runtime::handler::idempotency_key;
use caseops_runtime::validation::Validators;
use caseops_runtime::{CallContext, ContractBundle, RunSpec, ToolDispatch, ToolError};
use serde_json::{Map, Value, json};

use super::era::{self, HANDSHAKE_VERSIONS};
use super::jsonrpc::{self, Incoming};
use super::token::{TaskClaims, TokenError, TokenVerifier};
use super::tool_result::ToolResult;

/// The newest version the `initialize` handshake negotiates.
pub const LATEST_VERSION: &str = HANDSHAKE_VERSIONS[0];
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// Where the server lives and whom it lets in.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// This server's resource URL (`http://host:port/mcp`): the token audience.
    pub resource_url: String,
    /// The token issuer (the host's authorization server).
    pub issuer: String,
    /// `Origin` values a browser may send; any other present `Origin` is refused.
    pub allowed_origins: Vec<String>,
    /// `Host` values accepted (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    /// A request body must have arrived within this.
    pub body_read: std::time::Duration,
    pub page_size: usize,
    /// How long a stateless client may reuse `server/discover` and `tools/list`.
    pub cache_ttl_ms: u64,
}

impl McpConfig {
    /// A loopback server on `addr` (e.g. `127.0.0.1:8081`), known by that address.
    pub fn loopback(addr: std::net::SocketAddr, issuer: &str) -> Self {
        Self::public(addr, None, issuer, &[], &[]).expect("a loopback address is its own URL")
    }

    /// A server bound to `bind` that clients reach at `public_url` (default: the
    /// bind address itself, which must then be a specific one). The public URL is
    /// the token audience and what challenges and metadata advertise; its host is
    /// always accepted, as are the loopback names for a loopback bind, and
    /// `extra_hosts`/`extra_origins` on top (a port-forward, a second name).
    pub fn public(
        bind: std::net::SocketAddr,
        public_url: Option<&str>,
        issuer: &str,
        extra_hosts: &[String],
        extra_origins: &[String],
    ) -> Result<Self, McpSetupError> {
        let url = match public_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None if bind.ip().is_unspecified() => {
                return Err(McpSetupError::Address(format!(
                    "`--mcp-listen {bind}` listens on every interface, so it is no URL a client can use: set `--mcp-public-url` (CASEOPS_MCP_PUBLIC_URL) to the URL the api reaches it at"
                )));
            }
            None => format!("http://{bind}/mcp"),
        };
        let parsed = reqwest::Url::parse(&url).map_err(|e| {
            McpSetupError::Address(format!("`--mcp-public-url {url}` is not a URL: {e}"))
        })?;
        if !matches!(parsed.scheme(), "http" | "https")
            || parsed.host_str().is_none()
            || !parsed.path().ends_with("/mcp")
            || parsed.query().is_some()
        {
            return Err(McpSetupError::Address(format!(
                "`--mcp-public-url {url}` must be an http(s) URL whose path ends with `/mcp`"
            )));
        }
        let host = parsed.host_str().unwrap_or_default();
        let host = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let origin = parsed.origin().ascii_serialization();
        let mut allowed_hosts = vec![host.clone()];
        let mut allowed_origins = vec![origin];
        if parsed.port().is_none() {
            // A client may name the default port explicitly.
            let port = parsed.port_or_known_default().unwrap_or(80);
            allowed_hosts.push(format!("{host}:{port}"));
        }
        if bind.ip().is_loopback() || bind.ip().is_unspecified() {
            let port = bind.port();
            for name in ["127.0.0.1", "localhost", "[::1]"] {
                allowed_hosts.push(format!("{name}:{port}"));
                allowed_origins.push(format!("http://{name}:{port}"));
            }
        }
        for h in extra_hosts {
            if !allowed_hosts.contains(h) {
                allowed_hosts.push(h.clone());
            }
        }
        for o in extra_origins {
            if !allowed_origins.contains(o) {
                allowed_origins.push(o.clone());
            }
        }
        Ok(Self {
            resource_url: url,
            issuer: issuer.trim_end_matches('/').to_string(),
            allowed_origins,
            allowed_hosts,
            max_body_bytes: 256 * 1024,
            body_read: std::time::Duration::from_secs(10),
            page_size: 50,
            cache_ttl_ms: 60_000,
        })
    }

    fn base_url(&self) -> &str {
        self.resource_url.trim_end_matches("/mcp")
    }

    fn metadata_url(&self) -> String {
        format!("{}{METADATA_PATH}", self.base_url())
    }
}

/// The server's state: compiled schemas and policies of bundle `B`, handlers `D`.
pub struct McpServer<B: ContractBundle, D> {
    config: McpConfig,
    verifier: TokenVerifier,
    validators: Validators,
    authorization: Authorization,
    /// Cedar entities per task (see [`McpServer::principal`]).
    principals: Mutex<HashMap<String, Arc<Principal>>>,
    dispatch: D,
    listing: Vec<Value>,
    /// The tenant catalog, built once and shared by every request's spec.
    catalog: caseops_runtime::Catalog,
    _bundle: PhantomData<B>,
}

/// Tasks whose Cedar entities are kept (≈ 15 KB each); emptied when full. A task
/// makes its few calls close together, so a few hundred cover many concurrent runs.
const PRINCIPALS_KEPT: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum McpSetupError {
    /// The server's public identity cannot be worked out from the configuration.
    #[error("{0}")]
    Address(String),
    #[error("bundle does not load: {0}")]
    Bundle(String),
    #[error("token verifier: {0}")]
    Token(#[from] TokenError),
}

impl<B: ContractBundle, D: ToolDispatch + 'static> McpServer<B, D> {
    pub fn new(config: McpConfig, secret: &[u8], dispatch: D) -> Result<Self, McpSetupError> {
        let verifier = TokenVerifier::new(
            secret,
            &config.issuer,
            &config.resource_url,
            B::RESOURCE_ID_FIELD,
        )?;
        let validators =
            Validators::compile::<B>().map_err(|e| McpSetupError::Bundle(e.to_string()))?;
        let authorization =
            Authorization::load::<B>().map_err(|e| McpSetupError::Bundle(e.to_string()))?;
        let listing: Value =
            serde_json::from_str(B::MCP_TOOLS).map_err(|e| McpSetupError::Bundle(e.to_string()))?;
        let listing = listing["tools"].as_array().cloned().unwrap_or_default();
        Ok(Self {
            config,
            verifier,
            validators,
            authorization,
            principals: Mutex::new(HashMap::new()),
            dispatch,
            listing,
            catalog: B::CATALOG.iter().copied().collect(),
            _bundle: PhantomData,
        })
    }

    /// The run facts a task token stands for: the same shape the API builds for a
    /// run, so both planes ask the policies the same question.
    fn spec_of(&self, claims: &TaskClaims) -> RunSpec {
        RunSpec {
            run_id: claims.task_id.clone(),
            tenant_id: claims.tenant_id.clone(),
            task_id: claims.task_id.clone(),
            subject: claims.sub.clone(),
            resource_id: resource_of::<B>(claims).to_string(),
            scopes: claims.scopes(),
            catalog: self.catalog.clone(),
            stage: stage_of::<B>(claims).to_string(),
            goal: String::new(),
            correlation_id: claims.jti.clone(),
        }
    }

    /// The task's Cedar entities. Building them was most of a decision's cost and
    /// they depend only on the token's claims, which a task's calls share, so they
    /// are kept per task, and reused while a call's claims state the same facts
    /// (a task's later token may name another stage or other scopes).
    fn principal(&self, claims: &TaskClaims) -> Result<Arc<Principal>, String> {
        let kept = self
            .principals
            .lock()
            .expect("principal cache")
            .get(&claims.task_id)
            .cloned();
        if let Some(p) = kept.filter(|p| states_the_same::<B>(p.spec(), claims)) {
            return Ok(p);
        }
        let spec = self.spec_of(claims);
        let principal = Arc::new(self.authorization.principal(&spec, &spec.stage, B::TOOLS)?);
        let mut cache = self.principals.lock().expect("principal cache");
        if cache.len() >= PRINCIPALS_KEPT {
            cache.clear();
        }
        cache.insert(claims.task_id.clone(), principal.clone());
        Ok(principal)
    }

    /// The axum router: `/mcp`, the protected-resource metadata and `/health/live`.
    pub fn router(self) -> Router {
        let max = self.config.max_body_bytes;
        let state = Arc::new(self);
        Router::new()
            .route("/mcp", any(mcp::<B, D>))
            .route(METADATA_PATH, get(metadata::<B, D>))
            .route(
                "/.well-known/oauth-protected-resource",
                get(metadata::<B, D>),
            )
            .route("/health/live", get(|| async { "ok" }))
            .layer(DefaultBodyLimit::max(max))
            .layer(axum::middleware::from_fn(|r, n| {
                crate::logging::request_line("mcp", r, n)
            }))
            .with_state(state)
    }

    fn unauthorized(&self, error: &TokenError) -> Response {
        let challenge = format!(
            "Bearer resource_metadata=\"{}\", error=\"invalid_token\", error_description=\"{error}\"",
            self.config.metadata_url()
        );
        let mut r = (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({ "error": "invalid_token", "error_description": error.to_string() })),
        )
            .into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_str(&challenge).unwrap_or(HeaderValue::from_static("Bearer")),
        );
        r
    }

    fn insufficient_scope(&self, scope: &str) -> Response {
        let challenge = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{}\"",
            self.config.metadata_url()
        );
        let mut r = (
            StatusCode::FORBIDDEN,
            axum::Json(json!({ "error": "insufficient_scope", "scope": scope })),
        )
            .into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_str(&challenge).unwrap_or(HeaderValue::from_static("Bearer")),
        );
        r
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<TaskClaims>, TokenError> {
        let value = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or(TokenError::Missing)?;
        // The auth-scheme is case-insensitive (RFC 9110 §11.1): `BEARER` is Bearer.
        let (scheme, token) = value
            .trim_start()
            .split_once(' ')
            .ok_or(TokenError::Missing)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(TokenError::Missing);
        }
        self.verifier.verify_shared(token.trim())
    }

    /// Listed for a task: in scope, in the catalog, and not denied outright by the
    /// policies (the run's capability filter asks the same).
    fn tool_visible(
        &self,
        claims: &TaskClaims,
        principal: Option<&Principal>,
        tool: &Value,
    ) -> bool {
        tool["name"].as_str().and_then(B::tool).is_some_and(|t| {
            claims.has_scope(t.required_scope)
                && B::CATALOG.contains(&t.name)
                && principal.is_some_and(|p| self.authorization.may_call(p, t))
        })
    }

    fn list(
        &self,
        claims: &TaskClaims,
        params: &Map<String, Value>,
    ) -> Result<Value, (i64, String)> {
        let principal = self.principal(claims).ok();
        let visible: Vec<&Value> = self
            .listing
            .iter()
            .filter(|t| self.tool_visible(claims, principal.as_deref(), t))
            .collect();
        let start = match params.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(Value::String(c)) => c
                .strip_prefix("tools:")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= visible.len())
                .ok_or((jsonrpc::INVALID_PARAMS, "invalid cursor".to_string()))?,
            Some(_) => return Err((jsonrpc::INVALID_PARAMS, "invalid cursor".into())),
        };
        let end = (start + self.config.page_size.max(1)).min(visible.len());
        let mut result = json!({ "tools": visible[start..end] });
        if end < visible.len() {
            result["nextCursor"] = json!(format!("tools:{end}"));
        }
        Ok(result)
    }

    async fn call(
        &self,
        claims: &TaskClaims,
        mut params: Map<String, Value>,
    ) -> Result<ToolResult, CallFailure> {
        crate::fault::tool_delay().await;
        // Moved out, not copied: the arguments are the bulk of a request.
        let arguments = params.remove("arguments");
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err(CallFailure::Protocol(
                jsonrpc::INVALID_PARAMS,
                "`name` is required".into(),
            ));
        };
        let Some(tool) = B::tool(name) else {
            return Err(CallFailure::Protocol(
                jsonrpc::INVALID_PARAMS,
                format!("unknown tool `{name}`"),
            ));
        };
        // Scope is an HTTP-level decision, made before any tool code runs.
        if !claims.has_scope(tool.required_scope) {
            tracing::info!(
                tenant = %claims.tenant_id,
                task = %claims.task_id,
                tool = tool.name,
                reason = "TOOL_SCOPE_MISSING",
                "mcp tool call denied: scope missing"
            );
            return Err(CallFailure::Scope(tool.required_scope.to_string()));
        }
        let arguments = match arguments {
            None | Some(Value::Null) => json!({}),
            Some(a @ Value::Object(_)) => a,
            Some(_) => {
                return Err(CallFailure::Protocol(
                    jsonrpc::INVALID_PARAMS,
                    "`arguments` must be an object".into(),
                ));
            }
        };
        if let Err(errors) = self.validators.arguments(tool.name, &arguments) {
            return Ok(tool_error(
                "INVALID_ARGUMENTS",
                "arguments do not match the tool's input schema",
                Some(json!(errors)),
                &claims.task_id,
            ));
        }
        let decision = match self.principal(claims) {
            Ok(principal) => self.authorization.authorize_with(
                &principal,
                tool,
                &arguments,
                approval_of(claims, tool, &arguments),
            ),
            Err(message) => AuthzDecision::unevaluable(message),
        };
        if let AuthzDecision::Deny { reason, .. } = decision {
            tracing::info!(
                tenant = %claims.tenant_id,
                task = %claims.task_id,
                tool = tool.name,
                reason = %reason,
                "mcp tool call denied by policy"
            );
            return Ok(tool_error(
                &reason,
                "the call is not authorized",
                None,
                &claims.task_id,
            ));
        }
        let mut ctx = CallContext {
            tenant_id: claims.tenant_id.clone(),
            task_id: claims.task_id.clone(),
            subject: claims.sub.clone(),
            resource_id: resource_of::<B>(claims).to_string(),
            stage: stage_of::<B>(claims).to_string(),
            scopes: claims.scopes(),
            tool_call_id: claims.jti.clone(),
            correlation_id: claims.jti.clone(),
            injected: Default::default(),
            approved_action: None,
        };
        if let Some(key) = idempotency_key(&claims.tenant_id, tool, &arguments) {
            ctx.injected.insert("idempotency_key".into(), json!(key));
        }
        let called = self.dispatch.call(tool, &ctx, arguments).await;
        crate::fault::after_tool(tool.name);
        crate::fault::hang_after_tool(tool.name).await;
        match called {
            Ok(result) => {
                if let Err(errors) = self.validators.output(tool.name, &result) {
                    // Never send a result that breaks the contract; say so in the log.
                    tracing::warn!(
                        "caseops mcp: `{}` returned a result outside its output schema: {}",
                        tool.name,
                        errors.join("; ")
                    );
                    return Ok(tool_error(
                        "CONTRACT_VIOLATION",
                        "the tool's result does not match its output schema",
                        None,
                        &claims.task_id,
                    ));
                }
                Ok(ToolResult::new(
                    &result,
                    false,
                    json!({ "caseops/task_id": claims.task_id, "caseops/bundle_digest": B::BUNDLE_DIGEST }),
                ))
            }
            Err(ToolError::Business { code, message }) => {
                Ok(tool_error(&code, &message, None, &claims.task_id))
            }
            Err(ToolError::Transient { code, message }) => Ok(tool_error(
                &code,
                &message,
                Some(json!({ "transient": true })),
                &claims.task_id,
            )),
            Err(ToolError::InvalidArguments(m)) => {
                Ok(tool_error("INVALID_ARGUMENTS", &m, None, &claims.task_id))
            }
            Err(ToolError::InvalidResult(_)) => Ok(tool_error(
                "CONTRACT_VIOLATION",
                "the tool's result does not match its output type",
                None,
                &claims.task_id,
            )),
            Err(ToolError::UnknownTool(t)) => Err(CallFailure::Protocol(
                jsonrpc::INVALID_PARAMS,
                format!("unknown tool `{t}`"),
            )),
        }
    }
}

enum CallFailure {
    Protocol(i64, String),
    Scope(String),
}

/// A tool-execution error: `isError: true` with a machine-readable code.
fn tool_error(code: &str, message: &str, details: Option<Value>, task_id: &str) -> ToolResult {
    let mut structured = json!({ "code": code, "message": message });
    if let Some(d) = details {
        structured["details"] = d;
    }
    ToolResult::new(&structured, true, json!({ "caseops/task_id": task_id }))
}

fn status(code: StatusCode, message: &str) -> Response {
    (code, axum::Json(json!({ "error": message }))).into_response()
}

fn rpc_status(code: StatusCode, body: Value) -> Response {
    (code, axum::Json(body)).into_response()
}

async fn metadata<B: ContractBundle, D: ToolDispatch + 'static>(
    State(s): State<Arc<McpServer<B, D>>>,
) -> Response {
    let mut scopes = B::required_scopes();
    scopes.sort();
    axum::Json(json!({
        "resource": s.config.resource_url,
        "authorization_servers": [s.config.issuer],
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": format!("{} tools", B::AGENT),
    }))
    .into_response()
}

fn accepts_both(headers: &HeaderMap) -> bool {
    // Media types compared in place: this runs on every request.
    let (mut json, mut sse) = (false, false);
    let types = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.split(';').next().unwrap_or("").trim());
    for t in types {
        json |= t.eq_ignore_ascii_case("application/json");
        sse |= t.eq_ignore_ascii_case("text/event-stream");
    }
    json && sse
}

/// The run's resource named by a token (empty when it names none).
fn resource_of<B: ContractBundle>(claims: &TaskClaims) -> &str {
    claims.resource_id(B::RESOURCE_ID_FIELD).unwrap_or_default()
}

/// The run's stage named by a token; one without starts where runs start.
fn stage_of<B: ContractBundle>(claims: &TaskClaims) -> &str {
    claims
        .stage
        .as_deref()
        .unwrap_or_else(|| B::STAGES.first().copied().unwrap_or_default())
}

/// Whether `claims` state the facts `spec` was built from (the task's id aside,
/// which the caller matched): everything a principal reads of a token.
fn states_the_same<B: ContractBundle>(spec: &RunSpec, claims: &TaskClaims) -> bool {
    spec.task_id == claims.task_id
        && spec.tenant_id == claims.tenant_id
        && spec.subject == claims.sub
        && spec.resource_id == resource_of::<B>(claims)
        && spec.stage == stage_of::<B>(claims)
        && spec
            .scopes
            .iter()
            .map(String::as_str)
            .eq(claims.scope.split_whitespace())
}

async fn mcp<B: ContractBundle, D: ToolDispatch + 'static>(
    State(s): State<Arc<McpServer<B, D>>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    // DNS-rebinding protection comes first, for every method: exactly one Host,
    // readable, allowed — and an absolute-form target may not name another.
    let hosts: Vec<_> = headers.get_all(header::HOST).iter().collect();
    let host = match hosts.as_slice() {
        [one] => match one.to_str() {
            Ok(h) if !h.is_empty() && h.parse::<axum::http::uri::Authority>().is_ok() => h,
            _ => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "the Host header is not a valid host",
                );
            }
        },
        [] => return status(StatusCode::BAD_REQUEST, "a Host header is required"),
        _ => return status(StatusCode::BAD_REQUEST, "more than one Host header"),
    };
    let allowed = |h: &str| {
        s.config
            .allowed_hosts
            .iter()
            .any(|a| a.eq_ignore_ascii_case(h))
    };
    if !allowed(host) {
        return status(StatusCode::FORBIDDEN, &format!("host `{host}` not allowed"));
    }
    if let Some(target) = uri.authority()
        && !allowed(target.as_str())
    {
        return status(
            StatusCode::FORBIDDEN,
            &format!("request target host `{target}` not allowed"),
        );
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|o| {
            s.config
                .allowed_origins
                .iter()
                .any(|a| a.eq_ignore_ascii_case(o))
        });
        if !allowed {
            return status(StatusCode::FORBIDDEN, "origin not allowed");
        }
    }
    if method != Method::POST {
        // Stateless server: no SSE stream to GET, no session to DELETE.
        let mut r = status(StatusCode::METHOD_NOT_ALLOWED, "use POST");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let claims = match s.authenticate(&headers) {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(reason = %e, "mcp request refused: invalid task token");
            return s.unauthorized(&e);
        }
    };
    let tenant = crate::logging::LogTenant(claims.tenant_id.clone());
    let mut response = authenticated(&s, &claims, &headers, body).await;
    response.extensions_mut().insert(tenant);
    response
}

/// An MCP request from a task-token holder.
/// The server's span of one `tools/call`, under the caller's span: the request's
/// (HTTP `traceparent`), or the one named in `params._meta.traceparent`.
fn call_span(id: &Value, params: &serde_json::Map<String, Value>) -> tracing::Span {
    let tool = params.get("name").and_then(Value::as_str).unwrap_or("");
    let span = tracing::info_span!(
        "tools/call",
        otel.name = format!("tools/call {tool}"),
        otel.kind = "server",
        mcp.method.name = "tools/call",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        jsonrpc.request.id = %id,
    );
    if let Some(parent) = params
        .get("_meta")
        .and_then(|m| m.get("traceparent"))
        .and_then(Value::as_str)
    {
        crate::traces::set_parent(&span, parent);
    }
    span
}

async fn authenticated<B: ContractBundle, D: ToolDispatch + 'static>(
    s: &McpServer<B, D>,
    claims: &TaskClaims,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Response {
    if !accepts_both(headers) {
        return status(
            StatusCode::NOT_ACCEPTABLE,
            "Accept must list application/json and text/event-stream",
        );
    }
    if !crate::http::is_json(headers) {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    // Read last, after every check that needs no body, within a bound and a time.
    let body = match crate::http::read_body(body, s.config.max_body_bytes, s.config.body_read).await
    {
        Ok(b) => b,
        Err(crate::http::BodyError::TooLarge) => {
            return status(StatusCode::PAYLOAD_TOO_LARGE, "the body is too large");
        }
        Err(crate::http::BodyError::TooSlow) => {
            return status(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive in time",
            );
        }
        Err(crate::http::BodyError::Broken) => {
            return status(StatusCode::BAD_REQUEST, "the body could not be read");
        }
    };
    let message = match jsonrpc::parse(&body) {
        Ok(m) => m,
        Err(e) => {
            return rpc_status(
                StatusCode::BAD_REQUEST,
                jsonrpc::error(&Value::Null, e.code(), &e.to_string()),
            );
        }
    };
    let (id, method, params) = match message {
        Incoming::Notification { .. } | Incoming::Response => {
            return StatusCode::ACCEPTED.into_response();
        }
        Incoming::Request { id, method, params } => (id, method, params),
    };
    if era::is_stateless(headers, &method, &params) {
        return stateless(s, claims, headers, id, &method, params).await;
    }
    let result = match method.as_str() {
        "initialize" => {
            let requested = params
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or(LATEST_VERSION);
            let version = if HANDSHAKE_VERSIONS.contains(&requested) {
                requested
            } else {
                LATEST_VERSION
            };
            Ok(Reply::Plain(json!({
                "protocolVersion": version,
                "capabilities": { "tools": { "listChanged": false } },
                "serverInfo": server_info(),
                "instructions": instructions::<B>(),
            })))
        }
        "ping" => Ok(Reply::Plain(json!({}))),
        "tools/list" => s.list(claims, &params).map(Reply::Plain),
        "tools/call" => match call(s, claims, &id, params).await {
            Ok(v) => Ok(Reply::Tool(v)),
            Err(CallFailure::Scope(scope)) => return s.insufficient_scope(&scope),
            Err(CallFailure::Protocol(code, message)) => Err((code, message)),
        },
        other => Err((
            jsonrpc::METHOD_NOT_FOUND,
            format!("method `{other}` not found"),
        )),
    };
    answer(&id, result)
}

/// A request under the stateless (2026-07-28) rules: the envelope is checked before
/// anything else, every result says `resultType`, cacheable ones say for how long
/// and for whom, and a method this era does not have is HTTP 404.
async fn stateless<B: ContractBundle, D: ToolDispatch + 'static>(
    s: &McpServer<B, D>,
    claims: &TaskClaims,
    headers: &HeaderMap,
    id: Value,
    method: &str,
    params: Map<String, Value>,
) -> Response {
    if let Err(refusal) = era::check(headers, method, &params) {
        return rpc_status(refusal.status, refusal.body(&id));
    }
    let complete = |mut result: Value| {
        result["resultType"] = json!("complete");
        result
    };
    let result = match method {
        "server/discover" => Ok(Reply::Plain(json!({
            "supportedVersions": era::all_versions().collect::<Vec<_>>(),
            "capabilities": { "tools": { "listChanged": false } },
            "instructions": instructions::<B>(),
            "resultType": "complete",
            // The same for every caller: nothing in it depends on the token.
            "ttlMs": s.config.cache_ttl_ms,
            "cacheScope": "public",
            "_meta": { era::SERVER_INFO_KEY: server_info() },
        }))),
        "tools/list" => s.list(claims, &params).map(|r| {
            let mut r = complete(r);
            // What a token sees depends on its scopes and tenant.
            r["ttlMs"] = json!(s.config.cache_ttl_ms);
            r["cacheScope"] = json!("private");
            Reply::Plain(r)
        }),
        "tools/call" => match call(s, claims, &id, params).await {
            Ok(v) => Ok(Reply::Tool(v.complete())),
            Err(CallFailure::Scope(scope)) => return s.insufficient_scope(&scope),
            Err(CallFailure::Protocol(code, message)) => Err((code, message)),
        },
        other => {
            return rpc_status(
                StatusCode::NOT_FOUND,
                jsonrpc::error(
                    &id,
                    jsonrpc::METHOD_NOT_FOUND,
                    &format!("method `{other}` not found"),
                ),
            );
        }
    };
    answer(&id, result)
}

/// What a request is answered with: most results are built as a `Value`; a tool's
/// is written as it was serialized (see [`ToolResult`]).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Reply {
    Plain(Value),
    Tool(ToolResult),
}

/// A result or a JSON-RPC error, as the response to request `id`.
fn answer(id: &Value, result: Result<Reply, (i64, String)>) -> Response {
    match result {
        Ok(r) => axum::Json(jsonrpc::success(id, r)).into_response(),
        Err((code, message)) => axum::Json(jsonrpc::error(id, code, &message)).into_response(),
    }
}

async fn call<B: ContractBundle, D: ToolDispatch + 'static>(
    s: &McpServer<B, D>,
    claims: &TaskClaims,
    id: &Value,
    params: Map<String, Value>,
) -> Result<ToolResult, CallFailure> {
    let span = call_span(id, &params);
    s.call(claims, params).instrument(span).await
}

fn server_info() -> Value {
    json!({ "name": "caseops-tools", "title": "CaseOps tools", "version": env!("CARGO_PKG_VERSION") })
}

fn instructions<B: ContractBundle>() -> String {
    format!(
        "Tools of agent `{}`; every call is authorized against the task token.",
        B::AGENT
    )
}

/// Whether this call is the action a person approved: the task token names the
/// approved action's fingerprint, and the call must be exactly that action.
fn approval_of(
    claims: &TaskClaims,
    tool: &caseops_runtime::ToolContract,
    arguments: &Value,
) -> caseops_runtime::authorization::Approval {
    use caseops_runtime::authorization::Approval;
    match &claims.approved_action {
        Some(fp)
            if *fp == caseops_runtime::fingerprint::action_fingerprint(tool.name, arguments) =>
        {
            Approval::Approved
        }
        _ => Approval::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    #[test]
    fn both_media_types_are_found_in_any_case_with_parameters_and_across_headers() {
        assert!(accepts_both(&accept(&[
            "application/json, text/event-stream"
        ])));
        assert!(accepts_both(&accept(&[
            "Application/JSON;q=0.9 ,TEXT/Event-Stream; charset=utf-8"
        ])));
        assert!(accepts_both(&accept(&[
            "application/json",
            "text/event-stream"
        ])));
    }

    #[test]
    fn one_media_type_alone_or_a_lookalike_is_not_enough() {
        assert!(!accepts_both(&accept(&[])));
        assert!(!accepts_both(&accept(&["application/json"])));
        assert!(!accepts_both(&accept(&["text/event-stream, */*"])));
        assert!(!accepts_both(&accept(&[
            "application/jsonx, text/event-stream"
        ])));
        assert!(!accepts_both(&accept(&[
            "application/json text/event-stream"
        ])));
    }
}
