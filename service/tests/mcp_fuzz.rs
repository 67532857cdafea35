//! No input panics the JSON-RPC parser or the token verifier; a tool result outside
//! its output schema never leaves the server.

mod mcp_support;

use caseops_generated::Bundle;
use caseops_host::mcp::jsonrpc;
use caseops_host::mcp::server::{McpConfig, McpServer};
use caseops_host::mcp::token::TokenVerifier;
use caseops_runtime::{CallContext, ToolContract, ToolDispatch, ToolError};
use mcp_support::*;
use proptest::prelude::*;
use serde_json::{Value, json};

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_jsonrpc_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = jsonrpc::parse(&bytes);
    }

    #[test]
    fn the_jsonrpc_parser_never_panics_on_json_shaped_input(
        id in prop_oneof![Just(json!(null)), any::<i64>().prop_map(|i| json!(i)), ".{0,8}".prop_map(|s| json!(s)), Just(json!([1])), Just(json!(1.5))],
        method in prop_oneof![Just(json!("tools/call")), Just(json!(3)), ".{0,12}".prop_map(|s| json!(s))],
        params in prop_oneof![Just(json!({})), Just(json!([])), Just(json!("x")), Just(json!({"name": 1}))],
        version in prop_oneof![Just(json!("2.0")), Just(json!("1.0")), Just(json!(2))],
        drop in 0usize..5,
    ) {
        let mut m = json!({"jsonrpc": version, "id": id, "method": method, "params": params});
        let key = ["jsonrpc", "id", "method", "params", "none"][drop];
        m.as_object_mut().unwrap().remove(key);
        let _ = jsonrpc::parse(m.to_string().as_bytes());
    }

    #[test]
    fn the_token_verifier_never_panics(token in "[A-Za-z0-9_.=-]{0,300}", dots in prop::collection::vec("[A-Za-z0-9_-]{0,60}", 0..5)) {
        let v = TokenVerifier::new(SECRET, ISSUER, "http://127.0.0.1:1/mcp", "case_id").unwrap();
        prop_assert!(v.verify(&token).is_err());
        prop_assert!(v.verify(&dots.join(".")).is_err());
    }
}

/// Returns a result that breaks the output schema.
struct Broken;

impl ToolDispatch for Broken {
    async fn call(
        &self,
        _: &'static ToolContract,
        _: &CallContext,
        _: Value,
    ) -> Result<Value, ToolError> {
        Ok(json!({"case_id": "C-102", "secret_internal_field": true}))
    }
}

#[tokio::test]
async fn a_result_outside_the_output_schema_never_leaves_the_server() {
    caseops_host::install_tls_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = McpConfig::loopback(addr, ISSUER);
    let server = McpServer::<Bundle, _>::new(config.clone(), SECRET, Broken).unwrap();
    let router = server.router();
    let served = router.clone();
    tokio::spawn(async move { axum::serve(listener, served).await.unwrap() });
    let issuer = caseops_host::mcp::token::TokenIssuer::new(
        SECRET,
        ISSUER,
        config.resource_url.clone(),
        "case_id",
        300,
    )
    .unwrap();
    let s = TestServer {
        addr,
        url: config.resource_url,
        issuer,
        router,
    };
    let r = s
        .call(
            &s.demo_token(),
            "caseops_get_case_snapshot",
            json!({"case_id": "C-102"}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(
        r["result"]["structuredContent"]["code"],
        "CONTRACT_VIOLATION"
    );
    assert!(!r.to_string().contains("secret_internal_field"));
}
