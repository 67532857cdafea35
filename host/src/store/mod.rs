//! Durable runs on SQLite (embedded default, through rusqlite) or PostgreSQL
//! (through sqlx). Queries are written once with `?` placeholders; PostgreSQL gets
//! `$n`; `sql.rs` runs them on either.

pub mod approvals;
pub mod audit;
pub mod outbox;
pub mod row_format;
pub mod runs;
pub mod sessions;
pub mod sql;
mod timeline;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::SqlStr;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::{Migration as SqlxMigration, MigrationSource, MigrationType, Migrator};

use sql::{Backend, Param, Row, Tx};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The backend's name in metrics and spans.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgresql",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("cannot open database `{url}`: {message}")]
    Connect { url: String, message: String },
    #[error("migrating database failed: {0}")]
    Migrate(String),
    #[error(
        "no database at `{url}`: `caseops migrate --database {url}` creates one (or pass `--database`)"
    )]
    Missing { url: String },
    #[error("database `{url}` has schema version {found}, this caseops needs {expected}: {fix}")]
    Schema {
        url: String,
        found: i64,
        expected: i64,
        fix: &'static str,
    },
    #[error("database error: {0}")]
    Query(#[from] sqlx::Error),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A run's commit found the run no longer held by this process (its lease was
    /// taken over, or the run finished); nothing was written.
    #[error("run `{run_id}` is not held by this process")]
    LeaseLost { run_id: String },
    #[error("database task failed: {0}")]
    Task(String),
    /// An application appended an event of a kind the host writes itself.
    #[error("event kind `{0}` is the host's own: choose another")]
    ReservedKind(String),
    /// A commit's transitions were not numbered one after another, which a run
    /// whose transitions are lines of its row cannot store.
    #[error("the transitions committed for run `{run_id}` skip a sequence number")]
    Gap { run_id: String },
    #[error("corrupt row in `{table}`: {message}")]
    Corrupt {
        table: &'static str,
        message: String,
    },
}

/// Connections plus the dialect they speak.
#[derive(Debug, Clone)]
pub struct Db {
    backend: Arc<Backend>,
    pub dialect: Dialect,
    schema: &'static AppSchema,
    commits: Arc<AtomicUsize>,
}

/// A database URL fit for messages: the password of `user:secret@` and of a
/// `password=` (or `sslpassword=`) query parameter become `***`.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &base[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &base[..scheme + 3], &base[at..]),
                None => base.to_string(),
            }
        }
        _ => base.to_string(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("password")
                        || k.eq_ignore_ascii_case("sslpassword") =>
                {
                    format!("{k}=***")
                }
                _ => p.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// One schema change, written for both dialects.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Applied in ascending order; the host's own use 1–999 (see [`HOST_MIGRATIONS`]),
    /// an application numbers its own from 1000.
    pub version: i64,
    pub description: &'static str,
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

/// The tables and migrations an application adds to the host's (its reference
/// data, say). The host's runs, ledger, audit and outbox tables are always there.
#[derive(Debug, Clone, Copy)]
pub struct AppSchema {
    pub migrations: &'static [Migration],
    /// Tables its migrations create: a SQLite file claiming the schema version but
    /// lacking one is refused at open.
    pub tables: &'static [&'static str],
}

impl AppSchema {
    /// No tables beyond the host's.
    pub const NONE: AppSchema = AppSchema {
        migrations: &[],
        tables: &[],
    };
}

