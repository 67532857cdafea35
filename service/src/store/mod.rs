//! Durable runs on SQLite (embedded default) or PostgreSQL, through one `sqlx` Any
//! pool. Queries are written once with `?` placeholders; PostgreSQL gets `$n`.

pub mod audit;
pub mod reference;
pub mod runs;

use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyPool, AssertSqlSafe, SqlStr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("cannot open database `{url}`: {message}")]
    Connect { url: String, message: String },
    #[error("migrating database failed: {0}")]
    Migrate(String),
    #[error("database error: {0}")]
    Query(#[from] sqlx::Error),
    #[error("corrupt row in `{table}`: {message}")]
    Corrupt {
        table: &'static str,
        message: String,
    },
}

/// A pool plus the dialect it speaks.
#[derive(Debug, Clone)]
pub struct Db {
    pub pool: AnyPool,
    pub dialect: Dialect,
    commits: std::sync::Arc<AtomicUsize>,
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db` for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[derive(Debug)]
struct Embedded(Dialect);

const SQLITE: &[(i64, &str, &str)] = &[
    (
        1,
        "runs",
        include_str!("../../migrations/sqlite/0001_runs.sql"),
    ),
    (
        2,
        "reference",
        include_str!("../../migrations/sqlite/0002_reference.sql"),
    ),
];
const POSTGRES: &[(i64, &str, &str)] = &[
    (
        1,
        "runs",
        include_str!("../../migrations/postgres/0001_runs.sql"),
    ),
    (
        2,
        "reference",
        include_str!("../../migrations/postgres/0002_reference.sql"),
    ),
];

impl MigrationSource<'static> for Embedded {
    #[allow(clippy::type_complexity)]
    fn resolve(
        self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<Vec<Migration>, sqlx::error::BoxDynError>>
                + Send
                + 'static,
        >,
    > {
        let list = match self.0 {
            Dialect::Sqlite => SQLITE,
            Dialect::Postgres => POSTGRES,
        };
        let migrations = list
            .iter()
            .map(|(v, d, sql)| {
                Migration::new(
                    *v,
                    (*d).into(),
                    MigrationType::Simple,
                    SqlStr::from_static(sql),
                    false,
                )
            })
            .collect();
        Box::pin(async move { Ok(migrations) })
    }
}

impl Db {
    /// Opens (creating a SQLite file if needed) and migrates. `url` is
    /// `sqlite:///path/to/file.db` or `postgres://…`.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, DbError> {
        install_default_drivers();
        let dialect = if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Dialect::Postgres
        } else if url.starts_with("sqlite:") {
            Dialect::Sqlite
        } else {
            return Err(DbError::Connect {
                url: redact(url),
                message: "expected a `sqlite:` or `postgres://` URL".into(),
            });
        };
        let url_with_mode = match dialect {
            Dialect::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            }
            _ => url.to_string(),
        };
        let mut options = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(std::time::Duration::from_secs(5));
        if dialect == Dialect::Sqlite {
            options = options.after_connect(|conn, _| {
                Box::pin(async move {
                    use sqlx::Executor;
                    // WAL lets readers run beside the writer; a busy writer is waited for.
                    conn.execute("PRAGMA journal_mode = WAL").await?;
                    conn.execute("PRAGMA busy_timeout = 5000").await?;
                    conn.execute("PRAGMA synchronous = NORMAL").await?;
                    conn.execute("PRAGMA foreign_keys = ON").await?;
                    Ok(())
                })
            });
        }
        let pool = options
            .connect(&url_with_mode)
            .await
            .map_err(|e| DbError::Connect {
                url: redact(url),
                message: e.to_string(),
            })?;
        let db = Db {
            pool,
            dialect,
            commits: Default::default(),
        };
        db.migrate().await?;
        Ok(db)
    }

    pub async fn migrate(&self) -> Result<(), DbError> {
        let migrator = Migrator::new(Embedded(self.dialect))
            .await
            .map_err(|e| DbError::Migrate(e.to_string()))?;
        migrator
            .run(&self.pool)
            .await
            .map_err(|e| DbError::Migrate(e.to_string()))
    }

    /// The SQL for this dialect: `?` placeholders become `$1, $2, …` on PostgreSQL.
    pub fn sql(&self, sql: &'static str) -> AssertSqlSafe<String> {
        self.sql_built(sql.to_string())
    }

    /// Like [`Db::sql`] for SQL assembled at run time from fixed fragments only
    /// (e.g. a multi-row `VALUES` list); values are always bound, never spliced.
    pub fn sql_built(&self, sql: String) -> AssertSqlSafe<String> {
        AssertSqlSafe(match self.dialect {
            Dialect::Sqlite => sql,
            Dialect::Postgres => {
                let mut out = String::with_capacity(sql.len() + 8);
                let mut n = 0;
                for c in sql.chars() {
                    if c == '?' {
                        n += 1;
                        out.push('$');
                        out.push_str(&n.to_string());
                    } else {
                        out.push(c);
                    }
                }
                out
            }
        })
    }

    /// A transaction that will write. On SQLite it takes the write lock up front
    /// (`BEGIN IMMEDIATE`): a transaction that reads first and then upgrades can fail
    /// at once with SQLITE_BUSY instead of waiting, under concurrent writers.
    pub async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, DbError> {
        Ok(match self.dialect {
            Dialect::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Dialect::Postgres => self.pool.begin().await?,
        })
    }

    pub(crate) fn count_commit(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// Transactions committed by the run store since the pool opened.
    pub fn commits(&self) -> usize {
        self.commits.load(Ordering::Relaxed)
    }
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
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
    }
}
