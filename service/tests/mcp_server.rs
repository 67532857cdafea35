//! The MCP server over real HTTP on a loopback port: protocol, HTTP rules, tokens and
//! tenant boundaries.

mod mcp_support;

use mcp_support::*;
use serde_json::{Value, json};

fn init(version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
}

#[tokio::test]
async fn initialize_negotiates_the_protocol_version() {
    let s = start().await;
    let t = s.demo_token();
    for (asked, got) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("1999-01-01", "2025-11-25"),
    ] {
        let r: Value = s.post(Some(&t), init(asked)).await.json().await.unwrap();
        assert_eq!(r["result"]["protocolVersion"], got, "{asked}");
        assert_eq!(r["result"]["capabilities"]["tools"]["listChanged"], false);
    }
}

#[tokio::test]
async fn notifications_and_responses_get_202_with_no_body() {
    let s = start().await;
    let t = s.demo_token();
    for body in [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 3, "result": {}}),
    ] {
        let r = s.post(Some(&t), body).await;
        assert_eq!(r.status(), 202);
        assert!(r.bytes().await.unwrap().is_empty());
    }
    assert!(
        s.post(
            Some(&t),
            json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        )
        .await
        .headers()
        .get("mcp-session-id")
        .is_none(),
        "stateless"
    );
}