/// The host's own schema: runs, checkpoints, tool ledger, audit chain and outbox.
pub const HOST_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "runs",
        sqlite: include_str!("../../migrations/sqlite/0001_runs.sql"),
        postgres: include_str!("../../migrations/postgres/0001_runs.sql"),
    },
    Migration {
        version: 3,
        description: "health",
        sqlite: include_str!("../../migrations/sqlite/0003_health.sql"),
        postgres: include_str!("../../migrations/postgres/0003_health.sql"),
    },
    Migration {
        version: 4,
        description: "resource id",
        sqlite: include_str!("../../migrations/sqlite/0004_resource_id.sql"),
        postgres: include_str!("../../migrations/postgres/0004_resource_id.sql"),
    },
    Migration {
        version: 5,
        description: "provenance",
        sqlite: include_str!("../../migrations/sqlite/0005_provenance.sql"),
        postgres: include_str!("../../migrations/postgres/0005_provenance.sql"),
    },
    // Above 1000: application migrations before it (1000 and up) are applied already
    // in existing databases, and versions apply in order past the current one.
    Migration {
        version: 1001,
        description: "approvals",
        sqlite: include_str!("../../migrations/sqlite/1001_approvals.sql"),
        postgres: include_str!("../../migrations/postgres/1001_approvals.sql"),
    },
    // Past the service's 1002, for the same reason.
    Migration {
        version: 1003,
        description: "ledger idempotency key",
        sqlite: include_str!("../../migrations/sqlite/1003_ledger_idempotency_key.sql"),
        postgres: include_str!("../../migrations/postgres/1003_ledger_idempotency_key.sql"),
    },
    Migration {
        version: 1004,
        description: "outbox order",
        sqlite: include_str!("../../migrations/sqlite/1004_outbox_order.sql"),
        postgres: include_str!("../../migrations/postgres/1004_outbox_order.sql"),
    },
    Migration {
        version: 1005,
        description: "console",
        sqlite: include_str!("../../migrations/sqlite/1005_console.sql"),
        postgres: include_str!("../../migrations/postgres/1005_console.sql"),
    },
    Migration {
        version: 1006,
        description: "run snapshot",
        sqlite: include_str!("../../migrations/sqlite/1006_run_snapshot.sql"),
        postgres: include_str!("../../migrations/postgres/1006_run_snapshot.sql"),
    },
    Migration {
        version: 1007,
        description: "audit heads",
        sqlite: include_str!("../../migrations/sqlite/1007_audit_heads.sql"),
        postgres: include_str!("../../migrations/postgres/1007_audit_heads.sql"),
    },
    Migration {
        version: 1008,
        description: "outbox rendered",
        sqlite: include_str!("../../migrations/sqlite/1008_outbox_rendered.sql"),
        postgres: include_str!("../../migrations/postgres/1008_outbox_rendered.sql"),
    },
    Migration {
        version: 1009,
        description: "ledger without foreign keys",
        sqlite: include_str!("../../migrations/sqlite/1009_ledger_without_foreign_keys.sql"),
        postgres: include_str!("../../migrations/postgres/1009_ledger_without_foreign_keys.sql"),
    },
    Migration {
        version: 1010,
        description: "checkpoints without rowid",
        sqlite: include_str!("../../migrations/sqlite/1010_checkpoints_without_rowid.sql"),
        postgres: include_str!("../../migrations/postgres/1010_checkpoints_without_rowid.sql"),
    },
    Migration {
        version: 1011,
        description: "row format",
        sqlite: include_str!("../../migrations/sqlite/1011_row_format.sql"),
        postgres: include_str!("../../migrations/postgres/1011_row_format.sql"),
    },
    Migration {
        version: 1012,
        description: "compact run rows",
        sqlite: include_str!("../../migrations/sqlite/1012_compact_run_rows.sql"),
        postgres: include_str!("../../migrations/postgres/1012_compact_run_rows.sql"),
    },
    Migration {
        version: 1013,
        description: "compact run history",
        sqlite: include_str!("../../migrations/sqlite/1013_compact_run_history.sql"),
        postgres: include_str!("../../migrations/postgres/1013_compact_run_history.sql"),
    },
    Migration {
        version: 1014,
        description: "compact run timeline",
        sqlite: include_str!("../../migrations/sqlite/1014_compact_run_timeline.sql"),
        postgres: include_str!("../../migrations/postgres/1014_compact_run_timeline.sql"),
    },
    Migration {
        version: 1015,
        description: "compact run requests",
        sqlite: include_str!("../../migrations/sqlite/1015_compact_run_requests.sql"),
        postgres: include_str!("../../migrations/postgres/1015_compact_run_requests.sql"),
    },
];

