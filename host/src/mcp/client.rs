//! The MCP client executor: the runtime's tool calls go to an MCP server over
//! Streamable HTTP, or as the same requests to the router of a server in this
//! process (see `transport`). One keep-alive HTTP client per server, a fresh task token per
//! run, JSON or SSE responses. It prefers the stateless era (2026-07-28):
//! `server/discover` once, reused for the `ttlMs` the server grants, then a `_meta`
//! envelope and standard headers on every request; a server without
//! `server/discover` gets the 2025-11-25 `initialize` handshake instead. Either is
//! negotiated again after a protocol error.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use caseops_runtime::{CallContext, ContractBundle, ExecError, Executor, ToolCall};
use serde_json::{Value, json};

use super::era::{self, Preference};
use super::jsonrpc;
use super::server::LATEST_VERSION;
use super::token::TokenIssuer;
use super::transport::{Answer, Lost, Transport};

/// Why the server is not ready to serve the compiled tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadinessError {
    #[error("mcp server unreachable: {0}")]
    Unreachable(String),
    /// It answered, but refused us: the reason is the server's, the fix is in
    /// the deployment (see [`ReadinessError::hint`]).
    #[error(
        "the mcp server at `{url}` refused the api: {reason}; {}",
        hint(reason, url)
    )]
    Refused { url: String, reason: String },
    #[error("tool `{tool}` differs from the compiled listing: {difference}")]
    Mismatch { tool: String, difference: String },
}

/// A URL the in-process transport cannot address a request to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{url}` cannot name the in-process mcp server: {reason}")]
pub struct InProcessUrlError {
    pub url: String,
    pub reason: String,
}

/// What to change when the tool server refuses the API, by its stated reason.
fn hint(reason: &str, url: &str) -> String {
    if reason.contains("audience") {
        format!(
            "the mcp server must be known by the URL the api uses: set its --mcp-public-url to `{url}`"
        )
    } else if reason.contains("issuer") {
        "give the api and the mcp server the same --token-issuer (CASEOPS_TOKEN_ISSUER)".into()
    } else if reason.contains("signature") || reason.contains("key") {
        "give the api and the mcp server the same CASEOPS_SIGNING_KEY".into()
    } else if reason.contains("host") || reason.contains("origin") {
        format!(
            "set the mcp server's --mcp-public-url to `{url}`, or add this host to its --allowed-hosts"
        )
    } else {
        "check that --mcp-url names this deployment's mcp server".into()
    }
}

pub struct McpClient<B: ContractBundle> {
    transport: Transport,
    url: String,
    issuer: TokenIssuer,
    preference: Preference,
    /// What was agreed with the server; `None` until negotiated (or after a
    /// protocol error, so the next call negotiates again).
    session: tokio::sync::Mutex<Option<Session>>,
    next_id: AtomicU64,
    /// One token per task (run), reused while it has a minute left.
    tokens: Mutex<HashMap<String, (String, u64)>>,
    _bundle: PhantomData<B>,
}

/// What the client and the server agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Session {
    /// Stateless: the version `server/discover` offered, good until `fresh_until`.
    Stateless {
        version: String,
        fresh_until: Instant,
    },
    /// After `initialize`: the negotiated version.
    Handshake { version: String },
}

impl Session {
    fn version(&self) -> &str {
        match self {
            Session::Stateless { version, .. } | Session::Handshake { version } => version,
        }
    }
}

const CLIENT_NAME: &str = "caseops-runtime";

