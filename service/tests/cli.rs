//! The `caseops` commands as a user runs them: what they create, what they refuse.

mod db_support;

use std::process::Command;

use db_support::fresh_databases;

fn caseops(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(args)
        .current_dir(dir)
        .env_remove("CASEOPS_DATABASE_URL")
        .output()
        .unwrap()
}

#[test]
fn read_only_commands_in_an_empty_folder_create_nothing_and_name_the_missing_database() {
    let dir = std::env::temp_dir().join(db_support::unique("cli-empty"));
    std::fs::create_dir_all(&dir).unwrap();
    for args in [&["runs", "show", "run-1"][..], &["audit", "verify"][..]] {
        let out = caseops(&dir, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no database at `sqlite://caseops.db`") && err.contains("caseops migrate"),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "nothing was created: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn read_only_commands_refuse_a_database_of_an_older_schema_without_migrating_it() {
    let dir = std::env::temp_dir().join(db_support::unique("cli-old"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("old.db");
    let conn = rusqlite::Connection::open(&file).unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    drop(conn);
    let url = format!("sqlite://{}", file.display());
    let out = caseops(&dir, &["audit", "verify", "--database", &url]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has schema version 1") && err.contains("run `caseops migrate` first"),
        "{err}"
    );
    let conn = rusqlite::Connection::open(&file).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1, "left as it was");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn production_serving_never_loads_the_demo_data() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let databases = rt.block_on(fresh_databases("production"));
    let Some(url) = databases.postgres().map(str::to_string) else {
        return;
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args([
            "serve",
            "--production",
            "--listen",
            "127.0.0.1:0",
            "--mcp-listen",
            "127.0.0.1:0",
            "--database",
            &url,
        ])
        .env(
            "CASEOPS_SIGNING_KEY",
            "a-production-signing-key-of-32-bytes-or-more",
        )
        .env(
            "CASEOPS_API_KEYS",
            "prod-key-0123456789=tenant-acme:user:alice",
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let mut printed = Vec::new();
    for line in out.by_ref() {
        let line = line.unwrap();
        let api = line.starts_with("caseops api on");
        printed.push(line);
        if api {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !printed.iter().any(|l| l.contains("demo reference data")),
        "{printed:?}"
    );
    let cases = rt.block_on(async {
        let db =
            caseops_host::store::Db::open_existing(&url, 1, &caseops_service::reference::SCHEMA)
                .await
                .unwrap();
        db.fetch_all("SELECT case_id FROM cases", &[])
            .await
            .unwrap()
            .len()
    });
    assert_eq!(cases, 0, "no demo case in a production database");
}

#[test]
fn runs_list_shows_a_tenants_runs_and_none_of_another_tenant() {
    let dir = std::env::temp_dir().join(db_support::unique("cli-list"));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("c.db").display());
    let demo = caseops(&dir, &["demo", "--database", &url]);
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );

    let out = caseops(&dir, &["runs", "list", "--database", &url, "--json"]);
    assert!(out.status.success());
    let runs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The demo's three runs, newest first: C-104 (approved), C-103, C-102.
    let cases: Vec<&str> = runs
        .iter()
        .map(|r| r["case_id"].as_str().unwrap())
        .collect();
    assert_eq!(cases, ["C-104", "C-103", "C-102"], "{runs:?}");
    assert!(runs.iter().all(|r| r["status"] == "completed"), "{runs:?}");

    let table = caseops(&dir, &["runs", "list", "--database", &url]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains(runs[0]["run_id"].as_str().unwrap()), "{text}");
    let other = caseops(
        &dir,
        &[
            "runs",
            "list",
            "--database",
            &url,
            "--tenant",
            "tenant-other",
        ],
    );
    let text = String::from_utf8_lossy(&other.stdout);
    assert!(text.contains("no runs for tenant `tenant-other`"), "{text}");
    let none = caseops(
        &dir,
        &["runs", "list", "--database", &url, "--status", "failed"],
    );
    assert!(!String::from_utf8_lossy(&none.stdout).contains("C-102"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_closed_standard_output_ends_a_command_quietly() {
    let dir = std::env::temp_dir().join(db_support::unique("cli-pipe"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .arg("demo")
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // As `caseops demo | head -0` does: the reader is gone before the first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success(), "{:?} {err}", out.status);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn listen_addresses_may_be_a_port_or_a_host_name() {
    let dir = std::env::temp_dir().join(db_support::unique("cli-listen"));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("l.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args([
            "serve",
            "--listen",
            "0",
            "--mcp-listen",
            "localhost:0",
            "--database",
            &url,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let mut printed = Vec::new();
    for line in lines {
        let line = line.unwrap();
        let done = line.starts_with("caseops mcp on");
        printed.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("caseops api on http://127.0.0.1:")),
        "{printed:?}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("caseops mcp on http://127.0.0.1:")),
        "{printed:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_port_in_use_names_its_option_and_creates_no_database() {
    let dir = std::env::temp_dir().join(db_support::unique("cli-busy"));
    std::fs::create_dir_all(&dir).unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = caseops(
        &dir,
        &["serve", "--listen", &port, "--mcp-listen", "127.0.0.1:0"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(--listen)") && err.contains(&port), "{err}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "no database was created: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_mcp_era_names_the_flag_and_the_eras_there_are() {
    let dir = tempfile::tempdir().unwrap();
    let out = caseops(dir.path(), &["serve", "--mcp-era", "2024-01-01"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--mcp-era"), "{err}");
    assert!(
        err.contains("`2024-01-01` is no MCP era: use `auto`, `2026-07-28` or `2025-11-25`"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing created"
    );
}

#[test]
fn the_in_process_mcp_transport_is_refused_for_an_api_without_its_mcp_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = caseops(
        dir.path(),
        &[
            "serve",
            "--only",
            "api",
            "--mcp-url",
            "http://127.0.0.1:9/mcp",
            "--mcp-transport",
            "in-process",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`--mcp-transport in-process` needs the mcp server in this process"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing created"
    );
}

/// `migrate` names the row format; `--compact-rows` moves a database that holds
/// runs to the newest one; a format this version does not know (a newer
/// version's) stops `migrate` and `serve` instead of being misread.
#[test]
fn migrate_reports_and_advances_the_row_format_and_serve_refuses_an_unknown_one() {
    let dir = std::env::temp_dir().join(db_support::unique("cli-row-format"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rows.db");
    let url = format!("sqlite://{}", file.display());
    let migrate = |extra: &[&str]| {
        let mut args = vec!["migrate", "--database", &url];
        args.extend_from_slice(extra);
        let out = caseops(&dir, &args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let set_format = |value: &str| {
        let conn = rusqlite::Connection::open(&file).unwrap();
        conn.execute(
            "UPDATE host_settings SET value = ?1 WHERE name = 'row_format'",
            [value],
        )
        .unwrap();
    };

    let (code, text) = migrate(&[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("`compact-requests`"),
        "a new database: {text}"
    );

    // A database that held runs before 1011 kept its full rows.
    set_format("full");
    let (code, text) = migrate(&[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("`full`") && text.contains("--compact-rows"),
        "{text}"
    );
    let (code, text) = migrate(&["--compact-rows"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("`compact-requests`"), "{text}");
    let (_, text) = migrate(&[]);
    assert!(text.contains("`compact-requests`"), "it stays: {text}");
    // One format behind (a database that held runs before 1015).
    set_format("compact-timeline");
    let (_, text) = migrate(&[]);
    assert!(text.contains("--compact-rows"), "{text}");
    let (_, text) = migrate(&["--compact-rows"]);
    assert!(text.contains("`compact-requests`"), "{text}");

    set_format("compact-next");
    let (code, text) = migrate(&[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("unknown row format `compact-next`"), "{text}");
    let out = caseops(
        &dir,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--mcp-listen",
            "127.0.0.1:0",
            "--database",
            &url,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("unknown row format `compact-next`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_says_why_its_first_request_failed() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on a port just let go of.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let api = format!("http://127.0.0.1:{port}");
    let mcp = format!("http://127.0.0.1:{port}/mcp");
    let args = ["bench", "--api", &api, "--mcp", &mcp, "--requests", "1"];
    let out = caseops(dir.path(), &args);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "the first request to `{api}` failed: it was not answered"
        )),
        "{err}"
    );

    // A server that answers every request with a refusal: its status and body.
    let refusing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api = format!("http://{}", refusing.local_addr().unwrap());
    std::thread::spawn(move || {
        let body = r#"{"error":"database_unavailable"}"#;
        for stream in refusing.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = write!(
                stream,
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let args = ["bench", "--api", &api, "--mcp", &mcp, "--requests", "1"];
    let out = caseops(dir.path(), &args);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "the first request to `{api}` failed: it was answered 503 Service Unavailable: \
             {{\"error\":\"database_unavailable\"}}"
        )),
        "{err}"
    );
}

#[test]
fn serve_refuses_a_database_connection_limit_of_zero_and_names_the_flag() {
    let dir = std::env::temp_dir().join(db_support::unique("cli-conns"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = caseops(&dir, &["serve", "--db-connections", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--db-connections"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("CASEOPS_DB_CONNECTIONS") && help.contains("max_connections"),
        "{help}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "nothing was created: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