#[tokio::test]
async fn ping_answers_an_empty_result() {
    let s = start().await;
    let r: Value = s
        .post(
            Some(&s.demo_token()),
            json!({"jsonrpc": "2.0", "id": "p", "method": "ping"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r, json!({"jsonrpc": "2.0", "id": "p", "result": {}}));
}

#[tokio::test]
async fn tools_list_shows_the_tools_the_token_may_call_with_output_schemas() {
    let s = start().await;
    let r: Value = s
        .post(
            Some(&s.demo_token()),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let tools = r["result"]["tools"].as_array().unwrap();
    // The demo token's read scopes: the four investigation reads and the read that
    // confirms a case transition (`case:read`); no write scope, no write.
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "caseops_find_case_transition",
            "caseops_get_case_snapshot",
            "caseops_get_policy_requirements",
            "caseops_list_unclassified_documents",
            "caseops_resolve_document_alias"
        ]
    );
    assert!(tools.iter().all(|t| t["outputSchema"]["type"] == "object"));
    assert!(r["result"].get("nextCursor").is_none());
}

#[tokio::test]
async fn tools_list_shows_only_what_the_token_may_call() {
    let s = start().await;
    let t = s.token("tenant-demo", "C-102", &["case:read"]);
    let r: Value = s
        .post(
            Some(&t),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["caseops_find_case_transition", "caseops_get_case_snapshot"]
    );
}

#[tokio::test]
async fn tools_list_paginates_with_an_opaque_cursor() {
    let s = start_with(|c| c.page_size = 3).await;
    let t = s.demo_token();
    let first: Value = s
        .post(
            Some(&t),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(first["result"]["tools"].as_array().unwrap().len(), 3);
    let cursor = first["result"]["nextCursor"].as_str().unwrap();
    let second: Value = s.post(Some(&t), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": cursor}})).await.json().await.unwrap();
    assert_eq!(second["result"]["tools"].as_array().unwrap().len(), 2);
    assert!(second["result"].get("nextCursor").is_none());
    let bad: Value = s.post(Some(&t), json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": "nope"}})).await.json().await.unwrap();
    assert_eq!(bad["error"]["code"], -32602);
}

#[tokio::test]
async fn a_tool_call_returns_structured_content_and_the_same_json_as_text() {
    let s = start().await;
    let r = s
        .call(
            &s.demo_token(),
            "caseops_get_case_snapshot",
            json!({"case_id": "C-102"}),
        )
        .await;
    let result = &r["result"];
    assert_eq!(result["isError"], false);
    assert_eq!(result["structuredContent"]["case_version"], 7);
    assert_eq!(
        result["structuredContent"]["evidence_ref"],
        "case://C-102@7"
    );
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"]);
    assert_eq!(result["_meta"]["caseops/task_id"], "task-1");
    assert!(
        !r.to_string().contains("tenant_id") && !r.to_string().contains("tenant-demo"),
        "{r}"
    );
}

#[tokio::test]
async fn every_tool_answers_for_c102() {
    let s = start().await;
    let t = s.demo_token();
    for (tool, args) in [
        (
            "caseops_get_policy_requirements",
            json!({"case_id": "C-102"}),
        ),
        (
            "caseops_list_unclassified_documents",
            json!({"case_id": "C-102"}),
        ),
        (
            "caseops_resolve_document_alias",
            json!({"case_id": "C-102", "document_id": "DOC-C102-003"}),
        ),
    ] {
        let r = s.call(&t, tool, args).await;
        assert_eq!(r["result"]["isError"], false, "{tool}: {r}");
    }
    let r = s
        .call(
            &t,
            "caseops_resolve_document_alias",
            json!({"case_id": "C-102", "document_id": "DOC-C102-003"}),
        )
        .await;
    assert_eq!(
        r["result"]["structuredContent"]["canonical_code"],
        "ACCIDENT_CERTIFICATE"
    );
}

#[tokio::test]
async fn no_bearer_token_is_401_with_resource_metadata() {
    let s = start().await;
    let r = s
        .post(None, json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        challenge.starts_with("Bearer resource_metadata=\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("/.well-known/oauth-protected-resource/mcp\""),
        "{challenge}"
    );
}

async fn refused(s: &TestServer, token: &str) -> String {
    let r = s
        .post(
            Some(token),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .await;
    assert_eq!(r.status(), 401);
    r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_tampered_signature_is_refused() {
    let s = start().await;
    let t = s.demo_token();
    let (head, sig) = t.rsplit_once('.').unwrap();
    // Change one character in the middle: still valid base64url, wrong signature.
    let mut chars: Vec<char> = sig.chars().collect();
    chars[10] = if chars[10] == 'A' { 'B' } else { 'A' };
    let tampered: String = chars.into_iter().collect();
    assert!(
        refused(&s, &format!("{head}.{tampered}"))
            .await
            .contains("signature")
    );
    assert!(
        refused(
            &s,
            &s.sign_raw(
                &serde_json::to_value(s.claims("tenant-demo", "C-102", ALL_SCOPES)).unwrap(),
                b"another-key"
            )
        )
        .await
        .contains("signature")
    );
}

#[tokio::test]
async fn a_token_for_another_audience_is_refused() {
    let s = start().await;
    let mut c = s.claims("tenant-demo", "C-102", ALL_SCOPES);
    c.aud = vec!["http://127.0.0.1:1/mcp".into()];
    assert!(
        refused(&s, &s.issuer.sign(&c).unwrap())
            .await
            .contains("audience")
    );
}

#[tokio::test]
async fn expired_and_not_yet_valid_tokens_are_refused() {
    let s = start().await;
    let mut c = s.claims("tenant-demo", "C-102", ALL_SCOPES);
    c.iat = now() - 400;
    c.nbf = c.iat;
    c.exp = now() - 100;
    assert!(
        refused(&s, &s.issuer.sign(&c).unwrap())
            .await
            .contains("expired")
    );
    let mut c = s.claims("tenant-demo", "C-102", ALL_SCOPES);
    c.nbf = now() + 120;
    c.exp = now() + 300;
    assert!(
        refused(&s, &s.issuer.sign(&c).unwrap())
            .await
            .contains("not valid yet")
    );
}

#[tokio::test]
async fn alg_none_is_refused() {
    let s = start().await;
    let claims = serde_json::to_string(&s.claims("tenant-demo", "C-102", ALL_SCOPES)).unwrap();
    use std::fmt::Write;
    let b64 = |bytes: &[u8]| {
        // base64url without padding, written out to avoid a dependency for one test
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                out.write_char(A[((n >> (18 - 6 * i)) & 63) as usize] as char)
                    .unwrap();
            }
        }
        out
    };
    let token = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT"}"#),
        b64(claims.as_bytes())
    );
    refused(&s, &token).await;
}

#[tokio::test]
async fn a_token_missing_a_claim_is_refused() {
    let s = start().await;
    let mut v = serde_json::to_value(s.claims("tenant-demo", "C-102", ALL_SCOPES)).unwrap();
    v.as_object_mut().unwrap().remove("tenant_id");
    assert!(
        refused(&s, &s.sign_raw(&v, SECRET))
            .await
            .contains("tenant_id")
    );
    let mut v = serde_json::to_value(s.claims("tenant-demo", "C-102", ALL_SCOPES)).unwrap();
    v.as_object_mut().unwrap().remove("case_id");
    assert!(
        refused(&s, &s.sign_raw(&v, SECRET))
            .await
            .contains("case_id")
    );
}

#[tokio::test]
async fn another_tenants_case_is_indistinguishable_from_an_unknown_case() {
    let s = start().await;
    let body = |case: &str| json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "caseops_get_case_snapshot", "arguments": {"case_id": case}}});
    // tenant-other's task asks for C-102 (tenant-demo's); tenant-demo's task for C-404
    let foreign = s
        .post(
            Some(&s.token("tenant-other", "C-102", ALL_SCOPES)),
            body("C-102"),
        )
        .await
        .bytes()
        .await
        .unwrap();
    let unknown = s
        .post(
            Some(&s.token("tenant-demo", "C-404", ALL_SCOPES)),
            body("C-404"),
        )
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(foreign, unknown);
    let v: Value = serde_json::from_slice(&foreign).unwrap();
    assert_eq!(v["result"]["structuredContent"]["code"], "CASE_NOT_FOUND");
    // and tenant-demo cannot see tenant-other's C-555
    let r = s
        .call(
            &s.token("tenant-demo", "C-555", ALL_SCOPES),
            "caseops_get_case_snapshot",
            json!({"case_id": "C-555"}),
        )
        .await;
    assert_eq!(r["result"]["structuredContent"]["code"], "CASE_NOT_FOUND");
}

