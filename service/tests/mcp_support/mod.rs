//! A real MCP server on a loopback port, and tokens for it.
#![allow(dead_code)]

use std::net::SocketAddr;

use caseops_generated::{Bundle, Dispatcher};
use caseops_host::mcp::server::{McpConfig, McpServer};
use caseops_host::mcp::token::{TaskClaims, TokenIssuer};
use caseops_service::domain::reference_data;
use caseops_service::tools::{CaseOpsTools, MemoryRepository};
use jsonwebtoken::{Algorithm, EncodingKey, Header};

pub const SECRET: &[u8] = b"test-signing-key-0123456789abcdef";
pub const ISSUER: &str = "http://127.0.0.1/caseops";
pub const ALL_SCOPES: &[&str] = &[
    "case:read",
    "policy:read",
    "document:read",
    "document:resolve",
];

pub struct TestServer {
    pub addr: SocketAddr,
    pub url: String,
    pub issuer: TokenIssuer,
    /// The server's router, for clients in the same process.
    pub router: axum::Router,
}

pub async fn start_with(configure: impl FnOnce(&mut McpConfig)) -> TestServer {
    caseops_host::install_tls_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = McpConfig::loopback(addr, ISSUER);
    configure(&mut config);
    let tools = CaseOpsTools {
        repo: MemoryRepository::new(reference_data()),
    };
    let server = McpServer::<Bundle, _>::new(config.clone(), SECRET, Dispatcher(tools)).unwrap();
    let router = server.router();
    let served = router.clone();
    tokio::spawn(async move { axum::serve(listener, served).await.unwrap() });
    let issuer =
        TokenIssuer::new(SECRET, ISSUER, config.resource_url.clone(), "case_id", 300).unwrap();
    TestServer {
        addr,
        url: config.resource_url,
        issuer,
        router,
    }
}

pub async fn start() -> TestServer {
    start_with(|_| {}).await
}

impl TestServer {
    pub fn claims(&self, tenant: &str, case: &str, scopes: &[&str]) -> TaskClaims {
        let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        self.issuer
            .claims("user:alice", tenant, "task-1", case, &scopes)
    }

    pub fn token(&self, tenant: &str, case: &str, scopes: &[&str]) -> String {
        self.issuer
            .sign(&self.claims(tenant, case, scopes))
            .unwrap()
    }

    pub fn demo_token(&self) -> String {
        self.token("tenant-demo", "C-102", ALL_SCOPES)
    }

    /// Signs arbitrary claims (for tokens the issuer would never produce).
    pub fn sign_raw(&self, claims: &serde_json::Value, secret: &[u8]) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap()
    }

    pub async fn post(&self, token: Option<&str>, body: serde_json::Value) -> reqwest::Response {
        self.post_with(token, body.to_string(), &[]).await
    }

    pub async fn post_with(
        &self,
        token: Option<&str>,
        body: String,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = reqwest::Client::new()
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }

    pub async fn call(
        &self,
        token: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> serde_json::Value {
        let r = self.post(Some(token), serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": args}})).await;
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }
}

impl TestServer {
    /// A stateless (2026-07-28) request: the `_meta` envelope and the standard
    /// headers as a conforming client sends them, then `extra` headers replacing any
    /// of the same name. Returns the status and the body.
    pub async fn stateless(
        &self,
        token: Option<&str>,
        method: &str,
        mut params: serde_json::Value,
        extra: &[(&str, &str)],
    ) -> (u16, serde_json::Value) {
        use caseops_host::mcp::era;
        if params.get("_meta").is_none() {
            params["_meta"] = era::request_meta("2026-07-28", "test");
        }
        let mut headers: Vec<(String, String)> =
            era::request_headers("2026-07-28", method, &params)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
        for (k, v) in extra {
            headers.retain(|(name, _)| !name.eq_ignore_ascii_case(k));
            headers.push((k.to_string(), v.to_string()));
        }
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 41, "method": method, "params": params});
        let r = self.post_with(token, body.to_string(), &headers).await;
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
