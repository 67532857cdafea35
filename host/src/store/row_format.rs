//! How a database's ledger rows and checkpoints are written (migration 1011).
//!
//! `Compact` stores '' for a value a reader derives exactly: a ledger row's
//! arguments hash and action fingerprint (from its tool and stored arguments), its
//! bundle digest when it is its run's, and a checkpoint's `from_state` when it is
//! the `to_state` of the checkpoint before it. Readers of this version fill them
//! in, so both formats read the same; versions before 1011 cannot read compact
//! rows, which is why a database that already held runs stays `Full` until the
//! operator says every replica runs this version (`caseops migrate --compact-rows`).
//!
//! `CompactRuns` (migration 1012) also leaves out of a run's row what its other
//! columns hold: the spec's identity fields, and in the provenance each entry's
//! run id prefix and bundle digest. The spec's catalog is stored once per distinct
//! list of names, in `run_catalogs`. That brings the row of a typical finished
//! run under half a SQLite page, so two share one.
//!
//! `CompactHistory` (migration 1013) also stores a run's own two audit events
//! (`agent.run.started`, `agent.run`) without their payload, which follows from
//! the run's row: see [`super::audit::stored_payload`]. Their hashes cover the
//! payload as before, so `audit verify` rebuilds it and still proves the chain,
//! and now the run row's columns it was rebuilt from as well.
//!
//! `CompactTimeline` (migration 1014) also keeps a new run's transitions as lines
//! of text in its own row (`history`), appended by the update each commit makes
//! anyway: see [`super::timeline`].
//!
//! `CompactRequests` (migration 1015) also stores a new run's `request_hash` and
//! `request_id` as '' where they are what the row's other columns rebuild: see
//! [`stored_request`].

use super::{Db, DbError};
use caseops_runtime::fingerprint::{canonical_json, sha256_hex};
use caseops_runtime::{Checkpoint, RunSpec};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Ordered: each format leaves out what the one before it does, and more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum RowFormat {
    /// Every value stored, as versions before 1011 read them.
    #[default]
    Full,
    /// Derivable ledger and checkpoint values stored as '' (1011).
    Compact,
    /// `Compact`, and run rows without what their columns repeat (1012).
    CompactRuns,
    /// `CompactRuns`, and a run's own audit events without the payload its row
    /// holds (1013).
    CompactHistory,
    /// `CompactHistory`, and a new run's transitions as lines of its own row
    /// (1014, see [`super::timeline`]).
    CompactTimeline,
    /// `CompactTimeline`, and a new run's request hash and request id as ''
    /// where its other columns rebuild them (1015, see [`stored_request`]).
    CompactRequests,
}

impl RowFormat {
    /// The most compact format this version writes.
    pub const NEWEST: RowFormat = RowFormat::CompactRequests;

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
            Some("compact-requests") => Ok(RowFormat::CompactRequests),
            Some("compact-timeline") => Ok(RowFormat::CompactTimeline),
            Some("compact-history") => Ok(RowFormat::CompactHistory),
            Some("compact-runs") => Ok(RowFormat::CompactRuns),
            Some("compact") => Ok(RowFormat::Compact),
            Some("full") | None => Ok(RowFormat::Full),
            Some(other) => Err(DbError::Corrupt {
                table: "host_settings",
                message: format!(
                    "unknown row format `{other}`: the database was set up by a newer version"
                ),
            }),
        }
    }

    /// The setting's value.
    pub fn name(self) -> &'static str {
        match self {
            RowFormat::Full => "full",
            RowFormat::Compact => "compact",
            RowFormat::CompactRuns => "compact-runs",
            RowFormat::CompactHistory => "compact-history",
            RowFormat::CompactTimeline => "compact-timeline",
            RowFormat::CompactRequests => "compact-requests",
        }
    }

    /// Makes the database write the most compact rows this version knows:
    /// replicas do from their next start. Only once no replica of an earlier
    /// version serves it. Never makes a database less compact.
    pub async fn make_compact(db: &Db) -> Result<(), DbError> {
        if RowFormat::of(db).await? < RowFormat::NEWEST {
            db.execute(
                "UPDATE host_settings SET value = ? WHERE name = 'row_format'",
                &crate::params![RowFormat::NEWEST.name()],
            )
            .await?;
        }
        Ok(())
    }

    fn leaves_out_derived(self) -> bool {
        self >= RowFormat::Compact
    }
}