#[tokio::test]
async fn a_case_outside_the_tokens_case_is_denied() {
    let s = start().await;
    let r = s
        .call(
            &s.demo_token(),
            "caseops_get_case_snapshot",
            json!({"case_id": "C-999"}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(
        r["result"]["structuredContent"]["code"],
        "TOOL_RESOURCE_MISMATCH"
    );
}

#[tokio::test]
async fn each_token_of_one_task_is_authorized_by_its_own_claims() {
    let s = start().await;
    let allowed = s
        .call(
            &s.demo_token(),
            "caseops_get_case_snapshot",
            json!({"case_id": "C-102"}),
        )
        .await;
    assert_eq!(allowed["result"]["isError"], false, "{allowed}");
    // Same task id, another case in the claims: the first token's entities must not
    // be reused for it.
    let other_case = s.token("tenant-demo", "C-999", ALL_SCOPES);
    let denied = s
        .call(
            &other_case,
            "caseops_get_case_snapshot",
            json!({"case_id": "C-102"}),
        )
        .await;
    assert_eq!(
        denied["result"]["structuredContent"]["code"],
        "TOOL_RESOURCE_MISMATCH"
    );
}

#[tokio::test]
async fn invalid_arguments_are_a_tool_error_with_a_code() {
    let s = start().await;
    let r = s
        .call(
            &s.demo_token(),
            "caseops_get_case_snapshot",
            json!({"case_id": "C-102", "tenant_id": "x"}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(
        r["result"]["structuredContent"]["code"],
        "INVALID_ARGUMENTS"
    );
    assert!(
        !r.to_string().contains("\"x\""),
        "argument values are not echoed: {r}"
    );
}

#[tokio::test]
async fn a_missing_scope_is_403_insufficient_scope_before_the_tool_runs() {
    let s = start().await;
    let t = s.token("tenant-demo", "C-102", &["case:read"]);
    let r = s.post(Some(&t), json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "caseops_get_policy_requirements", "arguments": {"case_id": "C-102"}}})).await;
    assert_eq!(r.status(), 403);
    let challenge = r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"policy:read\""),
        "{challenge}"
    );
}

#[tokio::test]
async fn an_unknown_tool_is_a_protocol_error() {
    let s = start().await;
    let r = s
        .call(&s.demo_token(), "caseops_delete_everything", json!({}))
        .await;
    assert_eq!(r["error"]["code"], -32602);
}

#[tokio::test]
async fn an_unknown_method_is_method_not_found() {
    let s = start().await;
    let r: Value = s
        .post(
            Some(&s.demo_token()),
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["error"]["code"], -32601);
}

#[tokio::test]
async fn a_batch_is_400() {
    let s = start().await;
    let r = s
        .post(
            Some(&s.demo_token()),
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
        )
        .await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn malformed_json_is_400_with_a_parse_error() {
    let s = start().await;
    let r = s
        .post_with(Some(&s.demo_token()), "{not json".into(), &[])
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32700);
}

#[tokio::test]
async fn an_accept_header_without_event_stream_is_406() {
    let s = start().await;
    let r = reqwest::Client::new()
        .post(&s.url)
        .bearer_auth(s.demo_token())
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
}