const HOST_TABLES: &[&str] = &[
    "runs",
    "checkpoints",
    "tool_executions",
    "audit_events",
    "outbox_events",
    "approvals",
    "health_probe",
    "console_sessions",
    "host_settings",
    "run_catalogs",
    "run_transitions",
    "run_calls",
];

/// The host's migrations and the application's, in version order.
fn migrations(app: &AppSchema) -> Vec<Migration> {
    let mut all: Vec<Migration> = HOST_MIGRATIONS
        .iter()
        .chain(app.migrations)
        .copied()
        .collect();
    all.sort_by_key(|m| m.version);
    all
}

/// The schema version a database of this build has: its last migration.
fn latest(app: &AppSchema) -> i64 {
    migrations(app).last().map_or(0, |m| m.version)
}

#[derive(Debug)]
struct Embedded(&'static AppSchema);

impl MigrationSource<'static> for Embedded {
    #[allow(clippy::type_complexity)]
    fn resolve(
        self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<Vec<SqlxMigration>, sqlx::error::BoxDynError>>
                + Send
                + 'static,
        >,
    > {
        let migrations = migrations(self.0)
            .into_iter()
            .map(|m| {
                SqlxMigration::new(
                    m.version,
                    m.description.into(),
                    MigrationType::Simple,
                    SqlStr::from_static(m.postgres),
                    false,
                )
            })
            .collect();
        Box::pin(async move { Ok(migrations) })
    }
}

impl Db {
    /// Opens (creating a SQLite file if needed) and migrates to the host's schema
    /// plus `app`'s. `url` is `sqlite:///path/to/file.db`, `sqlite://relative.db`
    /// or `postgres://…`.
    pub async fn connect(
        url: &str,
        max_connections: u32,
        app: &'static AppSchema,
    ) -> Result<Self, DbError> {
        let db = Self::open(url, max_connections, true, app).await?;
        db.migrate().await?;
        Ok(db)
    }

    /// Opens a database that exists, for commands that only inspect it: never
    /// creates a file, never migrates, and refuses a schema other than this
    /// build's (older: migrate it; newer: upgrade caseops).
    pub async fn open_existing(
        url: &str,
        max_connections: u32,
        app: &'static AppSchema,
    ) -> Result<Self, DbError> {
        let db = Self::open(url, max_connections, false, app).await?;
        let found = db.schema_version().await?;
        let expected = latest(app);
        if found != expected {
            return Err(DbError::Schema {
                url: redact(url),
                found,
                expected,
                fix: if found < expected {
                    "run `caseops migrate` first"
                } else {
                    "it was written by a newer caseops; upgrade this one"
                },
            });
        }
        Ok(db)
    }

    /// The last migration applied (0 for an empty database).
    async fn schema_version(&self) -> Result<i64, DbError> {
        match &*self.backend {
            Backend::Sqlite(s) => {
                let conn = s.writer().await;
                Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
            }
            Backend::Postgres(_) => {
                let exists = self
                    .fetch_optional("SELECT to_regclass('_sqlx_migrations')::text AS t", &[])
                    .await?
                    .and_then(|r| r.get::<Option<String>>("t").ok().flatten());
                if exists.is_none() {
                    return Ok(0);
                }
                let row = self
                    .fetch_optional(
                        "SELECT COALESCE(MAX(version), 0) AS v FROM _sqlx_migrations WHERE success",
                        &[],
                    )
                    .await?;
                Ok(row.map(|r| r.get::<i64>("v")).transpose()?.unwrap_or(0))
            }
        }
    }

    async fn open(
        url: &str,
        max_connections: u32,
        create: bool,
        schema: &'static AppSchema,
    ) -> Result<Self, DbError> {
        let connect_error = |message: String| DbError::Connect {
            url: redact(url),
            message,
        };
        let (dialect, backend) = if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            install_default_drivers();
            let pool = AnyPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(std::time::Duration::from_secs(5))
                // No ping before every acquire: it was a second round trip per
                // statement (145 -> 85 us for `SELECT 1` here). A connection broken
                // by a database restart fails one statement and is then discarded.
                .test_before_acquire(false)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        use sqlx::Executor;
                        // The second setting is a backstop: no transaction of ours
                        // stays idle for more than milliseconds, so one that does
                        // was abandoned, and the server ends it instead of letting it
                        // hold locks and a pooled connection for ever.
                        conn.execute(
                            "SET synchronous_commit = off; SET idle_in_transaction_session_timeout = '30s'",
                        )
                        .await?;
                        Ok(())
                    })
                })
                .connect(url)
                .await;
            let pool = match pool {
                Ok(pool) => pool,
                // The pool only says it timed out; one direct attempt says why
                // (connection refused, no such database, authentication failed).
                Err(sqlx::Error::PoolTimedOut) => {
                    use sqlx::Connection;
                    let cause = match sqlx::AnyConnection::connect(url).await {
                        Err(e) => e.to_string(),
                        Ok(_) => "the pool timed out".to_string(),
                    };
                    return Err(connect_error(cause));
                }
                Err(e) => return Err(connect_error(postgres_hint(&e.to_string()))),
            };
            (
                Dialect::Postgres,
                Backend::Postgres(sql::Pg::new(pool, max_connections)),
            )
        } else if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = sqlite_path(rest);
            if path.is_empty() || path == ":memory:" {
                return Err(connect_error(
                    "expected a file path (an in-memory database would not be shared by its connections)".into(),
                ));
            }
            if !create && !std::path::Path::new(path).exists() {
                return Err(DbError::Missing { url: redact(url) });
            }
            let sqlite =
                sql::Sqlite::open(path, max_connections as usize).map_err(connect_error)?;
            (Dialect::Sqlite, Backend::Sqlite(sqlite))
        } else {
            return Err(connect_error(
                "expected a `sqlite:` or `postgres://` URL".into(),
            ));
        };
        Ok(Db {
            backend: Arc::new(backend),
            dialect,
            schema,
            commits: Default::default(),
        })
    }

    pub async fn migrate(&self) -> Result<(), DbError> {
        let fail = |e: &dyn std::fmt::Display| DbError::Migrate(e.to_string());
        match &*self.backend {
            Backend::Postgres(pg) => {
                let migrator = Migrator::new(Embedded(self.schema))
                    .await
                    .map_err(|e| fail(&e))?;
                migrator.run(&pg.pool).await.map_err(|e| fail(&e))
            }
            Backend::Sqlite(s) => {
                let mut conn = s.writer().await;
                let found: i64 = conn
                    .pragma_query_value(None, "user_version", |r| r.get(0))
                    .map_err(|e| fail(&e))?;
                // A file from a newer caseops: its schema is not ours to use or to
                // "migrate" backwards.
                let latest = latest(self.schema);
                if found > latest {
                    return Err(DbError::Migrate(format!(
                        "the database has schema version {found}, newer than this caseops ({latest}): upgrade caseops"
                    )));
                }
                migrate_sqlite(&mut conn, &migrations(self.schema)).map_err(|e| fail(&e))?;
                check_sqlite_tables(&conn, self.schema)
            }
        }
    }

    pub async fn fetch_all(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, DbError> {
        self.backend.fetch_all(sql, params).await
    }

    pub async fn fetch_optional(
        &self,
        sql: &str,
        params: &[Param],
    ) -> Result<Option<Row>, DbError> {
        Ok(self.fetch_all(sql, params).await?.into_iter().next())
    }

    /// One statement outside any transaction; returns the rows it changed.
    pub async fn execute(&self, sql: &str, params: &[Param]) -> Result<u64, DbError> {
        self.backend.execute(sql, params).await
    }

    /// A statement that writes and returns rows (`UPDATE … RETURNING`), in its own
    /// implicit transaction.
    pub async fn write_returning(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, DbError> {
        self.backend.write_returning(sql, params).await
    }

    /// Whether the database can durably commit a write now: one flushed upsert of a
    /// one-row table (a `SELECT 1` answers on a full or read-only database too).
    pub async fn probe_write(&self) -> Result<(), DbError> {
        let mut tx = self.begin_write().await?;
        tx.execute(
            "INSERT INTO health_probe (id, at_ms) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms",
            &[Param::from(now_ms())],
        )
        .await?;
        tx.commit().await
    }

    /// [`Db::probe_write`] for a readiness probe: its error as text, and a database
    /// that has not committed within `within` counted as not ready.
    pub async fn probe_write_within(&self, within: std::time::Duration) -> Result<(), String> {
        match tokio::time::timeout(within, self.probe_write()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "the database did not answer within {} ms",
                within.as_millis()
            )),
        }
    }

    /// A write transaction (on SQLite it holds the write lock from its start).
    pub async fn begin_write(&self) -> Result<Tx, DbError> {
        self.backend.begin_write(false).await
    }

    /// A write transaction whose commit need not wait for the disk (see
    /// `CommitPoint::must_flush`); on SQLite the same as [`Db::begin_write`].
    pub async fn begin_lazy_write(&self) -> Result<Tx, DbError> {
        self.backend.begin_write(true).await
    }

    pub(crate) fn count_commit(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// Transactions committed by the run store since the pool opened.
    pub fn commits(&self) -> usize {
        self.commits.load(Ordering::Relaxed)
    }
}