/// A checkpoint's `from_state` as stored: '' when `before` (the checkpoint
/// written just before it, in the same statement) ended where it starts.
pub(crate) fn stored_from<'a>(
    format: RowFormat,
    before: Option<&Checkpoint>,
    cp: &'a Checkpoint,
) -> &'a str {
    match before {
        Some(b)
            if format.leaves_out_derived() && b.sequence + 1 == cp.sequence && b.to == cp.from =>
        {
            ""
        }
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
    if !format.leaves_out_derived() {
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

/// [`stored_hashes`] remembered per call. A call's ledger row is written at least
/// twice (when it starts, when it ends) with the same arguments, and deriving its
/// hashes again took about 3% of a run's instructions. An entry answers only for
/// exactly the inputs it was worked out from, so it can never answer otherwise
/// than [`stored_hashes`] would; it is dropped with the call's last write.
#[derive(Debug, Clone, Default)]
pub(crate) struct HashMemo(Arc<Mutex<HashMap<String, Worked>>>);

/// One call's inputs to [`stored_hashes`], and whether each hash was left out.
#[derive(Debug)]
struct Worked {
    tool: String,
    arguments_text: String,
    hash: String,
    fingerprint: String,
    left_out: (bool, bool),
}

/// Calls remembered at most: calls of runs that stopped mid-way are never
/// finished here, so the memo starts again past this. A process has a few dozen
/// calls in flight at a time.
const WORKED_KEPT: usize = 1024;

/// Arguments longer than this are worked out at each write instead of kept, so
/// that the memo holds at most a few MB however large a model's arguments get.
const WORKED_TEXT_MAX: usize = 4096;

impl HashMemo {
    /// [`stored_hashes`] for call `tool_call_id`; `last` says this is the call's
    /// last write (it has finished), after which it is forgotten.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stored<'a>(
        &self,
        format: RowFormat,
        tool_call_id: &str,
        last: bool,
        tool: &str,
        arguments_text: &str,
        hash: &'a str,
        fingerprint: &'a str,
    ) -> (&'a str, &'a str) {
        if !format.leaves_out_derived() {
            return (hash, fingerprint);
        }
        let keep =
            |(h, f): (bool, bool)| (if h { "" } else { hash }, if f { "" } else { fingerprint });
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let known = match calls.get(tool_call_id) {
            Some(w)
                if w.tool == tool
                    && w.arguments_text == arguments_text
                    && w.hash == hash
                    && w.fingerprint == fingerprint =>
            {
                Some(w.left_out)
            }
            _ => None,
        };
        if let Some(left_out) = known {
            if last {
                calls.remove(tool_call_id);
            }
            return keep(left_out);
        }
        drop(calls);
        let stored = stored_hashes(format, tool, arguments_text, hash, fingerprint);
        let left_out = (stored.0.is_empty(), stored.1.is_empty());
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if last || arguments_text.len() > WORKED_TEXT_MAX {
            calls.remove(tool_call_id);
        } else {
            if calls.len() >= WORKED_KEPT {
                calls.clear();
            }
            calls.insert(
                tool_call_id.to_string(),
                Worked {
                    tool: tool.to_string(),
                    arguments_text: arguments_text.to_string(),
                    hash: hash.to_string(),
                    fingerprint: fingerprint.to_string(),
                    left_out,
                },
            );
        }
        stored
    }
}

/// What a compact ledger row left out: (arguments hash, action fingerprint).
pub(crate) fn derived_hashes(tool: &str, arguments: &Value) -> (String, String) {
    caseops_runtime::fingerprint::call_hashes(tool, arguments)
}

/// SQL for a ledger row's `bundle_digest` column. Full: `?`, the digest.
/// Compact: '' when the digest is the run's; it takes the digest, the run id and
/// the digest again.
pub(crate) fn bundle_digest_sql(format: RowFormat) -> &'static str {
    if format.leaves_out_derived() {
        "CASE WHEN ? = (SELECT bundle_digest FROM runs WHERE run_id = ?) THEN '' ELSE ? END"
    } else {
        "?"
    }
}

