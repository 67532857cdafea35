//! `docs/adding-a-tool.md`, followed literally on a copy of the repository: its
//! `# create`, `# insert into`, `# replace in` and `# append to` blocks are applied,
//! the copy is checked, tested, built and served, and a run (planned by a stand-in
//! for the model API) calls the new tool over MCP.
//!
//! It builds a second copy of the workspace, so it is `#[ignore]`d in the default
//! run; `.ci/run` runs it on its own after the suite:
//! `cargo test --workspace --all-features -- --ignored`.

#[path = "../../tests/support/inner_cargo.rs"]
mod inner_cargo;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::post;
use inner_cargo::without_test_env;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(&name));
        } else {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

/// Applies one step block of the walk-through to the project at `root`.
fn apply(root: &Path, header: &str, body: &str) {
    let edit = |path: &str, f: &dyn Fn(String) -> String| {
        let file = root.join(path);
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        std::fs::write(&file, f(text)).unwrap();
    };
    let quoted = |s: &str| s.split('`').nth(1).expect("a quoted line").to_string();
    if let Some(path) = header.strip_prefix("# create ") {
        std::fs::write(root.join(path.trim()), body).unwrap();
    } else if let Some(rest) = header.strip_prefix("# append to ") {
        edit(rest.trim(), &|text| text + body);
    } else if let Some(rest) = header.strip_prefix("# insert into ") {
        let (path, _) = rest.split_once(' ').unwrap();
        let anchor = quoted(rest);
        edit(path, &|text| {
            assert!(
                text.lines().any(|l| l == anchor),
                "`{anchor}` not in {path}"
            );
            text.lines()
                .flat_map(|l| {
                    let mut out = vec![l.to_string()];
                    if l == anchor {
                        out.push(body.trim_end_matches('\n').to_string());
                    }
                    out
                })
                .collect::<Vec<_>>()
                .join("\n")
                + "\n"
        });
    } else if let Some(rest) = header.strip_prefix("# replace in ") {
        let (path, _) = rest.split_once(' ').unwrap();
        let line = quoted(rest);
        edit(path, &|text| {
            assert!(text.contains(&line), "`{line}` not in {path}");
            text.replacen(&line, body.trim_end_matches('\n'), 1)
        });
    }
}

/// The walk-through's step blocks, in order: `(header line, the rest)`.
fn steps() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(repo().join("docs/adding-a-tool.md")).unwrap();
    doc.split("```")
        .skip(1)
        .step_by(2)
        .filter_map(|block| {
            let block = block.split_once('\n')?.1;
            let (header, body) = block.split_once('\n')?;
            [
                "# create ",
                "# insert into ",
                "# replace in ",
                "# append to ",
            ]
            .iter()
            .any(|p| header.starts_with(p))
            .then(|| (header.to_string(), body.to_string()))
        })
        .collect()
}