/// A PostgreSQL connection error as a user can act on it: without the server's
/// source position (`at line 948`), and with the fix for a missing database.
fn postgres_hint(message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(at) if message[at + 9..].chars().all(|c| c.is_ascii_digit()) => &message[..at],
        _ => message,
    };
    match message
        .split("database \"")
        .nth(1)
        .and_then(|rest| rest.split_once("\" does not exist"))
    {
        Some((name, _)) => format!(
            "{message}: create it with `createdb {name}` (or `CREATE DATABASE {name}`) and start again"
        ),
        None => message.to_string(),
    }
}

/// `sqlite:///abs/path.db?mode=rwc` → `/abs/path.db`; `sqlite://rel.db` → `rel.db`.
fn sqlite_path(rest: &str) -> &str {
    let rest = rest.split('?').next().unwrap_or_default();
    rest.strip_prefix("//").unwrap_or(rest)
}

/// Applies the embedded SQLite migrations past the file's `user_version`, each in
/// its own transaction with the version bump.
fn migrate_sqlite(
    conn: &mut rusqlite::Connection,
    list: &[Migration],
) -> Result<(), rusqlite::Error> {
    for m in list {
        // Read the version inside the write lock: two processes may start together.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut current: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if current == 0 {
            // Files created by earlier builds recorded migrations in sqlx's table.
            current = tx
                .query_row(
                    "SELECT MAX(version) FROM _sqlx_migrations WHERE success",
                    [],
                    |r| r.get::<_, Option<i64>>(0),
                )
                .unwrap_or(None)
                .unwrap_or(0);
        }
        if m.version > current {
            tx.execute_batch(m.sqlite)?;
            tx.pragma_update(None, "user_version", m.version)?;
        }
        tx.commit()?;
    }
    Ok(())
}