/// The columns of a run's row that its spec repeats.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunColumns<'a> {
    pub run_id: &'a str,
    pub tenant_id: &'a str,
    pub resource_id: &'a str,
    pub actor: &'a str,
    pub request_id: Option<&'a str>,
    pub goal: &'a str,
}

impl RunColumns<'_> {
    /// (spec field, the column's value) for each field a column may repeat.
    fn repeated(&self) -> [(&'static str, Option<&str>); 6] {
        [
            ("run_id", Some(self.run_id)),
            ("tenant_id", Some(self.tenant_id)),
            ("resource_id", Some(self.resource_id)),
            ("subject", Some(self.actor)),
            ("correlation_id", self.request_id),
            ("goal", Some(self.goal)),
        ]
    }
}

/// What a request to start a run is, as a replay of it must match: its
/// resource id (under the bundle's `resource_key`), goal and planner. The API
/// compares this hash to tell a replay from another request under the same
/// idempotency key.
pub fn request_hash(resource_key: &str, resource_id: &str, goal: &str, planner: &str) -> String {
    sha256_hex(
        canonical_json(
            &serde_json::json!({ resource_key: resource_id, "goal": goal, "planner": planner }),
        )
        .as_bytes(),
    )
}

/// A new run's `request_hash` and `request_id` columns. `CompactRequests`: each
/// '' when a reader rebuilds it exactly — the hash when it is [`request_hash`]
/// of the run's own columns under `resource_key`, the id when it is the run's
/// id. Otherwise as given, but for an empty request id, which is stored as none.
pub(crate) fn stored_request<'a>(
    format: RowFormat,
    resource_key: &str,
    run: &'a super::runs::NewRun,
) -> (&'a str, Option<&'a str>) {
    let given = (run.request_hash.as_str(), run.request_id.as_deref());
    if format < RowFormat::CompactRequests {
        return given;
    }
    let rebuilt = request_hash(
        resource_key,
        &run.spec.resource_id,
        &run.spec.goal,
        &run.planner_kind,
    );
    let hash = if given.0 == rebuilt { "" } else { given.0 };
    let id = match given.1 {
        Some(id) if id == run.spec.run_id => Some(""),
        // '' reads back as the run's id (`create_where` makes it none first).
        Some("") => None,
        other => other,
    };
    (hash, id)
}

/// A run's request hash as stored: '' is [`request_hash`] of its columns.
pub(crate) fn read_request_hash(
    stored: String,
    resource_key: &str,
    resource_id: &str,
    goal: &str,
    planner: &str,
) -> String {
    if stored.is_empty() {
        request_hash(resource_key, resource_id, goal, planner)
    } else {
        stored
    }
}

/// A run's request id as stored: '' is the run's id.
pub(crate) fn read_request_id(stored: Option<String>, run_id: &str) -> Option<String> {
    match stored {
        Some(id) if id.is_empty() => Some(run_id.to_string()),
        other => other,
    }
}

/// A run's spec as stored, and the catalog it names by digest (`CompactRuns`:
/// the spec leaves out each field whose value its column holds, and its catalog,
/// which `run_catalogs` holds once per distinct list).
pub(crate) fn stored_spec<'a>(
    format: RowFormat,
    spec: &'a RunSpec,
    columns: &RunColumns,
) -> (String, Option<StoredCatalog<'a>>) {
    if format < RowFormat::CompactRuns {
        return (serde_json::to_string(spec).expect("specs serialize"), None);
    }
    let mut value = serde_json::to_value(spec).expect("specs serialize");
    if let Some(fields) = value.as_object_mut() {
        for (field, column) in columns.repeated() {
            if column.is_some() && fields.get(field).and_then(Value::as_str) == column {
                fields.shift_remove(field);
            }
        }
        fields.shift_remove("catalog");
    }
    let catalog = StoredCatalog {
        digest: spec.catalog.digest(),
        names: serde_json::to_string(&spec.catalog).expect("catalogs serialize"),
    };
    (value.to_string(), Some(catalog))
}

/// A catalog as `run_catalogs` stores it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredCatalog<'a> {
    pub digest: &'a str,
    pub names: String,
}

