//! How a database's ledger rows and checkpoints are written (migration 1011).
//!
//! `Compact` stores '' for a value a reader derives exactly: a ledger row's
//! arguments hash and action fingerprint (from its tool and stored arguments), its
//! bundle digest when it is its run's, and a checkpoint's `from_state` when it is
//! the `to_state` of the checkpoint before it. Readers of this version fill them
//! in, so both formats read the same; versions before 1011 cannot read compact
//! rows, which is why a database that already held runs stays `Full` until the
//! operator says every replica runs this version (`caseops migrate --compact-rows`).

use super::{Db, DbError};
use caseops_runtime::Checkpoint;
use caseops_runtime::fingerprint::{action_fingerprint, arguments_hash};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowFormat {
    /// Every value stored, as versions before 1011 read them.
    #[default]
    Full,
    /// Derivable values stored as ''.
    Compact,
}

impl RowFormat {
    /// The database's format, as its `host_settings` row says.
    pub async fn of(db: &Db) -> Result<RowFormat, DbError> {
        let row = db
            .fetch_optional(
                "SELECT value FROM host_settings WHERE name = 'row_format'",
                &[],
            )
            .await?;
        match row
            .map(|r| r.get::<String>("value"))
            .transpose()?
            .as_deref()
        {
            Some("compact") => Ok(RowFormat::Compact),
            Some("full") | None => Ok(RowFormat::Full),
            Some(other) => Err(DbError::Corrupt {
                table: "host_settings",
                message: format!("unknown row format `{other}`"),
            }),
        }
    }

    /// Makes the database compact: replicas write compact rows from their next
    /// start. Only once no replica of a version before 1011 serves it.
    pub async fn make_compact(db: &Db) -> Result<(), DbError> {
        db.execute(
            "UPDATE host_settings SET value = 'compact' WHERE name = 'row_format'",
            &[],
        )
        .await?;
        Ok(())
    }
}

/// A checkpoint's `from_state` as stored: '' when `before` (the checkpoint
/// written just before it, in the same statement) ended where it starts.
pub(crate) fn stored_from<'a>(
    format: RowFormat,
    before: Option<&Checkpoint>,
    cp: &'a Checkpoint,
) -> &'a str {
    match (format, before) {
        (RowFormat::Compact, Some(b)) if b.sequence + 1 == cp.sequence && b.to == cp.from => "",
        _ => &cp.from,
    }
}

/// The arguments hash and fingerprint as stored: each '' when it is what a
/// reader derives from `arguments_text`, the arguments as stored. Derived from the
/// text rather than the value in hand, so that a number the text does not carry
/// exactly keeps its hash written out.
pub(crate) fn stored_hashes<'a>(
    format: RowFormat,
    tool: &str,
    arguments_text: &str,
    hash: &'a str,
    fingerprint: &'a str,
) -> (&'a str, &'a str) {
    if format == RowFormat::Full {
        return (hash, fingerprint);
    }
    let Ok(arguments) = serde_json::from_str::<Value>(arguments_text) else {
        return (hash, fingerprint);
    };
    let derived = derived_hashes(tool, &arguments);
    (
        if derived.0 == hash { "" } else { hash },
        if derived.1 == fingerprint {
            ""
        } else {
            fingerprint
        },
    )
}

/// What a compact ledger row left out: (arguments hash, action fingerprint).
pub(crate) fn derived_hashes(tool: &str, arguments: &Value) -> (String, String) {
    (
        arguments_hash(arguments),
        action_fingerprint(tool, arguments),
    )
}

/// SQL for a ledger row's `bundle_digest` column. Full: `?`, the digest.
/// Compact: '' when the digest is the run's; it takes the digest, the run id and
/// the digest again.
pub(crate) fn bundle_digest_sql(format: RowFormat) -> &'static str {
    match format {
        RowFormat::Full => "?",
        RowFormat::Compact => {
            "CASE WHEN ? = (SELECT bundle_digest FROM runs WHERE run_id = ?) THEN '' ELSE ? END"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cp(sequence: u64, from: &str, to: &str) -> Checkpoint {
        Checkpoint {
            run_id: "r".into(),
            sequence,
            from: from.into(),
            to: to.into(),
            at_ms: 0,
            reason: None,
            snapshot: Value::Null,
        }
    }

    #[test]
    fn a_compact_checkpoint_leaves_out_only_the_state_its_predecessor_ended_in() {
        let (a, b, c) = (cp(1, "s0", "s1"), cp(2, "s1", "s2"), cp(4, "s2", "s3"));
        assert_eq!(stored_from(RowFormat::Compact, None, &a), "s0");
        assert_eq!(stored_from(RowFormat::Compact, Some(&a), &b), "");
        assert_eq!(stored_from(RowFormat::Full, Some(&a), &b), "s1");
        // Not the checkpoint just before it, or another state: written out.
        assert_eq!(stored_from(RowFormat::Compact, Some(&b), &c), "s2");
        assert_eq!(
            stored_from(RowFormat::Compact, Some(&a), &cp(2, "other", "s2")),
            "other"
        );
    }

    #[test]
    fn compact_hashes_are_left_out_only_when_the_stored_text_derives_them() {
        let args = json!({"item": "A-7", "n": 1.5});
        let text = args.to_string();
        let (h, f) = derived_hashes("t", &args);
        assert_eq!(
            stored_hashes(RowFormat::Compact, "t", &text, &h, &f),
            ("", "")
        );
        assert_eq!(
            stored_hashes(RowFormat::Full, "t", &text, &h, &f),
            (h.as_str(), f.as_str())
        );
        // Hashes of something else (another tool, other arguments) stay.
        let (_, other) = derived_hashes("u", &args);
        assert_eq!(
            stored_hashes(RowFormat::Compact, "t", &text, &h, &other),
            ("", other.as_str())
        );
        assert_eq!(
            stored_hashes(RowFormat::Compact, "t", "not json", &h, &f),
            (h.as_str(), f.as_str())
        );
    }
}