/// The tables the migrations create: a file whose `user_version` claims them but
/// lacks one (copied, hand-edited) is refused now rather than failing later with
/// `no such table`.
fn check_sqlite_tables(conn: &rusqlite::Connection, app: &AppSchema) -> Result<(), DbError> {
    let mut missing = Vec::new();
    for table in HOST_TABLES.iter().chain(app.tables) {
        let found: i64 = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )?;
        if found == 0 {
            missing.push(format!("`{table}`"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    Err(DbError::Migrate(format!(
        "the database claims schema version {version} but has no table {}: it was altered; restore it or start from a new file",
        missing.join(", ")
    )))
}

/// A JSON value's compact text, the same as its `Display` gives, written straight
/// into a buffer: `Display` passes each token through the formatter and grows its
/// string from empty, which showed as 1% of a run's instructions.
pub fn json_text(value: &serde_json::Value) -> String {
    // A `Value` always serializes (its keys are strings, its numbers finite); the
    // fallback is only there so that no path can panic.
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_text_is_what_the_value_displays_as() {
        let values = [
            serde_json::json!(null),
            serde_json::json!({"b": [1, -2.5, 1e300, 0.1], "a": {"é\u{1}\"\n": true}}),
            serde_json::json!("x".repeat(300)),
            serde_json::json!([u64::MAX, i64::MIN, {}, []]),
        ];
        for value in values {
            assert_eq!(json_text(&value), value.to_string());
        }
    }

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(
            redact("postgres://app@db/x?sslmode=require&Password=s3cret&sslpassword=k"),
            "postgres://app@db/x?sslmode=require&Password=***&sslpassword=***"
        );
        assert_eq!(
            redact("postgres://app:a@b@db/x?password=p"),
            "postgres://app:***@db/x?password=***"
        );
        assert_eq!(redact("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
    }

    #[test]
    fn a_missing_postgres_database_names_the_command_that_creates_it() {
        assert_eq!(
            postgres_hint(
                "error returned from database: database \"x\" does not exist at line 948"
            ),
            "error returned from database: database \"x\" does not exist: create it with `createdb x` (or `CREATE DATABASE x`) and start again"
        );
        assert_eq!(
            postgres_hint("password authentication failed"),
            "password authentication failed"
        );
    }

    #[test]
    fn sqlite_urls_name_absolute_and_relative_files() {
        assert_eq!(sqlite_path("///tmp/a.db?mode=rwc"), "/tmp/a.db");
        assert_eq!(sqlite_path("//caseops.db"), "caseops.db");
        assert_eq!(sqlite_path("caseops.db"), "caseops.db");
    }

    /// An application's own table, migrated after the host's.
    const NOTES: AppSchema = AppSchema {
        migrations: &[Migration {
            version: 1000,
            description: "notes",
            sqlite: "CREATE TABLE notes (id TEXT PRIMARY KEY);",
            postgres: "CREATE TABLE notes (id TEXT PRIMARY KEY);",
        }],
        tables: &["notes"],
    };

    #[test]
    fn application_migrations_follow_the_hosts_in_version_order() {
        let order: Vec<i64> = migrations(&NOTES).iter().map(|m| m.version).collect();
        assert_eq!(
            order,
            [
                1, 3, 4, 5, 1000, 1001, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012,
                1013, 1014, 1015
            ]
        );
        assert_eq!(latest(&NOTES), 1015);
    }

    #[tokio::test]
    async fn a_database_without_an_applications_table_is_refused() {
        let dir = std::env::temp_dir().join(format!("caseops-app-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("a.db").display());
        // Migrated by the application, then its table dropped by hand.
        let db = Db::connect(&url, 1, &NOTES).await.unwrap();
        db.execute("DROP TABLE notes", &[]).await.unwrap();
        drop(db);
        let err = Db::connect(&url, 1, &NOTES).await.unwrap_err().to_string();
        assert!(err.contains("has no table `notes`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// 1008 rebuilds SQLite's outbox table (to let `payload` be NULL): pending
    /// and published rows of a file at 1007 come through with every column.
    #[test]
    fn the_outbox_rebuild_keeps_every_row_of_an_earlier_file() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        let all = migrations(&AppSchema::NONE);
        let (before, after): (Vec<Migration>, Vec<Migration>) =
            all.iter().partition(|m| m.version < 1008);
        migrate_sqlite(&mut conn, &before).unwrap();
        conn.execute_batch(
            "INSERT INTO outbox_events (event_id, tenant_id, run_id, topic, payload, created_at, published_at, seq) \
             VALUES ('e1', 't', 'r', 'x.v1', '{\"id\":\"e1\"}', 5, NULL, 7), ('e2', 't', 'r', 'x.v1', '{}', 6, 9, 8)",
        )
        .unwrap();
        migrate_sqlite(&mut conn, &after).unwrap();
        type OutboxRow = (String, Option<String>, i64, Option<i64>, i64);
        let rows: Vec<OutboxRow> = conn
            .prepare("SELECT event_id, payload, created_at, published_at, seq FROM outbox_events ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rows,
            [
                ("e1".into(), Some(r#"{"id":"e1"}"#.into()), 5, None, 7),
                ("e2".into(), Some("{}".into()), 6, Some(9), 8)
            ]
        );
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, latest(&AppSchema::NONE));
        // The relay's pending index came back with the table.
        let indexes: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'outbox_events' AND name LIKE 'outbox_events_%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexes, 2);
    }

    /// 1011 to 1015 start a new database at the most compact format and leave
    /// one that holds runs where it was: replicas of an earlier version may be
    /// serving it.
    #[test]
    fn the_row_format_moves_on_only_for_a_database_without_runs() {
        // The format after every migration, with a run inserted (if any) just
        // before migration `run_before`.
        let format_after = |run_before: Option<i64>| -> String {
            let mut conn = rusqlite::Connection::open_in_memory().unwrap();
            let all = migrations(&AppSchema::NONE);
            let split = run_before.unwrap_or(i64::MAX);
            let (before, after): (Vec<Migration>, Vec<Migration>) =
                all.iter().partition(|m| m.version < split);
            migrate_sqlite(&mut conn, &before).unwrap();
            if run_before.is_some() {
                conn.execute_batch(
                    "INSERT INTO runs (run_id, tenant_id, resource_id, actor, idempotency_key, request_hash, goal, planner_kind, status, state, spec, bundle_digest, created_at, updated_at) \
                     VALUES ('r', 't', 'c', 'a', 'k', 'h', 'g', 'p', 'completed', 'completed', '{}', 'd', 1, 1)",
                )
                .unwrap();
            }
            migrate_sqlite(&mut conn, &after).unwrap();
            conn.query_row(
                "SELECT value FROM host_settings WHERE name = 'row_format'",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(format_after(None), "compact-requests");
        assert_eq!(format_after(Some(1011)), "full");
        assert_eq!(format_after(Some(1012)), "compact");
        assert_eq!(format_after(Some(1013)), "compact-runs");
        assert_eq!(format_after(Some(1014)), "compact-history");
        assert_eq!(format_after(Some(1015)), "compact-timeline");
    }

    /// 1010 rebuilds SQLite's checkpoints without a rowid: every row of a file
    /// at 1009 comes through with every column, and the key still refuses a
    /// repeated sequence.
    #[test]
    fn the_checkpoints_rebuild_keeps_every_row_and_the_key() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        let all = migrations(&AppSchema::NONE);
        let (before, after): (Vec<Migration>, Vec<Migration>) =
            all.iter().partition(|m| m.version < 1010);
        migrate_sqlite(&mut conn, &before).unwrap();
        conn.execute_batch(
            "INSERT INTO runs (run_id, tenant_id, resource_id, actor, idempotency_key, request_hash, goal, planner_kind, status, state, spec, bundle_digest, created_at, updated_at) \
             VALUES ('r', 't', 'c', 'a', 'k', 'h', 'g', 'p', 'running', 'observing', '{}', 'd', 1, 1); \
             INSERT INTO checkpoints (run_id, sequence, from_state, to_state, at_ms, reason, snapshot) \
             VALUES ('r', 1, 'created', 'planning', 5, NULL, '{\"old\":true}'), ('r', 2, 'planning', 'observing', 6, 'why', NULL)",
        )
        .unwrap();
        migrate_sqlite(&mut conn, &after).unwrap();
        type CheckpointRow = (
            String,
            i64,
            String,
            String,
            i64,
            Option<String>,
            Option<String>,
        );
        let rows: Vec<CheckpointRow> = conn
            .prepare("SELECT run_id, sequence, from_state, to_state, at_ms, reason, snapshot FROM checkpoints ORDER BY sequence")
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rows,
            [
                (
                    "r".into(),
                    1,
                    "created".into(),
                    "planning".into(),
                    5,
                    None,
                    Some(r#"{"old":true}"#.into())
                ),
                (
                    "r".into(),
                    2,
                    "planning".into(),
                    "observing".into(),
                    6,
                    Some("why".into()),
                    None
                )
            ]
        );
        let repeated = conn.execute(
            "INSERT INTO checkpoints (run_id, sequence, from_state, to_state, at_ms) VALUES ('r', 2, 'a', 'b', 7)",
            [],
        );
        assert!(repeated.is_err(), "a repeated sequence is refused");
        let table: String = conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'checkpoints'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(table.ends_with("WITHOUT ROWID"), "{table}");
    }

    /// Files written before version 1006 hold a snapshot in every checkpoint, inserted
    /// as runs interleaved. Copied in that order into a table keyed by run, the rows
    /// split pages that stay a third empty, and the file grows instead of shrinking.
    #[test]
    fn the_checkpoints_rebuild_of_old_snapshots_does_not_grow_the_file() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        let all = migrations(&AppSchema::NONE);
        let (before, after): (Vec<Migration>, Vec<Migration>) =
            all.iter().partition(|m| m.version < 1010);
        migrate_sqlite(&mut conn, &before).unwrap();
        let runs: Vec<String> = (0..100).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let tx = conn.transaction().unwrap();
        for run in &runs {
            tx.execute(
                "INSERT INTO runs (run_id, tenant_id, resource_id, actor, idempotency_key, request_hash, goal, planner_kind, status, state, spec, bundle_digest, created_at, updated_at) \
                 VALUES (?1, 't', 'c', 'a', ?1, 'h', 'g', 'p', 'succeeded', 'completed', '{}', 'd', 1, 1)",
                [run],
            )
            .unwrap();
        }
        let snapshot = format!("{{\"observations\":\"{}\"}}", "x".repeat(780));
        for sequence in 1..=22 {
            for run in &runs {
                tx.execute(
                    "INSERT INTO checkpoints (run_id, sequence, from_state, to_state, at_ms, snapshot) \
                     VALUES (?1, ?2, 'planning', 'observing', 1, ?3)",
                    rusqlite::params![run, sequence, snapshot],
                )
                .unwrap();
            }
        }
        tx.commit().unwrap();
        let pages_in_use = |conn: &rusqlite::Connection| -> i64 {
            conn.query_row(
                "SELECT (SELECT page_count FROM pragma_page_count()) - (SELECT freelist_count FROM pragma_freelist_count())",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        let old = pages_in_use(&conn);
        migrate_sqlite(&mut conn, &after).unwrap();
        let new = pages_in_use(&conn);
        assert!(
            new <= old,
            "the rebuilt table takes {new} pages, the old one and its key {old}"
        );
        let kept: i64 = conn
            .query_row("SELECT count(*) FROM checkpoints", [], |r| r.get(0))
            .unwrap();
        assert_eq!(kept, 2_200);
    }

    #[tokio::test]
    async fn reopening_a_sqlite_file_does_not_reapply_migrations() {
        let dir = std::env::temp_dir().join(format!("caseops-migrate-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("m.db").display());
        let first = Db::connect(&url, 1, &NOTES).await.unwrap();
        first
            .execute("INSERT INTO notes (id) VALUES ('n-1')", &[])
            .await
            .unwrap();
        drop(first);
        let again = Db::connect(&url, 1, &NOTES).await.unwrap();
        let kept = again
            .fetch_optional("SELECT id FROM notes WHERE id = 'n-1'", &[])
            .await
            .unwrap();
        assert!(kept.is_some(), "the second open kept the first one's rows");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_sqlite_file_that_claims_tables_it_lacks_is_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("caseops-lying-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("l.db");
        let conn = rusqlite::Connection::open(&file).unwrap();
        conn.pragma_update(None, "user_version", latest(&AppSchema::NONE))
            .unwrap();
        drop(conn);
        let err = Db::connect(&format!("sqlite://{}", file.display()), 1, &AppSchema::NONE)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("has no table `runs`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_sqlite_file_from_a_newer_caseops_is_refused() {
        let dir = std::env::temp_dir().join(format!("caseops-newer-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("n.db");
        let conn = rusqlite::Connection::open(&file).unwrap();
        conn.pragma_update(None, "user_version", 99_999).unwrap();
        drop(conn);
        let err = Db::connect(&format!("sqlite://{}", file.display()), 1, &AppSchema::NONE)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("schema version 99999, newer than this caseops"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_in_memory_sqlite_url_is_refused_with_the_reason() {
        let err = Db::connect("sqlite::memory:", 1, &AppSchema::NONE)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("in-memory"), "{err}");
    }
}
