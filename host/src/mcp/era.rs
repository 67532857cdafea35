//! Which protocol era a request speaks, and the stateless (2026-07-28) envelope
//! rules: the per-request `_meta`, the standard headers that must mirror the body,
//! and the version. One `/mcp` serves both eras; a handshake-era request (2025-11-25
//! and before) never reaches these checks.

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::jsonrpc;

/// Stateless versions: no `initialize`, every request carries `_meta`.
pub const STATELESS_VERSIONS: &[&str] = &["2026-07-28"];
/// Versions negotiated by the `initialize` handshake, newest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Every version this server speaks, newest first, as `server/discover` lists them.
pub fn all_versions() -> impl Iterator<Item = &'static str> {
    STATELESS_VERSIONS.iter().chain(HANDSHAKE_VERSIONS).copied()
}

pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// The body and the standard headers disagree, or a required header is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// The request's protocol version is not one this server serves statelessly.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// A request the stateless rules refuse: its HTTP status and JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl Refusal {
    fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The JSON-RPC error response for request `id`.
    pub fn body(&self, id: &Value) -> Value {
        let mut body = jsonrpc::error(id, self.code, &self.message);
        if let Some(data) = &self.data {
            body["error"]["data"] = data.clone();
        }
        body
    }
}

/// Whether a request is served under the stateless rules: it names a version in
/// its `_meta` or its `MCP-Protocol-Version` header that is not a handshake one, or
/// it asks for `server/discover`, which only the stateless era has. Anything else
/// (a 2025-11-25 client, or one before headers existed) keeps the handshake rules.
pub fn is_stateless(headers: &HeaderMap, method: &str, params: &Map<String, Value>) -> bool {
    if method == "server/discover" {
        return true;
    }
    let meta = params.get("_meta").and_then(Value::as_object);
    if let Some(v) = meta.and_then(|m| m.get(PROTOCOL_VERSION_KEY)) {
        return !v.as_str().is_some_and(|v| HANDSHAKE_VERSIONS.contains(&v));
    }
    if meta.is_some_and(|m| m.contains_key(CLIENT_CAPABILITIES_KEY)) {
        return true;
    }
    headers
        .get("mcp-protocol-version")
        .is_some_and(|v| !v.to_str().is_ok_and(|v| HANDSHAKE_VERSIONS.contains(&v)))
}

/// Checks a stateless request's envelope and returns its protocol version. In the
/// order the rules depend on: the `_meta` fields (400, `-32602`), then the headers
/// against the body (400, `-32020`), then whether the version is served (400,
/// `-32022` listing the versions that are).
pub fn check(
    headers: &HeaderMap,
    method: &str,
    params: &Map<String, Value>,
) -> Result<String, Refusal> {
    let invalid = |m: &str| Refusal::new(StatusCode::BAD_REQUEST, jsonrpc::INVALID_PARAMS, m);
    let Some(meta) = params.get("_meta").and_then(Value::as_object) else {
        return Err(invalid(
            "`params._meta` is required: it carries the protocol version and client capabilities",
        ));
    };
    let Some(version) = meta.get(PROTOCOL_VERSION_KEY).and_then(Value::as_str) else {
        return Err(invalid(&format!(
            "`params._meta` must name `{PROTOCOL_VERSION_KEY}`"
        )));
    };
    if !meta
        .get(CLIENT_CAPABILITIES_KEY)
        .is_some_and(Value::is_object)
    {
        return Err(invalid(&format!(
            "`params._meta` must carry `{CLIENT_CAPABILITIES_KEY}` as an object"
        )));
    }
    let mismatch = |m: String| Refusal::new(StatusCode::BAD_REQUEST, HEADER_MISMATCH, m);
    match single(headers, "mcp-protocol-version") {
        Some(h) if h == version => {}
        Some(h) => {
            return Err(mismatch(format!(
                "the MCP-Protocol-Version header `{h}` differs from `_meta` `{version}`"
            )));
        }
        None => {
            return Err(mismatch(
                "a single MCP-Protocol-Version header is required".into(),
            ));
        }
    }
    match single(headers, "mcp-method") {
        Some(h) if h == method => {}
        Some(h) => {
            return Err(mismatch(format!(
                "the Mcp-Method header `{h}` differs from the method `{method}`"
            )));
        }
        None => return Err(mismatch("a single Mcp-Method header is required".into())),
    }
    if let Some(field) = name_field(method) {
        let body_name = params.get(field).and_then(Value::as_str);
        let header_name = single(headers, "mcp-name").map(|h| decode(&h));
        match (header_name, body_name) {
            (Some(Some(h)), Some(b)) if h == b => {}
            (None, _) => {
                return Err(mismatch(format!(
                    "a single Mcp-Name header is required for `{method}`"
                )));
            }
            (Some(None), _) => {
                return Err(mismatch("the Mcp-Name header is not valid base64".into()));
            }
            (Some(Some(h)), _) => {
                return Err(mismatch(format!(
                    "the Mcp-Name header `{h}` differs from `params.{field}`"
                )));
            }
        }
    }
    if !STATELESS_VERSIONS.contains(&version) {
        let mut refusal = Refusal::new(
            StatusCode::BAD_REQUEST,
            UNSUPPORTED_PROTOCOL_VERSION,
            format!("protocol version `{version}` is not supported"),
        );
        refusal.data = Some(json!({ "supported": STATELESS_VERSIONS, "requested": version }));
        return Err(refusal);
    }
    Ok(version.to_string())
}