fn cargo(root: &Path, args: &[&str]) -> String {
    let out = without_test_env(&mut Command::new(env!("CARGO")))
        .args(args)
        .current_dir(root)
        .env("CARGO_TARGET_DIR", repo().join("target/scratch"))
        // Intermediate artifacts in this workspace's own build folder: the copy's
        // dependencies are the ones this suite already compiled.
        .env("CARGO_BUILD_BUILD_DIR", repo().join("target"))
        // The copy's own crates have this workspace's relative paths, hence the
        // same artifact names: a profile setting of their own (the dependencies
        // state theirs in Cargo.toml) keeps them from overwriting this suite's.
        .env("CARGO_PROFILE_DEV_CODEGEN_UNITS", "255")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "cargo {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The served copy, killed when the test ends however it ends.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stand-in's replies still to give, and the requests it has seen.
type ModelState = (Arc<Mutex<VecDeque<Value>>>, Arc<Mutex<Vec<Value>>>);

/// A stand-in for the model API: the scripted replies in order.
async fn model(replies: Vec<Value>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = (Arc::new(Mutex::new(VecDeque::from(replies))), seen.clone());
    let app = axum::Router::new()
        .route(
            "/v1/responses",
            post(
                |State((replies, seen)): State<ModelState>, body: axum::Json<Value>| async move {
                    // `{EVIDENCE}` in a reply stands for the evidence reference the
                    // run's first tool call returned: a conclusion may cite only that.
                    let view: Value = body.0["input"][0]["content"]
                        .as_str()
                        .and_then(|c| serde_json::from_str(c).ok())
                        .unwrap_or_default();
                    let evidence = view["observations"][0]["result"]["evidence_ref"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    seen.lock().unwrap().push(body.0);
                    let reply = replies.lock().unwrap().pop_front().unwrap_or(Value::Null);
                    let reply: Value =
                        serde_json::from_str(&reply.to_string().replace("{EVIDENCE}", &evidence))
                            .unwrap_or(reply);
                    axum::Json(reply)
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "builds a copy of the workspace; .ci/run runs it with --ignored"]
async fn following_the_walk_through_makes_a_new_tool_callable_in_a_run() {
    caseops_host::install_tls_provider();
    let dir = std::env::temp_dir().join(format!("caseops-adding-{}", uuid::Uuid::new_v4()));
    copy_tree(&repo(), &dir);
    let steps = steps();
    assert!(steps.len() >= 4, "only {} steps found", steps.len());
    for (header, body) in &steps {
        apply(&dir, header, body);
    }

    cargo(&dir, &["run", "-q", "-p", "caseops-compile", "--", "test"]);
    cargo(&dir, &["run", "-q", "-p", "caseops-compile", "--", "build"]);
    let check = cargo(&dir, &["run", "-q", "-p", "caseops-compile", "--", "check"]);
    assert!(check.contains("no problems found"), "{check}");
    cargo(
        &dir,
        &["build", "-q", "-p", "caseops-service", "--bin", "caseops"],
    );

    let call = json!({"output": [{"type": "function_call", "call_id": "c1",
        "name": "caseops_list_document_requests",
        "arguments": json!({"case_id": "C-102"}).to_string()}],
        "usage": {"total_tokens": 40}});
    // Without the snapshot and the policy only INSUFFICIENT_EVIDENCE follows, and the
    // answer cites what the run observed: the listing's own reference.
    let answer = json!({"outcome": "INSUFFICIENT_EVIDENCE", "summary": "no document was requested yet",
        "received_document_codes": [], "resolved_document_codes": [],
        "missing_document_codes": [], "evidence_refs": ["{EVIDENCE}"]});
    let done = json!({"output": [{"type": "message", "content": [{"type": "output_text", "text": answer.to_string()}]}],
        "usage": {"total_tokens": 40}});
    let (base, seen) = model(vec![call, done]).await;

    let db = format!("sqlite://{}", dir.join("caseops.db").display());
    let mut served = Served(
        Command::new(repo().join("target/scratch/debug/caseops"))
            .args(["serve", "--database", &db, "--listen", "127.0.0.1:0"])
            .args(["--mcp-listen", "127.0.0.1:0", "--planner", "openai"])
            .args(["--openai-base-url", &base])
            .env("CASEOPS_OPENAI_API_KEY", "sk-test")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(served.0.stdout.take().unwrap()).lines();
    let api = loop {
        let line = lines.next().expect("serve prints its address").unwrap();
        if let Some(rest) = line.strip_prefix("caseops api on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let run: Value = reqwest::Client::new()
        .post(format!("{api}/v1/cases/C-102/agent-runs"))
        .header("X-API-Key", "dev-key-tenant-demo")
        .header("Idempotency-Key", "list-requests-0001")
        .json(&json!({"goal": "Which documents were already requested for case C-102?"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ledger: Value = reqwest::Client::new()
        .get(format!(
            "{api}/v1/agent-runs/{}/tool-executions",
            run["run_id"].as_str().unwrap()
        ))
        .header("X-API-Key", "dev-key-tenant-demo")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    drop(served);

    // The model was offered the new tool: the policies permit it, nothing in Rust
    // had to allow its risk.
    let offered = seen.lock().unwrap()[0]["tools"].to_string();
    assert!(
        offered.contains("caseops_list_document_requests"),
        "{offered}"
    );
    assert_eq!(run["status"], "completed", "{run}");
    let rows = ledger
        .as_array()
        .or(ledger["tool_executions"].as_array())
        .cloned()
        .unwrap_or_default();
    let row = rows
        .iter()
        .find(|r| r["tool_name"] == "caseops_list_document_requests")
        .unwrap_or_else(|| panic!("not in the ledger: {ledger}"));
    assert_eq!(row["status"], "succeeded", "{row}");
    assert_eq!(row["result"]["requests"], json!([]), "{row}");
    assert_eq!(
        row["result"]["evidence_ref"], "case://C-102@7/document-requests",
        "{row}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