/// How many characters of a catalog's digest key it in `run_catalogs`: 64 bits,
/// where a database holds a handful of catalogs. [`CATALOG_KEY_SQL`] falls back to
/// the whole digest when another catalog already holds the prefix.
const CATALOG_KEY_LEN: usize = 16;

/// SQL for the key a run names its catalog by, in its row and in `run_catalogs`:
/// the digest's prefix, unless a row under that prefix lists other names, then
/// the whole digest (a different length, so never another catalog's prefix).
/// Readers join on the key whatever its length. Parameters:
/// [`StoredCatalog::key_params`].
pub(crate) const CATALOG_KEY_SQL: &str = "CASE WHEN EXISTS (SELECT 1 FROM run_catalogs k WHERE k.digest = ? AND k.names <> ?) THEN ? ELSE ? END";

impl StoredCatalog<'_> {
    fn prefix(&self) -> &str {
        self.digest.get(..CATALOG_KEY_LEN).unwrap_or(self.digest)
    }

    /// The parameters of [`CATALOG_KEY_SQL`].
    pub(crate) fn key_params(&self) -> [super::sql::Param; 4] {
        crate::params![
            self.prefix(),
            self.names.as_str(),
            self.digest,
            self.prefix()
        ]
    }

    /// The parameters of its `run_catalogs` row: the key's, then the names.
    pub(crate) fn row_params(&self) -> Vec<super::sql::Param> {
        let mut params = self.key_params().to_vec();
        params.extend(crate::params![self.names.as_str()]);
        params
    }
}

/// A stored spec, either format: a field it leaves out is its column's value,
/// and its catalog the names `run_catalogs` holds for the row's digest.
pub(crate) fn read_spec(
    text: &str,
    columns: &RunColumns,
    catalog: Option<&str>,
) -> Result<RunSpec, DbError> {
    let corrupt = |e: String| DbError::Corrupt {
        table: "runs",
        message: format!("spec of run `{}`: {e}", columns.run_id),
    };
    let mut value: Value = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    if let Some(fields) = value.as_object_mut() {
        for (field, column) in columns.repeated() {
            if let (false, Some(column)) = (fields.contains_key(field), column) {
                fields.insert(field.to_string(), Value::String(column.to_string()));
            }
        }
        if let (false, Some(names)) = (fields.contains_key("catalog"), catalog) {
            let names: Value = serde_json::from_str(names)
                .map_err(|e| corrupt(format!("its catalog in `run_catalogs`: {e}")))?;
            fields.insert("catalog".into(), names);
        }
    }
    serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))
}

/// SQL for the `provenance` column of a run's row. Full: `?`, the text.
/// `CompactRuns`: the compact text when the row's bundle digest is the one it
/// left out, else the full text; it takes that digest and the two texts.
pub(crate) fn provenance_sql(format: RowFormat) -> &'static str {
    if format >= RowFormat::CompactRuns {
        "CASE WHEN bundle_digest = ? THEN ? ELSE ? END"
    } else {
        "?"
    }
}

/// A run's provenance (evidence reference → `{tool_call_id, tool, attempt,
/// bundle_digest}`) as `CompactRuns` stores it, with the digest it leaves out:
/// an array of `[reference, call, tool, attempt]`, `call` being the tool call id
/// without the run id that starts it, and a fifth element for a digest other than
/// the first entry's. `None` when an entry is not of that shape or its id starts
/// with `:` (a reader would take it for a shortened one): stored in full then.
pub(crate) fn compact_provenance(provenance: &Value, run_id: &str) -> Option<(String, String)> {
    let entries = provenance.as_object()?;
    let mut digest = None;
    let mut compact = Vec::with_capacity(entries.len());
    for (reference, entry) in entries {
        let fields = entry.as_object()?;
        // The order a reader rebuilds, so that the text it serves is the same.
        if !fields
            .keys()
            .eq(["tool_call_id", "tool", "attempt", "bundle_digest"])
        {
            return None;
        }
        let id = fields.get("tool_call_id")?.as_str()?;
        let tool = fields.get("tool")?.as_str()?;
        let attempt = fields.get("attempt")?.as_u64()?;
        let entry_digest = fields.get("bundle_digest")?.as_str()?;
        let call = match id.strip_prefix(run_id) {
            Some(rest) if rest.starts_with(':') => rest,
            _ if id.starts_with(':') => return None,
            _ => id,
        };
        let digest = *digest.get_or_insert(entry_digest);
        let mut row = vec![
            Value::from(reference.as_str()),
            Value::from(call),
            Value::from(tool),
            Value::from(attempt),
        ];
        if entry_digest != digest {
            row.push(Value::from(entry_digest));
        }
        compact.push(Value::Array(row));
    }
    Some((digest?.to_string(), Value::Array(compact).to_string()))
}