/// Which era a client speaks to a tool server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Preference {
    /// `server/discover` first; `initialize` when the server does not have it.
    #[default]
    Auto,
    /// 2026-07-28 only: a server without `server/discover` is an error.
    Stateless,
    /// 2025-11-25 only: the `initialize` handshake, as before 2026-07-28.
    Handshake,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is no MCP era: use `auto`, `2026-07-28` or `2025-11-25`")]
pub struct UnknownEra(String);

impl std::str::FromStr for Preference {
    type Err = UnknownEra;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "2026-07-28" | "stateless" => Ok(Self::Stateless),
            "2025-11-25" | "handshake" => Ok(Self::Handshake),
            other => Err(UnknownEra(other.to_string())),
        }
    }
}

impl std::fmt::Display for Preference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Stateless => "2026-07-28",
            Self::Handshake => "2025-11-25",
        })
    }
}

/// The `_meta` envelope a stateless client puts on every request.
pub fn request_meta(version: &str, client_name: &str) -> Value {
    json!({
        PROTOCOL_VERSION_KEY: version,
        CLIENT_CAPABILITIES_KEY: {},
        CLIENT_INFO_KEY: { "name": client_name, "version": env!("CARGO_PKG_VERSION") },
    })
}

/// The standard headers of a stateless request for `method` with `params`.
pub fn request_headers(version: &str, method: &str, params: &Value) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("mcp-protocol-version", version.to_string()),
        ("mcp-method", method.to_string()),
    ];
    if let Some(name) = name_field(method)
        .and_then(|f| params.get(f))
        .and_then(Value::as_str)
    {
        headers.push(("mcp-name", encode(name)));
    }
    headers
}

/// The body field an `Mcp-Name` header mirrors, for the methods that have one.
fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// A header's value when it occurs exactly once and is visible ASCII.
fn single(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok().map(|s| s.trim().to_string())
}

/// A header value as sent: plain, or `=?base64?…?=` for what ASCII cannot carry.
fn decode(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_string()),
    }
}

/// How a client writes a name into `Mcp-Name`: as is when it is safe ASCII, else
/// base64 of its UTF-8.
pub fn encode(value: &str) -> String {
    let plain = !value.is_empty()
        && value.trim() == value
        && value.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    if plain {
        value.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn params(extra: Value) -> Map<String, Value> {
        let mut p = json!({"_meta": {
            PROTOCOL_VERSION_KEY: "2026-07-28",
            CLIENT_CAPABILITIES_KEY: {},
        }});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p.as_object().unwrap().clone()
    }

    #[test]
    fn a_handshake_request_is_not_stateless_and_a_meta_or_discover_one_is() {
        let none = Map::new();
        assert!(!is_stateless(&HeaderMap::new(), "tools/list", &none));
        assert!(!is_stateless(
            &headers(&[("mcp-protocol-version", "2025-11-25")]),
            "tools/list",
            &none
        ));
        assert!(is_stateless(&HeaderMap::new(), "server/discover", &none));
        assert!(is_stateless(
            &HeaderMap::new(),
            "tools/list",
            &params(json!({}))
        ));
        assert!(is_stateless(
            &headers(&[("mcp-protocol-version", "2099-01-01")]),
            "ping",
            &none
        ));
    }

    #[test]
    fn the_headers_must_mirror_the_body() {
        let call = params(json!({"name": "tool_a"}));
        let good = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "tool_a"),
        ];
        assert_eq!(
            check(&headers(&good), "tools/call", &call),
            Ok("2026-07-28".into())
        );
        for bad in [
            vec![good[0], good[1]],
            vec![good[0], ("mcp-method", "tools/list"), good[2]],
            vec![good[0], good[1], ("mcp-name", "tool_b")],
            vec![("mcp-protocol-version", "2025-11-25"), good[1], good[2]],
            vec![good[0], good[1], good[2], ("mcp-name", "tool_a")],
        ] {
            let refused = check(&headers(&bad), "tools/call", &call).unwrap_err();
            assert_eq!(
                (refused.status, refused.code),
                (StatusCode::BAD_REQUEST, HEADER_MISMATCH),
                "{bad:?}"
            );
        }
        let encoded = [good[0], good[1], ("mcp-name", "=?base64?dG9vbF9h?=")];
        assert!(check(&headers(&encoded), "tools/call", &call).is_ok());
    }

    #[test]
    fn a_missing_meta_field_is_invalid_params_and_an_unknown_version_lists_the_served_ones() {
        let h = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ]);
        for p in [
            json!({}),
            json!({"_meta": {CLIENT_CAPABILITIES_KEY: {}}}),
            json!({"_meta": {PROTOCOL_VERSION_KEY: "2026-07-28"}}),
        ] {
            let refused = check(&h, "tools/list", p.as_object().unwrap()).unwrap_err();
            assert_eq!(refused.code, jsonrpc::INVALID_PARAMS, "{p}");
        }
        let h = headers(&[("mcp-protocol-version", "v9"), ("mcp-method", "tools/list")]);
        let p = json!({"_meta": {PROTOCOL_VERSION_KEY: "v9", CLIENT_CAPABILITIES_KEY: {}}});
        let refused = check(&h, "tools/list", p.as_object().unwrap()).unwrap_err();
        assert_eq!(refused.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(
            refused.body(&json!(3))["error"]["data"],
            json!({"supported": ["2026-07-28"], "requested": "v9"})
        );
    }

    #[test]
    fn names_ascii_cannot_carry_are_base64_both_ways() {
        for name in ["tool_a", " padded", "naïve", ""] {
            assert_eq!(decode(&encode(name)).as_deref(), Some(name));
        }
        assert_eq!(encode("tool_a"), "tool_a");
    }
}
