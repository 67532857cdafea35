//! A `caseops serve` child process for end-to-end tests: started, its API address
//! read from its start-up line, killed when dropped.
// Each test crate uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

pub struct Served {
    pub child: Child,
    /// `http://host:port` of the API.
    pub api: String,
    /// The MCP endpoint's bound URL (`http://host:port/mcp`), when it serves one.
    pub mcp: Option<String>,
    /// Standard error's lines so far, when captured.
    pub stderr: Arc<Mutex<Vec<String>>>,
    /// Standard output's lines after the start-up lines read for `api` and `mcp`.
    pub stdout: Arc<Mutex<Vec<String>>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `caseops serve --database <database>` on ephemeral loopback ports, with `extra`
/// arguments and `env`; standard error is collected into [`Served::stderr`] when
/// `capture_stderr`, else inherited.
pub fn serve(database: &str, extra: &[&str], env: &[(&str, &str)], capture_stderr: bool) -> Served {
    let mut command = Command::new(env!("CARGO_BIN_EXE_caseops"));
    command
        .args(["serve", "--database", database])
        .args(["--listen", "127.0.0.1:0", "--mcp-listen", "127.0.0.1:0"])
        .args(extra)
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(if capture_stderr {
            Stdio::piped()
        } else {
            Stdio::inherit()
        });
    let mut child = command.spawn().expect("caseops starts");
    let stderr = Arc::new(Mutex::new(Vec::new()));
    if let Some(err) = child.stderr.take() {
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
    }
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let api = loop {
        let line = lines.next().expect("caseops printed its address").unwrap();
        if let Some(rest) = line.strip_prefix("caseops api on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // The MCP line follows the API's at once.
    let mcp = lines.next().and_then(Result::ok).and_then(|line| {
        line.strip_prefix("caseops mcp on ")
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_string)
    });
    // Keep reading so that a full pipe never blocks the server.
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let sink = stdout.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    Served {
        child,
        api,
        mcp,
        stderr,
        stdout,
    }
}

impl Served {
    /// Starts a C-102 run as the demo tenant with `idempotency_key` and `headers`,
    /// and returns the API's answer.
    pub async fn start_c102(
        &self,
        idempotency_key: &str,
        headers: &[(&str, &str)],
    ) -> serde_json::Value {
        self.start_c102_as("dev-key-tenant-demo", idempotency_key, headers)
            .await
    }

    /// [`Served::start_c102`] with another API key of the demo tenant.
    pub async fn start_c102_as(
        &self,
        api_key: &str,
        idempotency_key: &str,
        headers: &[(&str, &str)],
    ) -> serde_json::Value {
        let mut request = reqwest::Client::new()
            .post(format!("{}/v1/cases/C-102/agent-runs", self.api))
            .header("x-api-key", api_key)
            .header("idempotency-key", idempotency_key)
            .json(&serde_json::json!({"goal": "Check C-102."}));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap().json().await.unwrap()
    }
}
