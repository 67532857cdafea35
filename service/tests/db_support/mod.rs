//! Fresh databases for tests: a SQLite file always, and a PostgreSQL database when
//! `CASEOPS_TEST_POSTGRES_URL` names a server (CI always sets it; there a missing
//! PostgreSQL is a failure, never a silent skip). What a test creates is removed
//! when it is done with it: the SQLite folder and the PostgreSQL database.
#![allow(dead_code)]

use std::io::Write;
use std::time::Duration;

/// Says once per test binary, past the test harness's output capture, that a group
/// of tests was skipped and how to run it.
pub fn note_skipped(what: &str, how: &str) {
    static ONCE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = ONCE.lock().unwrap_or_else(|e| e.into_inner());
    if said.iter().any(|w| w == what) {
        return;
    }
    said.push(what.to_string());
    // `io::stderr()` directly, not `eprintln!`: the harness captures only the macros.
    let _ = writeln!(std::io::stderr(), "note: skipped {what}: {how}");
}

pub fn admin_postgres_url() -> Option<String> {
    match std::env::var("CASEOPS_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set CASEOPS_TEST_POSTGRES_URL"
            );
            note_skipped(
                "the PostgreSQL cases",
                "set CASEOPS_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres to run them",
            );
            None
        }
    }
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// The databases of one test; iterate it for `(backend, url)` pairs. They are
/// removed when the iteration (or this value) is dropped.
pub struct Databases {
    list: Vec<(&'static str, String)>,
    cleanup: Cleanup,
}

impl Databases {
    pub fn postgres(&self) -> Option<&str> {
        self.list
            .iter()
            .find(|(b, _)| *b == "postgres")
            .map(|(_, u)| u.as_str())
    }

    pub fn sqlite(&self) -> &str {
        &self.list[0].1
    }
}

impl IntoIterator for Databases {
    type Item = (&'static str, String);
    type IntoIter = Iter;

    fn into_iter(self) -> Iter {
        Iter {
            inner: self.list.into_iter(),
            _cleanup: self.cleanup,
        }
    }
}

pub struct Iter {
    inner: std::vec::IntoIter<(&'static str, String)>,
    _cleanup: Cleanup,
}

impl Iterator for Iter {
    type Item = (&'static str, String);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next()
    }
}

struct Cleanup {
    dir: std::path::PathBuf,
    /// `(admin url, database name)`.
    postgres: Option<(String, String)>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some((admin, name)) = self.postgres.take() {
            // Drop runs inside async tests too: a runtime of its own, on a thread.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                rt.block_on(async {
                    let pool = connect(&admin).await.ok()?;
                    // FORCE ends the sessions of servers a test may have left behind.
                    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(&pool)
                        .await
                        .ok()?;
                    pool.close().await;
                    Some(())
                })
            })
            .join();
        }
    }
}

/// One connection to the admin URL, failing within two seconds when nothing
/// answers (instead of the pool's default thirty).
async fn connect(admin: &str) -> Result<sqlx::AnyPool, sqlx::Error> {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(2))
        .connect(admin)
        .await
}

/// A new, empty database URL for each backend available.
pub async fn fresh_databases(name: &str) -> Databases {
    caseops_host::install_tls_provider();
    let dir = std::env::temp_dir().join(unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    let list = vec![(
        "sqlite",
        format!("sqlite://{}", dir.join("caseops.db").display()),
    )];
    let mut databases = Databases {
        list,
        cleanup: Cleanup {
            dir,
            postgres: None,
        },
    };
    if let Some(admin) = admin_postgres_url() {
        let db = unique(name);
        let pool = connect(&admin).await.unwrap_or_else(|e| {
            panic!("CASEOPS_TEST_POSTGRES_URL=`{admin}` does not answer ({e}): start PostgreSQL or unset it")
        });
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        let base = admin
            .rsplit_once('/')
            .map(|(b, _)| b.to_string())
            .unwrap_or(admin.clone());
        databases.list.push(("postgres", format!("{base}/{db}")));
        databases.cleanup.postgres = Some((admin, db));
    }
    databases
}