/// A stored provenance, either format, as the full object.
pub(crate) fn read_provenance(
    text: Option<String>,
    run_id: &str,
    bundle_digest: &str,
) -> Result<Option<Value>, DbError> {
    let Some(text) = text else { return Ok(None) };
    let corrupt = |message: String| DbError::Corrupt {
        table: "runs",
        message: format!("provenance of run `{run_id}`: {message}"),
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    let Value::Array(rows) = value else {
        return Ok(Some(value));
    };
    let mut full = Map::with_capacity(rows.len());
    for row in rows {
        let (reference, call, tool, attempt, digest) = match row.as_array().map(Vec::as_slice) {
            Some([Value::String(r), Value::String(c), t, a]) => (r, c, t, a, bundle_digest),
            Some([Value::String(r), Value::String(c), t, a, Value::String(d)]) => {
                (r, c, t, a, d.as_str())
            }
            _ => {
                return Err(corrupt(format!(
                    "an entry is not `[reference, call, tool, attempt]`: {row}"
                )));
            }
        };
        let id = if call.starts_with(':') {
            format!("{run_id}{call}")
        } else {
            call.clone()
        };
        let mut entry = Map::with_capacity(4);
        entry.insert("tool_call_id".into(), Value::String(id));
        entry.insert("tool".into(), tool.clone());
        entry.insert("attempt".into(), attempt.clone());
        entry.insert("bundle_digest".into(), Value::from(digest));
        full.insert(reference.clone(), Value::Object(entry));
    }
    Ok(Some(Value::Object(full)))
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
            snapshot: None,
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

    fn entry(id: &str, digest: &str) -> Value {
        json!({"tool_call_id": id, "tool": "t", "attempt": 2, "bundle_digest": digest})
    }

    #[test]
    fn compact_provenance_reads_back_as_the_full_text() {
        let full = json!({
            "b://2": entry("run-1:7", "d"),
            "a://1": entry("run-1:2", "d"),
            "c://3": entry("run-1:9:confirm", "other"),
            "d://4": entry("elsewhere:1", "d"),
        });
        let (digest, text) = compact_provenance(&full, "run-1").unwrap();
        assert_eq!(digest, "d");
        assert!(!text.contains("run-1") && !text.contains("\"d\""), "{text}");
        let read = read_provenance(Some(text), "run-1", "d").unwrap().unwrap();
        // The same text, key order included: clients see what a full row gives.
        assert_eq!(read.to_string(), full.to_string());
        let kept = read_provenance(Some(full.to_string()), "run-1", "x").unwrap();
        assert_eq!(kept.unwrap().to_string(), full.to_string());
    }

    #[test]
    fn provenance_a_reader_could_misread_is_not_compacted() {
        // An id starting with `:` would read back with the run id before it.
        assert_eq!(
            compact_provenance(&json!({"a": entry(":1", "d")}), "r"),
            None
        );
        // Another shape, or another field order, is stored as it is.
        let mut extra = entry("r:1", "d");
        extra["note"] = json!("x");
        assert_eq!(compact_provenance(&json!({"a": extra}), "r"), None);
        let reordered =
            json!({"a": {"tool": "t", "tool_call_id": "r:1", "attempt": 1, "bundle_digest": "d"}});
        assert_eq!(compact_provenance(&reordered, "r"), None);
        assert_eq!(compact_provenance(&json!({}), "r"), None);
        assert!(matches!(
            read_provenance(Some("[[\"a\", 1]]".into()), "r", "d"),
            Err(DbError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_compact_spec_leaves_out_only_what_its_columns_hold() {
        let spec: RunSpec = serde_json::from_value(json!({
            "run_id": "r", "tenant_id": "t", "task_id": "k", "subject": "user:a",
            "resource_id": "R-1", "scopes": ["s"], "catalog": ["x"], "stage": "st",
            "goal": "g", "correlation_id": "c"
        }))
        .unwrap();
        let columns = RunColumns {
            run_id: "r",
            tenant_id: "t",
            resource_id: "R-1",
            actor: "user:b",
            request_id: None,
            goal: "g",
        };
        let (text, catalog) = stored_spec(RowFormat::CompactRuns, &spec, &columns);
        let catalog = catalog.unwrap();
        assert_eq!(
            (catalog.digest, catalog.names.as_str()),
            (spec.catalog.digest(), "[\"x\"]")
        );
        let stored: Value = serde_json::from_str(&text).unwrap();
        let kept: Vec<&str> = stored
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // The subject is not the actor, and no request id holds the correlation id.
        assert_eq!(
            kept,
            ["task_id", "subject", "scopes", "stage", "correlation_id"]
        );
        assert_eq!(
            read_spec(&text, &columns, Some(&catalog.names)).unwrap(),
            spec
        );
        // Without its catalog row the spec is incomplete: a located error.
        assert!(matches!(
            read_spec(&text, &columns, None),
            Err(DbError::Corrupt { .. })
        ));
        let (full, none) = stored_spec(RowFormat::Compact, &spec, &columns);
        assert_eq!(full, serde_json::to_string(&spec).unwrap());
        assert_eq!(none, None);
        assert_eq!(read_spec(&full, &columns, None).unwrap(), spec);
        // A full spec keeps its own catalog whatever the row names.
        assert_eq!(read_spec(&full, &columns, Some("[\"y\"]")).unwrap(), spec);
        assert!(matches!(
            read_spec("{\"task_id\": 1}", &columns, None),
            Err(DbError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_call_s_remembered_hashes_answer_only_for_the_same_inputs_and_go_with_its_last_write() {
        let args = json!({"item": "A-7", "n": 1.5});
        let text = args.to_string();
        let (h, f) = derived_hashes("t", &args);
        let (_, other) = derived_hashes("u", &args);
        let long_args = json!({"item": "x".repeat(WORKED_TEXT_MAX)});
        let long = long_args.to_string();
        let (long_h, long_f) = derived_hashes("t", &long_args);
        let (h, f, other) = (h.as_str(), f.as_str(), other.as_str());
        let (long_h, long_f) = (long_h.as_str(), long_f.as_str());
        let compact = RowFormat::Compact;
        let memo = HashMemo::default();
        // (format, call, last write, tool, text, hash, fingerprint) → stored, calls kept.
        #[rustfmt::skip]
        let writes = [
            ((compact, "c1", false, "t", text.as_str(), h, f), ("", ""), 1),
            ((compact, "c1", false, "t", text.as_str(), h, f), ("", ""), 1),
            // Other inputs under the same call are worked out again, not answered.
            ((compact, "c1", false, "t", text.as_str(), h, other), ("", other), 1),
            ((compact, "c1", false, "t", "not json", h, f), (h, f), 1),
            // Another tool: the arguments hash is still derived, the fingerprint not.
            ((compact, "c1", false, "u", text.as_str(), h, f), ("", f), 1),
            ((compact, "c1", false, "t", text.as_str(), h, f), ("", ""), 1),
            // The last write answers and forgets.
            ((compact, "c1", true, "t", text.as_str(), h, f), ("", ""), 0),
            // A call written once, finished, is never kept.
            ((compact, "c2", true, "t", text.as_str(), h, f), ("", ""), 0),
            // The full format leaves nothing out and keeps nothing.
            ((RowFormat::Full, "c3", false, "t", text.as_str(), h, f), (h, f), 0),
            // Long arguments are worked out each time, not kept.
            ((compact, "c4", false, "t", long.as_str(), long_h, long_f), ("", ""), 0),
            ((compact, "c4", false, "t", long.as_str(), long_h, long_f), ("", ""), 0),
        ];
        for (i, ((format, call, last, tool, text, hash, fingerprint), stored, kept)) in
            writes.into_iter().enumerate()
        {
            assert_eq!(
                memo.stored(format, call, last, tool, text, hash, fingerprint),
                stored,
                "write {i}"
            );
            assert_eq!(memo.0.lock().unwrap().len(), kept, "write {i}");
        }
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
