//! The agent as a user runs it: `__name__ serve` as a real process, a run started
//! through its API, its tool called over MCP, the result read back.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

/// The server process, killed when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_run_on_a_known_item_looks_it_up_and_completes_with_its_evidence() {
    caseops_host::install_tls_provider();
    let dir = std::env::temp_dir().join(format!("__name__-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let database = format!("sqlite://{}", dir.join("smoke.db").display());
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE___name__"))
            .args(["serve", "--database", &database, "--listen", "127.0.0.1:0"])
            .args(["--mcp-listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("the binary starts"),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let api = line
        .split_whitespace()
        .nth(3)
        .expect("an address line")
        .to_string();

    let http = reqwest::Client::new();
    let start = |item: &str| {
        http.post(format!("{api}/v1/items/{item}/agent-runs"))
            .header("X-API-Key", "dev-key-__name__")
            .header("Idempotency-Key", format!("smoke-{item}-0001"))
            .json(&json!({"goal": "Look the item up."}))
            .send()
    };
    let response = start("I-1").await.unwrap();
    let status = response.status().as_u16();
    let run: Value = response.json().await.unwrap();
    let missing = start("I-404").await.unwrap().status().as_u16();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"]["outcome"], "FOUND", "{run}");
    assert_eq!(
        run["result"]["evidence_refs"],
        json!(["item://I-1"]),
        "{run}"
    );
    assert_eq!(missing, 404, "a run on an unknown item is refused");
}
