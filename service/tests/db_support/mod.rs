//! Fresh databases for tests: a SQLite file always, and a PostgreSQL database when
//! `CASEOPS_TEST_POSTGRES_URL` names a server (CI always sets it; there a missing
//! PostgreSQL is a failure, never a silent skip).
#![allow(dead_code)]

pub fn admin_postgres_url() -> Option<String> {
    match std::env::var("CASEOPS_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set CASEOPS_TEST_POSTGRES_URL"
            );
            None
        }
    }
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A new, empty database URL for each backend available.
pub async fn fresh_databases(name: &str) -> Vec<(&'static str, String)> {
    caseops_service::install_tls_provider();
    let dir = std::env::temp_dir().join(unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = vec![(
        "sqlite",
        format!("sqlite://{}", dir.join("caseops.db").display()),
    )];
    if let Some(admin) = admin_postgres_url() {
        sqlx::any::install_default_drivers();
        let db = unique(name);
        let pool = sqlx::AnyPool::connect(&admin)
            .await
            .expect("postgres answers");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        let base = admin
            .rsplit_once('/')
            .map(|(b, _)| b.to_string())
            .unwrap_or(admin.clone());
        out.push(("postgres", format!("{base}/{db}")));
    }
    out
}