#[tokio::test]
async fn get_and_delete_are_405() {
    let s = start().await;
    let c = reqwest::Client::new();
    for r in [
        c.get(&s.url).send().await.unwrap(),
        c.delete(&s.url).send().await.unwrap(),
    ] {
        assert_eq!(r.status(), 405);
        assert_eq!(r.headers()["allow"], "POST");
    }
}

#[tokio::test]
async fn an_unsupported_protocol_version_header_is_400() {
    let s = start().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let r = s
        .post_with(
            Some(&s.demo_token()),
            ping.clone(),
            &[("mcp-protocol-version", "2024-01-01")],
        )
        .await;
    assert_eq!(r.status(), 400);
    let r = s
        .post_with(
            Some(&s.demo_token()),
            ping,
            &[("mcp-protocol-version", "2025-06-18")],
        )
        .await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_disallowed_origin_is_403_and_an_allowed_one_passes() {
    let s = start().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let r = s
        .post_with(
            Some(&s.demo_token()),
            ping.clone(),
            &[("origin", "http://evil.example")],
        )
        .await;
    assert_eq!(r.status(), 403);
    let own = format!("http://{}", s.addr);
    let r = s
        .post_with(Some(&s.demo_token()), ping, &[("origin", own.as_str())])
        .await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_disallowed_host_is_403() {
    let s = start().await;
    let r = s
        .post_with(
            Some(&s.demo_token()),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string(),
            &[("host", "attacker.example:80")],
        )
        .await;
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let s = start_with(|c| c.max_body_bytes = 1024).await;
    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4096)}})
            .to_string();
    let r = s.post_with(Some(&s.demo_token()), big, &[]).await;
    assert_eq!(r.status(), 413);
}

#[tokio::test]
async fn protected_resource_metadata_is_served_at_both_paths() {
    let s = start().await;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let v: Value = reqwest::get(format!("http://{}{path}", s.addr))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["resource"], s.url);
        assert_eq!(v["authorization_servers"][0], ISSUER);
        assert!(
            v["scopes_supported"]
                .as_array()
                .unwrap()
                .contains(&json!("case:read"))
        );
    }
}