/// Tokens kept for reuse at most (runs in flight at once are far fewer).
const TOKEN_CACHE_LIMIT: usize = 1024;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The code of a request that went out and got no answer (the connection was cut, or
/// a gateway gave up on the server).
const NO_ANSWER: &str = "MCP_NO_ANSWER";

fn transient(message: impl Into<String>) -> ExecError {
    ExecError::Transient {
        code: "MCP_UNAVAILABLE".into(),
        message: message.into(),
    }
}

impl<B: ContractBundle> McpClient<B> {
    pub fn new(url: impl Into<String>, issuer: TokenIssuer) -> Self {
        Self::with_transport(Transport::http(), url.into(), issuer)
    }

    /// A client of the tool server in this process: its requests go to `router`
    /// (the server's [`McpServer::router`](super::server::McpServer::router)) as
    /// requests for `url` would arrive from the network, without a socket.
    pub fn in_process(
        url: impl Into<String>,
        issuer: TokenIssuer,
        router: axum::Router,
    ) -> Result<Self, InProcessUrlError> {
        let url = url.into();
        let transport = Transport::in_process(router, &url)?;
        Ok(Self::with_transport(transport, url, issuer))
    }

    fn with_transport(transport: Transport, url: String, issuer: TokenIssuer) -> Self {
        Self {
            transport,
            url,
            issuer,
            preference: Preference::Auto,
            session: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
            tokens: Mutex::new(HashMap::new()),
            _bundle: PhantomData,
        }
    }

    /// Which era to speak (default: [`Preference::Auto`]).
    pub fn with_preference(mut self, preference: Preference) -> Self {
        self.preference = preference;
        self
    }

    /// The protocol version in use, once negotiated.
    pub async fn protocol_version(&self) -> Option<String> {
        self.session
            .lock()
            .await
            .as_ref()
            .map(|s| s.version().to_string())
    }

    /// The task token for a call: a cached one with a minute left, else a fresh one.
    pub fn token_for(&self, ctx: &CallContext) -> Result<String, ExecError> {
        if ctx.approved_action.is_some() {
            // Good for the one approved call only: never cached for the task.
            return self.mint(ctx);
        }
        let mut tokens = self.tokens.lock().expect("token cache lock");
        if let Some((token, exp)) = tokens.get(&ctx.task_id)
            && *exp > now() + 60
        {
            return Ok(token.clone());
        }
        let (token, exp) = self.signed(ctx)?;
        // One entry per run ever driven would grow without end: past a bound, drop
        // what could not be reused anyway, and everything if that is not enough.
        if tokens.len() >= TOKEN_CACHE_LIMIT {
            let fresh = now() + 60;
            tokens.retain(|_, (_, exp)| *exp > fresh);
            if tokens.len() >= TOKEN_CACHE_LIMIT {
                tokens.clear();
            }
        }
        tokens.insert(ctx.task_id.clone(), (token.clone(), exp));
        Ok(token)
    }

    fn mint(&self, ctx: &CallContext) -> Result<String, ExecError> {
        self.signed(ctx).map(|(token, _)| token)
    }

    /// A fresh token for the call's task, and its expiry.
    fn signed(&self, ctx: &CallContext) -> Result<(String, u64), ExecError> {
        let mut claims = self.issuer.claims(
            &ctx.subject,
            &ctx.tenant_id,
            &ctx.task_id,
            &ctx.resource_id,
            &ctx.scopes,
        );
        if !ctx.stage.is_empty() {
            claims.stage = Some(ctx.stage.clone());
        }
        claims.approved_action = ctx.approved_action.clone();
        let token = self
            .issuer
            .sign(&claims)
            .map_err(|e| ExecError::Authorization {
                code: "TOKEN_ISSUE_FAILED".into(),
                message: e.to_string(),
            })?;
        Ok((token, claims.exp))
    }

    /// Task tokens held for reuse (bounded by `TOKEN_CACHE_LIMIT`).
    pub fn cached_tokens(&self) -> usize {
        self.tokens.lock().expect("token cache lock").len()
    }

    /// A token with every scope of the bundle, for readiness checks.
    pub fn readiness_token(&self) -> Result<String, ExecError> {
        let scopes = B::required_scopes()
            .into_iter()
            .map(str::to_string)
            .collect();
        let ctx = CallContext {
            tenant_id: "caseops-readiness".into(),
            task_id: "caseops-readiness".into(),
            subject: "caseops-readiness".into(),
            resource_id: "none".into(),
            scopes,
            ..Default::default()
        };
        self.token_for(&ctx)
    }

    /// The response message, read as `R`: a `Value`, or only the members a caller
    /// uses (see [`McpClient::request_as`]).
    async fn post<R: serde::de::DeserializeOwned>(
        &self,
        token: &str,
        headers: &[(&'static str, String)],
        body: &Value,
    ) -> Result<Option<R>, ExecError> {
        // Refused before anything was sent: safe to retry. Lost after the request went
        // out: the server may have acted (for a write, an unknown effect).
        let answer = self
            .transport
            .post(&self.url, token, headers, crate::store::json_text(body))
            .await
            .map_err(|lost| match lost {
                Lost::NotSent(message) => transient(message),
                Lost::NoAnswer(message) => ExecError::Transient {
                    code: NO_ANSWER.into(),
                    message,
                },
            })?;
        let Answer {
            status,
            is_sse,
            text,
        } = answer;
        let message = match status.as_u16() {
            202 => return Ok(None),
            200 if is_sse => sse_message(&text).ok_or_else(not_a_message)?,
            200 => text,
            // The body says why; the class says who can fix it. A refused token or
            // host is the deployment's doing (keys, issuer, public URL), not the
            // run's; only an `insufficient_scope` answer is about the call.
            401 => {
                let why = refusal(&text, "error_description");
                return Err(ExecError::Authorization {
                    code: "TOKEN_REJECTED".into(),
                    message: format!("the mcp server refused the task token: {why}"),
                });
            }
            403 if refusal(&text, "error") == "insufficient_scope" => {
                return Err(ExecError::Authorization {
                    code: "INSUFFICIENT_SCOPE".into(),
                    message: "the task token lacks the tool's scope".into(),
                });
            }
            403 => {
                let why = refusal(&text, "error");
                return Err(ExecError::Authorization {
                    code: "MCP_REQUEST_REFUSED".into(),
                    message: format!("the mcp server refused the request: {why}"),
                });
            }
            // The stateless era answers some protocol errors with these statuses.
            400 | 404 if jsonrpc_error(&text).is_some() => text,
            502..=504 => {
                return Err(ExecError::Transient {
                    code: NO_ANSWER.into(),
                    message: format!("HTTP {status}"),
                });
            }
            _ => return Err(ExecError::Protocol(format!("HTTP {status}"))),
        };
        serde_json::from_str(&message)
            .map(Some)
            .map_err(|_| not_a_message())
    }

    /// The session to send a request in: the current one while it is fresh, else a
    /// new one negotiated in the preferred era.
    async fn negotiated(&self, token: &str) -> Result<Session, ExecError> {
        let mut session = self.session.lock().await;
        match session.as_ref() {
            Some(s @ Session::Handshake { .. }) => return Ok(s.clone()),
            Some(s @ Session::Stateless { fresh_until, .. }) if Instant::now() < *fresh_until => {
                return Ok(s.clone());
            }
            _ => {}
        }
        let fresh = match self.preference {
            Preference::Handshake => self.initialize(token).await?,
            Preference::Stateless => self.discover(token).await?.ok_or_else(|| {
                ExecError::Protocol(format!(
                    "the mcp server at `{}` does not speak 2026-07-28 (no `server/discover`)",
                    self.url
                ))
            })?,
            Preference::Auto => match self.discover(token).await? {
                Some(s) => s,
                None => self.initialize(token).await?,
            },
        };
        *session = Some(fresh.clone());
        Ok(fresh)
    }

    /// `server/discover`: a stateless session, or `None` when the server does not
    /// have the method or does not offer our version (a 2025-11-25 server).
    async fn discover(&self, token: &str) -> Result<Option<Session>, ExecError> {
        let version = era::STATELESS_VERSIONS[0];
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = json!({ "_meta": era::request_meta(version, CLIENT_NAME) });
        let headers = era::request_headers(version, "server/discover", &params);
        let body =
            json!({ "jsonrpc": "2.0", "id": id, "method": "server/discover", "params": params });
        let reply: Value = match self.post(token, &headers, &body).await {
            Ok(Some(reply)) => reply,
            Ok(None) => return Ok(None),
            // A status without a JSON-RPC answer: a server that routes by session.
            Err(ExecError::Protocol(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let result = &reply["result"];
        let offered = result["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v == version));
        if !offered {
            return Ok(None);
        }
        let ttl = result["ttlMs"].as_u64().unwrap_or(0);
        Ok(Some(Session::Stateless {
            version: version.to_string(),
            fresh_until: Instant::now() + Duration::from_millis(ttl),
        }))
    }

    async fn initialize(&self, token: &str) -> Result<Session, ExecError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let init = json!({
            "jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {
                "protocolVersion": LATEST_VERSION,
                "capabilities": {},
                "clientInfo": { "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") },
            },
        });
        let reply: Value = self
            .post(token, &[], &init)
            .await?
            .ok_or_else(|| ExecError::Protocol("initialize got no response".into()))?;
        let negotiated = reply["result"]["protocolVersion"]
            .as_str()
            .ok_or_else(|| ExecError::Protocol("initialize returned no protocol version".into()))?
            .to_string();
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        self.post::<Value>(
            token,
            &[("mcp-protocol-version", negotiated.clone())],
            &note,
        )
        .await?;
        Ok(Session::Handshake {
            version: negotiated,
        })
    }

    /// One request; a JSON-RPC error ends the session so the next call negotiates.
    pub async fn request(
        &self,
        token: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, ExecError> {
        self.request_as(token, method, params).await
    }

    /// [`McpClient::request`], its result read as `R`: only the members `R` names
    /// are built (a tool result's text copy of itself is skipped, not decoded).
    async fn request_as<R: Outcome>(
        &self,
        token: &str,
        method: &str,
        mut params: Value,
    ) -> Result<R, ExecError> {
        let session = self.negotiated(token).await?;
        let headers = match &session {
            Session::Stateless { version, .. } => {
                let envelope = era::request_meta(version, CLIENT_NAME);
                match params["_meta"].as_object_mut() {
                    Some(meta) => meta.extend(envelope.as_object().cloned().unwrap_or_default()),
                    None => params["_meta"] = envelope,
                }
                era::request_headers(version, method, &params)
            }
            Session::Handshake { version } => vec![("mcp-protocol-version", version.clone())],
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = jsonrpc::object([
            ("jsonrpc", Value::from("2.0")),
            ("id", Value::from(id)),
            ("method", Value::from(method)),
            ("params", params),
        ]);
        let reply: Message<R> = self
            .post(token, &headers, &body)
            .await?
            .ok_or_else(|| ExecError::Protocol("a request got no response".into()))?;
        if let Some(err) = reply.error {
            *self.session.lock().await = None;
            return Err(ExecError::Protocol(format!(
                "{} ({})",
                err["message"].as_str().unwrap_or("error"),
                err["code"]
            )));
        }
        let result = reply
            .result
            .ok_or_else(|| ExecError::Protocol("a response without result".into()))?;
        // Only a complete result is one; an absent type is a handshake-era result.
        match result.result_type() {
            None | Some("complete") => Ok(result),
            Some(other) => Err(ExecError::Protocol(format!(
                "the server answered `{method}` with a `{other}` result, which the runtime does not handle"
            ))),
        }
    }

    /// Every tool the server lists for `token`, following pagination.
    pub async fn list_tools(&self, token: &str) -> Result<Vec<Value>, ExecError> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request(token, "tools/list", params).await?;
            out.extend(page["tools"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return Ok(out),
            }
        }
        Err(ExecError::Protocol(
            "tools/list pagination does not end".into(),
        ))
    }

    /// Compares the server's listing with the compiled one (names and schemas).
    pub async fn check_listing(&self) -> Result<(), ReadinessError> {
        let token = self
            .readiness_token()
            .map_err(|e| ReadinessError::Unreachable(e.to_string()))?;
        let served = self.list_tools(&token).await.map_err(|e| match e {
            ExecError::Authorization { code, message }
                if code == "TOKEN_REJECTED" || code == "MCP_REQUEST_REFUSED" =>
            {
                ReadinessError::Refused {
                    url: self.url.clone(),
                    reason: message,
                }
            }
            e => ReadinessError::Unreachable(e.to_string()),
        })?;
        let compiled: Value = serde_json::from_str(B::MCP_TOOLS).unwrap_or(Value::Null);
        let compiled = compiled["tools"].as_array().cloned().unwrap_or_default();
        compare_listings(&compiled, &served)
    }
}

/// `field` of a JSON error body, or the body itself (bounded) when it is not one.
fn refusal(body: &str, field: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(v) if v[field].is_string() => v[field].as_str().unwrap_or_default().to_string(),
        _ => body.chars().take(200).collect(),
    }
}

/// A JSON-RPC error message, when `body` is one.
fn jsonrpc_error(body: &str) -> Option<Value> {
    serde_json::from_str::<Value>(body)
        .ok()
        .filter(|v| v.get("error").is_some_and(Value::is_object))
}

/// The text of the JSON-RPC response in an SSE body: the `data:` lines of the
/// first event that is one (notifications before it are skipped), else of the last.
fn sse_message(text: &str) -> Option<String> {
    let is_json = |data: &str| serde_json::from_str::<serde::de::IgnoredAny>(data).is_ok();
    let mut data = String::new();
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("data:") {
            data.push_str(d.trim_start());
        } else if line.is_empty() && !data.is_empty() {
            if let Ok(v) = serde_json::from_str::<Value>(&data)
                && (v.get("result").is_some() || v.get("error").is_some())
            {
                return Some(data);
            }
            data.clear();
        }
    }
    is_json(&data).then_some(data)
}

/// Names, input and output schemas must match exactly.
pub fn compare_listings(compiled: &[Value], served: &[Value]) -> Result<(), ReadinessError> {
    for c in compiled {
        let name = c["name"].as_str().unwrap_or_default();
        let Some(s) = served.iter().find(|s| s["name"] == c["name"]) else {
            return Err(ReadinessError::Mismatch {
                tool: name.into(),
                difference: "not listed by the server".into(),
            });
        };
        for key in ["inputSchema", "outputSchema"] {
            if s[key] != c[key] {
                return Err(ReadinessError::Mismatch {
                    tool: name.into(),
                    difference: format!("`{key}` differs"),
                });
            }
        }
    }
    if let Some(extra) = served
        .iter()
        .find(|s| !compiled.iter().any(|c| c["name"] == s["name"]))
    {
        return Err(ReadinessError::Mismatch {
            tool: extra["name"].as_str().unwrap_or_default().into(),
            difference: "listed by the server but not compiled".into(),
        });
    }
    Ok(())
}

impl<B: ContractBundle> Executor for McpClient<B> {
    async fn execute(&self, call: &ToolCall) -> Result<Value, ExecError> {
        let token = self.token_for(&call.context)?;
        let mut params = jsonrpc::object([
            ("name", Value::from(call.tool.name)),
            ("arguments", call.arguments.clone()),
        ]);
        if let Some(parent) = crate::traces::traceparent() {
            params["_meta"] = json!({ "traceparent": parent });
        }
        let result: CallReply = match self.request_as(&token, "tools/call", params).await {
            Err(ExecError::Transient { code, message })
                if code == NO_ANSWER && call.tool.risk.is_write() =>
            {
                return Err(ExecError::UnknownEffect(message));
            }
            other => other?,
        };
        if result.is_error == Some(Value::Bool(true)) {
            let s = result.structured.as_ref().unwrap_or(&Value::Null);
            let code = s["code"].as_str().unwrap_or("TOOL_ERROR").to_string();
            let message = s["message"].as_str().unwrap_or("tool error").to_string();
            return Err(if B::DENY_REASONS.contains(&code.as_str()) {
                ExecError::Authorization { code, message }
            } else if code == "INVALID_ARGUMENTS" || code == "CONTRACT_VIOLATION" {
                ExecError::Contract { code, message }
            } else if s["details"]["transient"] == json!(true) {
                ExecError::Transient { code, message }
            } else {
                ExecError::Business { code, message }
            });
        }
        result
            .structured
            .ok_or_else(|| ExecError::Protocol("a tool result without structuredContent".into()))
    }
}

fn not_a_message() -> ExecError {
    ExecError::Protocol("the response is not a JSON-RPC message".into())
}

/// A JSON-RPC response as the client reads it; other members are skipped.
#[derive(serde::Deserialize)]
struct Message<R> {
    result: Option<R>,
    error: Option<Value>,
}

/// A result: whether it is complete is said the same way for every method.
trait Outcome: serde::de::DeserializeOwned {
    fn result_type(&self) -> Option<&str>;
}

impl Outcome for Value {
    fn result_type(&self) -> Option<&str> {
        self.get("resultType").and_then(Value::as_str)
    }
}

/// The members of a `tools/call` result the runtime uses. Its `content` (the same
/// result as text) is scanned past, not decoded into a string.
#[derive(serde::Deserialize)]
struct CallReply {
    #[serde(rename = "structuredContent")]
    structured: Option<Value>,
    #[serde(rename = "isError")]
    is_error: Option<Value>,
    #[serde(rename = "resultType")]
    result_type: Option<Value>,
}

impl Outcome for CallReply {
    fn result_type(&self) -> Option<&str> {
        self.result_type.as_ref().and_then(Value::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sse_body_yields_its_json_rpc_response() {
        let body = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\n data: \"result\":{}}\n\n";
        // the second event spans two data lines; the notification before it is skipped
        let body = body.replace("\n data:", "\ndata:");
        let message = sse_message(&body).map(|m| serde_json::from_str::<Value>(&m).unwrap());
        assert_eq!(
            message,
            Some(json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
        );
        assert_eq!(sse_message("data: not json\n\n"), None);
    }
}
