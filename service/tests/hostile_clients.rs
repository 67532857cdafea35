//! Clients that try to wear the server out: slow headers, slow bodies, idle
//! connections past the limit, large bodies with a wrong key. Each is answered or
//! cut off within its bound, and the server keeps serving everyone else.

mod db_support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Serve {
    child: Child,
    api: std::net::SocketAddr,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(database: &str, max_connections: &str) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["serve", "--database", database])
        .args(["--listen", "127.0.0.1:0", "--mcp-listen", "127.0.0.1:0"])
        .args([
            "--header-timeout-seconds",
            "1",
            "--body-timeout-seconds",
            "1",
        ])
        .args([
            "--idle-timeout-seconds",
            "2",
            "--max-connections",
            max_connections,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("caseops starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let api = loop {
        let line = lines.next().expect("an address line").unwrap();
        if let Some(rest) = line.strip_prefix("caseops api on http://") {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Serve { child, api }
}

/// Everything the server sends until it closes, or `None` if it is still open
/// after `within`.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut out)).await;
    read.ok().map(|_| String::from_utf8_lossy(&out).to_string())
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn health(api: std::net::SocketAddr) -> u16 {
    reqwest::get(format!("http://{api}/health/live"))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_slow_bodies_are_cut_off_within_their_bounds() {
    let dbs = db_support::fresh_databases("slow").await;
    let s = serve(dbs.sqlite(), "64");

    let started = Instant::now();
    let mut slow = TcpStream::connect(s.api).await.unwrap();
    slow.write_all(b"POST /v1/cases/C-102/agent-runs HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let cut = until_closed(&mut slow, Duration::from_secs(5)).await;
    assert!(
        cut.is_some(),
        "a connection whose headers never end stays open"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    let mut slow = TcpStream::connect(s.api).await.unwrap();
    slow.write_all(b"POST /v1/cases/C-102/agent-runs HTTP/1.1\r\nHost: x\r\nX-API-Key: dev-key-tenant-demo\r\nIdempotency-Key: slow-body-0001\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"goal\":")
        .await
        .unwrap();
    let answer = until_closed(&mut slow, Duration::from_secs(5)).await;
    let answer = answer.expect("the server answers a body that stops arriving");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(health(s.api).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_get_503_at_once_and_idle_ones_are_closed() {
    let dbs = db_support::fresh_databases("idle").await;
    let s = serve(dbs.sqlite(), "20");
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(s.api).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = TcpStream::connect(s.api).await.unwrap();
    let t = Instant::now();
    let refused = until_closed(&mut extra, Duration::from_secs(2))
        .await
        .expect("a connection past the limit is answered, not left waiting");
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(t.elapsed() < Duration::from_secs(1));

    // The idle ones are closed by the server, and new clients are served again.
    for c in &mut idle {
        assert!(
            until_closed(c, Duration::from_secs(5)).await.is_some(),
            "an idle connection stays open"
        );
    }
    assert_eq!(health(s.api).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_with_a_wrong_key_are_refused_without_being_held_in_memory() {
    let dbs = db_support::fresh_databases("bodies").await;
    let s = serve(dbs.sqlite(), "512");
    let before = rss_kb(s.child.id());
    let body = vec![b'x'; 2 * 1024 * 1024 - 16 * 1024];
    let mut tasks = Vec::new();
    for i in 0..100 {
        let body = body.clone();
        let api = s.api;
        tasks.push(tokio::spawn(async move {
            let mut c = TcpStream::connect(api).await.unwrap();
            let head = format!(
                "POST /v1/cases/C-102/agent-runs HTTP/1.1\r\nHost: x\r\nX-API-Key: wrong-{i}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            c.write_all(head.as_bytes()).await.unwrap();
            // The server may answer and close before the body is through.
            let _ = c.write_all(&body).await;
            let mut out = vec![0u8; 64];
            let n = c.read(&mut out).await.unwrap_or(0);
            String::from_utf8_lossy(&out[..n]).to_string()
        }));
    }
    for t in tasks {
        let answer = t.await.unwrap();
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 401"),
            "{answer}"
        );
    }
    let after = rss_kb(s.child.id());
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} KB to {after} KB for bodies no one was allowed to send"
    );
    assert_eq!(health(s.api).await, 200);
}
