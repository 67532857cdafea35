//! Console sessions: an API key exchanged for a cookie.
//!
//! The cookie holds a random session id; the table holds only its SHA-256, the
//! SHA-256 of the API key it was opened with, the session's CSRF token and its
//! expiry. Every replica reads the same rows, so a session opened on one is good on
//! all, and a sign-out on one ends it everywhere.

use caseops_runtime::fingerprint::sha256_hex;

use super::{Db, DbError, now_ms};
use crate::params;

/// An open session as a request finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub tenant_id: String,
    /// SHA-256 (hex) of the API key the session was opened with.
    pub key_hash: String,
    pub csrf_token: String,
    pub expires_at_ms: i64,
}

/// A fresh session's secrets, as handed to the browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The cookie's value.
    pub session_id: String,
    pub csrf_token: String,
}

/// 244 random bits as 62 hex characters (two v4 UUIDs: the system's random source,
/// without another dependency).
pub fn random_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Opens a session of `tenant` for the key hashed `key_hash`, good for `ttl_ms`;
/// expired sessions are deleted on the way.
pub async fn open(db: &Db, tenant: &str, key_hash: &str, ttl_ms: i64) -> Result<Opened, DbError> {
    let now = now_ms();
    db.execute(
        "DELETE FROM console_sessions WHERE expires_at <= ?",
        &params![now],
    )
    .await?;
    let opened = Opened {
        session_id: random_token(),
        csrf_token: random_token(),
    };
    db.execute(
        "INSERT INTO console_sessions (session_hash, tenant_id, key_hash, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
        &params![
            sha256_hex(opened.session_id.as_bytes()),
            tenant,
            key_hash,
            &opened.csrf_token,
            now,
            now + ttl_ms
        ],
    )
    .await?;
    Ok(opened)
}

/// The live session a cookie names, if any (an expired one is none).
pub async fn find(db: &Db, session_id: &str) -> Result<Option<Session>, DbError> {
    let row = db
        .fetch_optional(
            "SELECT tenant_id, key_hash, csrf_token, expires_at FROM console_sessions WHERE session_hash = ? AND expires_at > ?",
            &params![sha256_hex(session_id.as_bytes()), now_ms()],
        )
        .await?;
    row.map(|r| {
        Ok(Session {
            tenant_id: r.get("tenant_id")?,
            key_hash: r.get("key_hash")?,
            csrf_token: r.get("csrf_token")?,
            expires_at_ms: r.get("expires_at")?,
        })
    })
    .transpose()
}

/// Ends the session a cookie names (nothing if it is already gone).
pub async fn close(db: &Db, session_id: &str) -> Result<(), DbError> {
    db.execute(
        "DELETE FROM console_sessions WHERE session_hash = ?",
        &params![sha256_hex(session_id.as_bytes())],
    )
    .await?;
    Ok(())
}