#[tokio::test]
async fn health_live_answers() {
    let s = start().await;
    assert_eq!(
        reqwest::get(format!("http://{}/health/live", s.addr))
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn the_bearer_scheme_is_accepted_in_any_letter_case() {
    let s = start().await;
    let t = s.demo_token();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let auth = format!("{scheme} {t}");
        let r = s
            .post_with(None, ping.clone(), &[("authorization", &auth)])
            .await;
        assert_eq!(r.status(), 200, "{scheme}");
    }
    let r = s
        .post_with(None, ping, &[("authorization", &format!("Basic {t}"))])
        .await;
    assert_eq!(r.status(), 401, "another scheme is no bearer token");
}

/// One raw HTTP/1.1 request (for what an HTTP client library will not send).
async fn raw(addr: std::net::SocketAddr, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn rebinding_tricks_with_the_host_or_the_target_are_refused() {
    let s = start().await;
    let t = s.demo_token();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let request = |target: &str, hosts: &[&str]| {
        let mut r = format!("POST {target} HTTP/1.1\r\n");
        for h in hosts {
            r.push_str(&format!("Host: {h}\r\n"));
        }
        r.push_str(&format!(
            "Authorization: Bearer {t}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ));
        r
    };
    let own = s.addr.to_string();
    let ok = raw(s.addr, request("/mcp", &[&own])).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let two = raw(s.addr, request("/mcp", &[&own, "evil.example:80"])).await;
    assert!(two.starts_with("HTTP/1.1 400"), "{two}");
    let absolute = raw(s.addr, request("http://evil.example/mcp", &[&own])).await;
    assert!(absolute.starts_with("HTTP/1.1 403"), "{absolute}");
    assert!(absolute.contains("request target host"), "{absolute}");
    let own_absolute = raw(s.addr, request(&format!("http://{own}/mcp"), &[&own])).await;
    assert!(own_absolute.starts_with("HTTP/1.1 200"), "{own_absolute}");
}

#[tokio::test]
async fn a_content_type_that_only_starts_like_json_is_refused() {
    let s = start().await;
    let t = s.demo_token();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    for (kind, status) in [
        ("application/json", 200),
        ("Application/JSON; charset=utf-8", 200),
        ("application/jsonp", 415),
        ("application/json-seq", 415),
        ("text/plain", 415),
    ] {
        let r = reqwest::Client::new()
            .post(&s.url)
            .bearer_auth(&t)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", kind)
            .body(ping.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{kind}");
    }
}

// The stateless era (2026-07-28) on the same endpoint.

#[tokio::test]
async fn discover_lists_both_eras_with_cache_hints_and_the_servers_identity() {
    let s = start().await;
    let (status, r) = s
        .stateless(Some(&s.demo_token()), "server/discover", json!({}), &[])
        .await;
    assert_eq!(status, 200);
    let result = &r["result"];
    assert_eq!(r["id"], 41);
    for v in ["2026-07-28", "2025-11-25"] {
        assert!(
            result["supportedVersions"]
                .as_array()
                .unwrap()
                .contains(&json!(v)),
            "{result}"
        );
    }
    assert_eq!(result["capabilities"]["tools"]["listChanged"], false);
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["ttlMs"], 60_000);
    assert_eq!(result["cacheScope"], "public");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "caseops-tools"
    );
}

#[tokio::test]
async fn a_stateless_tools_list_is_the_handshake_one_with_private_cache_hints() {
    let s = start().await;
    let t = s.token("tenant-demo", "C-102", &["case:read", "policy:read"]);
    let (status, modern) = s.stateless(Some(&t), "tools/list", json!({}), &[]).await;
    assert_eq!(status, 200);
    let legacy: Value = s
        .post(
            Some(&t),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(modern["result"]["tools"], legacy["result"]["tools"]);
    assert!(!modern["result"]["tools"].as_array().unwrap().is_empty());
    assert_eq!(modern["result"]["resultType"], "complete");
    assert_eq!(modern["result"]["ttlMs"], 60_000);
    assert_eq!(modern["result"]["cacheScope"], "private");
    assert!(legacy["result"].get("resultType").is_none());
    // The hints come after the listing, always in the same order.
    let keys: Vec<&String> = modern["result"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["tools", "resultType", "ttlMs", "cacheScope"]);
}

#[tokio::test]
async fn a_stateless_tool_call_answers_what_a_handshake_one_does_and_says_it_is_complete() {
    let s = start().await;
    let t = s.demo_token();
    let params = json!({"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}});
    let (status, modern) = s.stateless(Some(&t), "tools/call", params, &[]).await;
    assert_eq!(status, 200);
    let legacy = s
        .call(&t, "caseops_get_case_snapshot", json!({"case_id": "C-102"}))
        .await;
    assert_eq!(modern["result"]["resultType"], "complete");
    let mut modern = modern["result"].clone();
    modern.as_object_mut().unwrap().remove("resultType");
    assert_eq!(modern, legacy["result"]);
}

#[tokio::test]
async fn a_stateless_request_missing_a_meta_field_is_400_invalid_params_with_its_id() {
    let s = start().await;
    let t = s.demo_token();
    for meta in [
        json!({"io.modelcontextprotocol/clientCapabilities": {}}),
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": []}),
    ] {
        let (status, r) = s
            .stateless(Some(&t), "server/discover", json!({"_meta": meta}), &[])
            .await;
        assert_eq!(
            (status, &r["error"]["code"]),
            (400, &json!(-32602)),
            "{meta}"
        );
        assert_eq!(r["id"], 41);
    }
    // No `_meta` at all, under a stateless version header.
    let r = s
        .post_with(
            Some(&t),
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).to_string(),
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
            ],
        )
        .await;
    assert_eq!(r.status(), 400);
    let r: Value = r.json().await.unwrap();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(5), json!(-32602))
    );
    // Client info is optional.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let (status, _) = s
        .stateless(Some(&t), "server/discover", json!({"_meta": meta}), &[])
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn standard_headers_that_differ_from_the_body_are_400_header_mismatch() {
    let s = start().await;
    let t = s.demo_token();
    let call = json!({"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}});
    for headers in [
        vec![("mcp-protocol-version", "2025-11-25")],
        vec![("mcp-protocol-version", "")],
        vec![("mcp-method", "tools/list")],
        vec![("mcp-method", "")],
        vec![("mcp-name", "caseops_get_policy_requirements")],
        vec![("mcp-name", "")],
    ] {
        let (status, r) = s
            .stateless(Some(&t), "tools/call", call.clone(), &headers)
            .await;
        assert_eq!(
            (status, &r["error"]["code"]),
            (400, &json!(-32020)),
            "{headers:?}: {r}"
        );
        assert_eq!(r["id"], 41);
    }
    // Header names are case-insensitive and a base64 name is decoded.
    let (status, _) = s
        .stateless(
            Some(&t),
            "tools/call",
            call,
            &[(
                "MCP-NAME",
                "=?base64?Y2FzZW9wc19nZXRfY2FzZV9zbmFwc2hvdA==?=",
            )],
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn an_unsupported_stateless_version_is_400_naming_the_supported_and_requested_ones() {
    let s = start().await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "v999.0.0", "io.modelcontextprotocol/clientCapabilities": {}});
    let (status, r) = s
        .stateless(
            Some(&s.demo_token()),
            "server/discover",
            json!({"_meta": meta}),
            &[("mcp-protocol-version", "v999.0.0")],
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(r["error"]["code"], -32022);
    assert_eq!(
        r["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "v999.0.0"})
    );
    // A version header that disagrees is a mismatch first.
    let (status, r) = s
        .stateless(
            Some(&s.demo_token()),
            "server/discover",
            json!({"_meta": meta}),
            &[],
        )
        .await;
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32020)));
}

#[tokio::test]
async fn handshake_methods_and_unknown_ones_are_404_method_not_found_when_stateless() {
    let s = start().await;
    let t = s.demo_token();
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "prompts/list",
        "unknown/method",
    ] {
        let (status, r) = s.stateless(Some(&t), method, json!({}), &[]).await;
        assert_eq!(
            (status, &r["error"]["code"]),
            (404, &json!(-32601)),
            "{method}"
        );
        assert_eq!(r["id"], 41);
    }
}

#[tokio::test]
async fn tokens_scopes_and_tenants_decide_the_same_in_both_eras() {
    let s = start().await;
    let call = json!({"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}});
    // No token: 401 with the metadata challenge, before any envelope check.
    let r = s
        .post_with(
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}).to_string(),
            &[],
        )
        .await;
    assert_eq!(r.status(), 401);
    assert!(
        r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("resource_metadata=")
    );
    // A missing scope: 403 insufficient_scope in both.
    let policy_only = s.token("tenant-demo", "C-102", &["policy:read"]);
    let (status, r) = s
        .stateless(Some(&policy_only), "tools/call", call.clone(), &[])
        .await;
    assert_eq!(
        (status, r["error"].clone()),
        (403, json!("insufficient_scope"))
    );
    // Another tenant's case: the same tool error in both eras.
    let other = s.token("tenant-other", "C-102", ALL_SCOPES);
    let (_, modern) = s.stateless(Some(&other), "tools/call", call, &[]).await;
    let legacy = s
        .call(
            &other,
            "caseops_get_case_snapshot",
            json!({"case_id": "C-102"}),
        )
        .await;
    assert_eq!(modern["result"]["isError"], true);
    assert_eq!(
        modern["result"]["structuredContent"],
        legacy["result"]["structuredContent"]
    );
    // Invalid arguments: the same tool error too.
    let bad = json!({"name": "caseops_get_case_snapshot", "arguments": {"case_id": 7}});
    let t = s.demo_token();
    let (_, modern) = s.stateless(Some(&t), "tools/call", bad, &[]).await;
    assert_eq!(
        modern["result"]["structuredContent"]["code"],
        "INVALID_ARGUMENTS"
    );
}

#[tokio::test]
async fn a_later_token_of_the_same_task_is_decided_by_its_own_claims() {
    // Every token of this server's issuer names the same task: the Cedar
    // principal kept for the task must not answer for a token stating other facts.
    let s = start().await;
    let server = &s;
    let snapshot = |token: String| async move {
        server
            .call(
                &token,
                "caseops_get_case_snapshot",
                json!({"case_id": "C-102"}),
            )
            .await["result"]
            .clone()
    };
    let allowed = snapshot(s.demo_token()).await;
    assert_eq!(allowed["isError"], false, "{allowed}");
    let other_case = snapshot(s.token("tenant-demo", "C-103", ALL_SCOPES)).await;
    assert_eq!(other_case["isError"], true, "{other_case}");
    let other_tenant = snapshot(s.token("tenant-other", "C-102", ALL_SCOPES)).await;
    assert_eq!(other_tenant["isError"], true, "{other_tenant}");
    let again = snapshot(s.demo_token()).await;
    assert_eq!(again["structuredContent"], allowed["structuredContent"]);
}
