//! The API and the MCP tool server as separate processes that know each other by a
//! public URL, not by a bind address: the tool server listens on every interface
//! and is reached through a port-forward on another loopback address, as a
//! `docker -p` or `kubectl port-forward` would put it.

mod db_support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

const ISSUER: &str = "https://api.caseops.test";

struct Process {
    child: Child,
    /// The address the process printed after `prefix`.
    url: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(database: &str, args: &[&str], prefix: &str) -> Process {
    let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["serve", "--database", database])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("caseops starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("caseops ended before printing `{prefix}`"))
            .unwrap();
        if let Some(rest) = line.strip_prefix(prefix) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Process { child, url }
}

/// A TCP port-forward on 127.0.0.2 to a target set once it is known.
struct Forward {
    addr: SocketAddr,
    target: Arc<OnceLock<SocketAddr>>,
}

async fn forward() -> Forward {
    let listener = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let target = Arc::new(OnceLock::<SocketAddr>::new());
    let to = target.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let Some(&upstream) = to.get() else { continue };
            tokio::spawn(async move {
                if let Ok(mut server) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    Forward { addr, target }
}

fn port_of(url: &str) -> u16 {
    let authority = url.split('/').nth(2).unwrap();
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

async fn ready(api: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = reqwest::get(format!("{api}/health/ready")).await.unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        if status == 200 || Instant::now() > deadline {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c102_completes_with_the_tool_server_in_its_own_process_behind_a_port_forward() {
    caseops_host::install_tls_provider();
    let dbs = db_support::fresh_databases("split").await;
    let database = dbs.sqlite().to_string();
    let fwd = forward().await;
    let public = format!("http://{}/mcp", fwd.addr);

    let mcp = serve(
        &database,
        &[
            "--only",
            "mcp",
            "--mcp-listen",
            "0.0.0.0:0",
            "--mcp-public-url",
            &public,
            "--token-issuer",
            ISSUER,
        ],
        "caseops mcp on ",
    );
    fwd.target
        .set(SocketAddr::from(([127, 0, 0, 1], port_of(&mcp.url))))
        .unwrap();
    let api = serve(
        &database,
        &[
            "--only",
            "api",
            "--listen",
            "127.0.0.1:0",
            "--mcp-url",
            &public,
            "--token-issuer",
            ISSUER,
        ],
        "caseops api on ",
    );
    let readiness = ready(&api.url).await;
    assert_eq!(readiness["status"], "ready", "{readiness}");

    let run: Value = reqwest::Client::new()
        .post(format!("{}/v1/cases/C-102/agent-runs", api.url))
        .header("x-api-key", "dev-key-tenant-demo")
        .header("idempotency-key", "split-c102-0001")
        .json(&json!({"goal": "Check whether claim case C-102 holds every document its policy requires."}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["step_count"], 4, "{run}");
    assert_eq!(
        run["result"]["outcome"], "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION",
        "{run}"
    );

    // What the tool server advertises is its public identity, never `0.0.0.0`.
    let http = reqwest::Client::new();
    let challenge = http
        .post(&public)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(challenge.status(), 401);
    let www = challenge.headers()["www-authenticate"].to_str().unwrap();
    let metadata_url = format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        fwd.addr
    );
    assert!(www.contains(&metadata_url), "{www}");
    let metadata: Value = http
        .get(&metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["resource"], public.as_str(), "{metadata}");
    assert_eq!(
        metadata["authorization_servers"],
        json!([ISSUER]),
        "{metadata}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_interfaces_bind_without_a_public_url_is_refused_at_start_naming_the_flag() {
    let dbs = db_support::fresh_databases("split_refused").await;
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["serve", "--only", "mcp", "--mcp-listen", "0.0.0.0:0"])
        .args(["--database", dbs.sqlite()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--mcp-public-url") && err.contains("0.0.0.0"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_server_that_does_not_know_its_forwarded_name_is_named_by_readiness_not_run_as_a_scope_denial()
 {
    caseops_host::install_tls_provider();
    let dbs = db_support::fresh_databases("split_host").await;
    let database = dbs.sqlite().to_string();
    let fwd = forward().await;
    let public = format!("http://{}/mcp", fwd.addr);
    // Known only by its loopback bind address: the forwarded Host is refused.
    let mcp = serve(
        &database,
        &["--only", "mcp", "--mcp-listen", "127.0.0.1:0"],
        "caseops mcp on ",
    );
    fwd.target
        .set(SocketAddr::from(([127, 0, 0, 1], port_of(&mcp.url))))
        .unwrap();
    let api = serve(
        &database,
        &[
            "--only",
            "api",
            "--listen",
            "127.0.0.1:0",
            "--mcp-url",
            &public,
        ],
        "caseops api on ",
    );
    let readiness = ready(&api.url).await;
    let why = readiness["mcp"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!("host `{}` not allowed", fwd.addr))
            && why.contains("--mcp-public-url"),
        "{readiness}"
    );
    let r = reqwest::Client::new()
        .post(format!("{}/v1/cases/C-102/agent-runs", api.url))
        .header("x-api-key", "dev-key-tenant-demo")
        .header("idempotency-key", "split-host-0001")
        .json(&json!({"goal": "Check C-102."}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "a run is refused, not started to fail");
}

/// Two network namespaces joined by a veth pair, with a third link from the test's
/// own namespace to the API host: the API host resolves the tool server by a host
/// name from its own `/etc/hosts` (`ip netns exec` mounts `/etc/netns/<name>/hosts`
/// over it), as two machines on one network would.
struct TwoHosts {
    api_ns: String,
    mcp_ns: String,
    /// The API host's address as the test sees it.
    api_ip: String,
}

impl TwoHosts {
    const MCP_NAME: &'static str = "mcp.caseops.test";

    /// `None` (with a note) where network namespaces cannot be made: not root, or no
    /// `ip` from iproute2.
    fn create() -> Option<TwoHosts> {
        let tag = std::process::id() % 100_000;
        let net = 1 + (std::process::id() % 250);
        let hosts = TwoHosts {
            api_ns: format!("coapi{tag}"),
            mcp_ns: format!("comcp{tag}"),
            api_ip: format!("10.211.{net}.2"),
        };
        if !ip(&["netns", "add", &hosts.api_ns]) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root with iproute2: the two-host test must run there"
            );
            db_support::note_skipped(
                "the two-network-host deployment test",
                "it needs root and `ip` (iproute2) to create network namespaces",
            );
            return None;
        }
        let (a, m) = (&hosts.api_ns, &hosts.mcp_ns);
        let (outside, api_side) = (format!("cot{tag}"), format!("coa{tag}"));
        let (api_link, mcp_link) = (format!("cam{tag}"), format!("cma{tag}"));
        let steps: Vec<Vec<String>> = [
            vec!["netns", "add", m],
            vec![
                "link", "add", &outside, "type", "veth", "peer", "name", &api_side,
            ],
            vec!["link", "set", &api_side, "netns", a],
            vec![
                "addr",
                "add",
                &format!("10.211.{net}.1/24"),
                "dev",
                &outside,
            ],
            vec!["link", "set", &outside, "up"],
            vec![
                "-n",
                a,
                "addr",
                "add",
                &format!("{}/24", hosts.api_ip),
                "dev",
                &api_side,
            ],
            vec!["-n", a, "link", "set", &api_side, "up"],
            vec!["-n", a, "link", "set", "lo", "up"],
            vec![
                "link", "add", &api_link, "type", "veth", "peer", "name", &mcp_link,
            ],
            vec!["link", "set", &api_link, "netns", a],
            vec!["link", "set", &mcp_link, "netns", m],
            vec![
                "-n",
                a,
                "addr",
                "add",
                &format!("10.212.{net}.1/24"),
                "dev",
                &api_link,
            ],
            vec!["-n", a, "link", "set", &api_link, "up"],
            vec![
                "-n",
                m,
                "addr",
                "add",
                &format!("10.212.{net}.2/24"),
                "dev",
                &mcp_link,
            ],
            vec!["-n", m, "link", "set", &mcp_link, "up"],
            vec!["-n", m, "link", "set", "lo", "up"],
        ]
        .iter()
        .map(|step| step.iter().map(|s| s.to_string()).collect())
        .collect();
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            assert!(ip(&args), "`ip {}` failed", args.join(" "));
        }
        let etc = format!("/etc/netns/{a}");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            format!("{etc}/hosts"),
            format!("127.0.0.1 localhost\n10.212.{net}.2 {}\n", Self::MCP_NAME),
        )
        .unwrap();
        Some(hosts)
    }

    fn serve(&self, ns: &str, database: &str, args: &[&str], prefix: &str) -> Process {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_caseops")])
            .args(["serve", "--database", database])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ip netns exec starts caseops");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("caseops ended before printing `{prefix}`"))
                .unwrap();
            if let Some(rest) = line.strip_prefix(prefix) {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Process { child, url }
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        // Deleting a namespace removes the veth ends inside it, and with them their peers.
        ip(&["netns", "del", &self.api_ns]);
        ip(&["netns", "del", &self.mcp_ns]);
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.api_ns));
    }
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c102_completes_with_the_api_and_the_tool_server_on_two_network_hosts_known_by_name() {
    caseops_host::install_tls_provider();
    let Some(hosts) = TwoHosts::create() else {
        return;
    };
    let dbs = db_support::fresh_databases("two_hosts").await;
    let database = dbs.sqlite().to_string();
    // Each host is a fresh namespace, so a fixed port is free on it.
    let public = format!("http://{}:8081/mcp", TwoHosts::MCP_NAME);
    let _mcp = hosts.serve(
        &hosts.mcp_ns,
        &database,
        &[
            "--only",
            "mcp",
            "--mcp-listen",
            "0.0.0.0:8081",
            "--mcp-public-url",
            &public,
            "--token-issuer",
            ISSUER,
        ],
        "caseops mcp on ",
    );
    let _api = hosts.serve(
        &hosts.api_ns,
        &database,
        &[
            "--only",
            "api",
            "--listen",
            "0.0.0.0:8080",
            "--mcp-url",
            &public,
            "--token-issuer",
            ISSUER,
        ],
        "caseops api on ",
    );
    let api = format!("http://{}:8080", hosts.api_ip);
    let readiness = ready(&api).await;
    assert_eq!(readiness["status"], "ready", "{readiness}");

    let run: Value = reqwest::Client::new()
        .post(format!("{api}/v1/cases/C-102/agent-runs"))
        .header("x-api-key", "dev-key-tenant-demo")
        .header("idempotency-key", "two-hosts-c102-0001")
        .json(&json!({"goal": "Check whether claim case C-102 holds every document its policy requires."}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["step_count"], 4, "{run}");
    assert_eq!(
        run["result"]["outcome"], "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION",
        "{run}"
    );
}
