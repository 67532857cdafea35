//! Audit events (append-only, hash-chained per tenant) and outbox events, written in
//! the same transaction as a run's terminal checkpoint.

use super::sql::{Row, Statement, Tx};
use super::{Db, DbError, now_ms};
use crate::params;
use caseops_runtime::Outcome;
use caseops_runtime::fingerprint::{canonical_json, sha256_hex};
use serde_json::{Value, json};

pub const RUN_EVENT: &str = "agent.run";
/// The subject of a run's own events in the outbox.
pub(crate) fn run_subject(run_id: &str) -> String {
    format!("agent-runs/{run_id}")
}

/// The `prev_hash` of a tenant's first event.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash of one event: its predecessor's hash, its place and its content.
pub fn event_hash(prev_hash: &str, seq: i64, kind: &str, run_id: &str, payload: &Value) -> String {
    linked_hash(prev_hash, seq, &hashed_content(kind, run_id, payload))
}

/// The hash of an event's [`hashed_content`] at `seq` after `prev_hash`.
fn linked_hash(prev_hash: &str, seq: i64, content: &str) -> String {
    sha256_hex(format!("{prev_hash}\n{seq}\n{content}").as_bytes())
}

/// What an event's hash covers after its predecessor's hash and its sequence
/// number (PostgreSQL hashes it too, in [`appended`]).
fn hashed_content(kind: &str, run_id: &str, payload: &Value) -> String {
    format!("{kind}\n{run_id}\n{}", canonical_json(payload))
}

/// How a bundle's events are named: the outbox topic of a finished run
/// (`<resource type in lowercase>.agent-run.completed.v1`, e.g.
/// `order.agent-run.completed.v1`) and the key of the resource id in payloads (the
/// bundle's resource id field, e.g. `order_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventNames {
    pub completed_topic: String,
    pub resource_key: &'static str,
    /// The bundle's write tools: a succeeded call of one is an `effect.confirmed`.
    pub write_tools: Vec<&'static str>,
}

impl EventNames {
    /// The type of a run's first event (`<resource>.agent-run.started.v1`).
    pub fn started_topic(&self) -> String {
        self.completed_topic.replace(".completed.", ".started.")
    }

    pub fn of<B: caseops_runtime::ContractBundle>() -> Self {
        Self {
            completed_topic: format!(
                "{}.agent-run.completed.v1",
                B::RESOURCE_TYPE.to_ascii_lowercase()
            ),
            resource_key: B::RESOURCE_ID_FIELD,
            write_tools: B::TOOLS
                .iter()
                .filter(|t| t.risk.is_write())
                .map(|t| t.name)
                .collect(),
        }
    }
}

impl Default for EventNames {
    fn default() -> Self {
        Self {
            completed_topic: "resource.agent-run.completed.v1".into(),
            resource_key: "resource_id",
            write_tools: Vec::new(),
        }
    }
}

/// Who and what a terminal event is about.
pub(crate) struct Who<'a> {
    pub tenant: &'a str,
    pub resource_id: &'a str,
    pub actor: &'a str,
    /// The API request that started the run, for correlation with logs.
    pub request_id: Option<&'a str>,
}

/// The terminal `agent.run` event of a run that ended with `outcome`.
pub(crate) fn terminal_event<'a>(
    who: &Who<'a>,
    names: &EventNames,
    outcome: &'a Outcome,
) -> Event<'a> {
    Event {
        fact: Fact {
            tenant: who.tenant,
            run_id: &outcome.run_id,
            kind: RUN_EVENT,
            topic: names.completed_topic.clone(),
            subject: run_subject(&outcome.run_id),
        },
        payload: terminal_payload(who, names.resource_key, outcome),
        resource_key: Some(names.resource_key),
        stored: None,
        by_sequence: false,
    }
}

/// The payload of a run's `agent.run` event (its readers rebuild a compact one
/// with this function too, so that key order and values are the writer's).
fn terminal_payload(who: &Who<'_>, resource_key: &str, outcome: &Outcome) -> Value {
    let mut payload = json!({
        "run_id": outcome.run_id,
        "actor": who.actor,
        "request_id": who.request_id,
        "status": outcome.status,
        "stop_reason": outcome.stop_reason,
        "step_count": outcome.step_count,
        "outcome": outcome.final_answer.as_ref().and_then(|a| a.get("outcome")).cloned(),
        "provenance": outcome.provenance,
    });
    payload[resource_key] = json!(who.resource_id);
    payload
}

/// The columns of a run's row `r` that a run's own event left to it is rebuilt
/// from (see [`Event::left_to_run`]), for a query that joins `runs r` on
/// [`LEFT_TO_RUN`].
pub(crate) const RUN_FACTS: &str = "r.actor AS run_actor, r.request_id AS run_request_id, r.goal AS run_goal, \
     r.planner_kind AS run_planner, r.resource_id AS run_resource, r.status AS run_status, \
     r.stop_reason AS run_stop_reason, r.step_count AS run_step_count, r.final_result AS run_final_result, \
     r.provenance AS run_provenance, r.bundle_digest AS run_bundle_digest";

/// True of an audit row `a` whose payload is left to its run: a payload written
/// out is always an object, a left one the JSON string of a resource key.
pub(crate) const LEFT_TO_RUN: &str = "substr(a.payload, 1, 1) = '\"'";

/// An audit event's payload: `stored` itself, or, for a run's own event left to
/// its row, the payload rebuilt from that row's [`RUN_FACTS`] in `row`. `Err`
/// says what is wrong, for the caller to locate.
pub(crate) fn payload_of(
    row: &Row,
    kind: &str,
    run_id: &str,
    tenant: &str,
    stored: &str,
) -> Result<Value, String> {
    // Only the host writes these kinds (see `append_event`), so another kind's
    // string payload is the application's own.
    if !is_run_own(kind) || !stored.starts_with('"') {
        return serde_json::from_str(stored).map_err(|e| format!("an unreadable payload: {e}"));
    }
    let key: String =
        serde_json::from_str(stored).map_err(|e| format!("an unreadable payload: {e}"))?;
    rebuilt_payload(row, kind, run_id, tenant, &key).map_err(|e| match e {
        Rebuild::Missing => format!("its run `{run_id}`, which holds its payload, is missing"),
        Rebuild::Db(e) => e.to_string(),
    })
}

/// Whether `kind` is one of a run's own two events, which only the host writes.
pub(crate) fn is_run_own(kind: &str) -> bool {
    kind == RUN_EVENT || kind == RUN_STARTED_EVENT
}

enum Rebuild {
    Missing,
    Db(DbError),
}

impl From<DbError> for Rebuild {
    fn from(e: DbError) -> Self {
        Rebuild::Db(e)
    }
}

fn rebuilt_payload(
    row: &Row,
    kind: &str,
    run_id: &str,
    tenant: &str,
    resource_key: &str,
) -> Result<Value, Rebuild> {
    let (Some(actor), Some(resource)) = (
        row.get::<Option<String>>("run_actor")?,
        row.get::<Option<String>>("run_resource")?,
    ) else {
        return Err(Rebuild::Missing);
    };
    let request_id = super::row_format::read_request_id(row.get("run_request_id")?, run_id);
    let who = Who {
        tenant,
        resource_id: &resource,
        actor: &actor,
        request_id: request_id.as_deref(),
    };
    if kind == RUN_STARTED_EVENT {
        let (goal, planner): (String, String) = (row.get("run_goal")?, row.get("run_planner")?);
        let started = Started {
            run_id,
            goal: &goal,
            planner: &planner,
        };
        return Ok(started_payload(&who, resource_key, &started));
    }
    if kind != RUN_EVENT {
        return Err(Rebuild::Db(DbError::Corrupt {
            table: "audit_events",
            message: format!("a `{kind}` event of run `{run_id}` without its payload"),
        }));
    }
    let final_result: Option<String> = row.get("run_final_result")?;
    let bundle_digest: String = row.get("run_bundle_digest")?;
    let outcome = Outcome {
        run_id: run_id.to_string(),
        status: row.get("run_status")?,
        stop_reason: row.get("run_stop_reason")?,
        final_answer: final_result
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| DbError::Corrupt {
                table: "runs",
                message: format!("result of run `{run_id}`: {e}"),
            })?,
        provenance: super::row_format::read_provenance(
            row.get("run_provenance")?,
            run_id,
            &bundle_digest,
        )?,
        step_count: row.get::<i64>("run_step_count")? as u32,
        recovery_count: 0,
    };
    Ok(terminal_payload(&who, resource_key, &outcome))
}

/// The `data` of the outbox event beside an audit event of `kind` with `payload`:
/// the payload itself, except for a finished run's (`agent.run`), whose event
/// leaves out what only the audit trail keeps (`actor`, `step_count`, `outcome`)
/// and carries the run's `result` after `stop_reason`. The relay renders events
/// with it when it publishes, so the outbox keeps no copy of what the chain holds.
pub(crate) fn outbox_data(kind: &str, payload: Value, result: Option<Value>) -> Value {
    if kind != RUN_EVENT {
        return payload;
    }
    let Value::Object(fields) = payload else {
        return payload;
    };
    let mut result = Some(result.unwrap_or_default());
    let mut data = serde_json::Map::with_capacity(fields.len() + 1);
    for (key, value) in fields {
        if matches!(key.as_str(), "actor" | "step_count" | "outcome") {
            continue;
        }
        let after = key == "stop_reason";
        data.insert(key, value);
        if after {
            data.insert("result".into(), result.take().unwrap_or_default());
        }
    }
    if let Some(result) = result {
        data.insert("result".into(), result);
    }
    Value::Object(data)
}

/// The audit kind of a run's first event.
pub const RUN_STARTED_EVENT: &str = "agent.run.started";

/// What a run started with, for its first event.
pub(crate) struct Started<'a> {
    pub run_id: &'a str,
    pub goal: &'a str,
    pub planner: &'a str,
}

/// A run's first event.
pub(crate) fn started_event<'a>(
    who: &Who<'a>,
    names: &EventNames,
    started: &Started<'a>,
) -> Event<'a> {
    Event {
        fact: Fact {
            tenant: who.tenant,
            run_id: started.run_id,
            kind: RUN_STARTED_EVENT,
            topic: names.started_topic(),
            subject: run_subject(started.run_id),
        },
        payload: started_payload(who, names.resource_key, started),
        resource_key: Some(names.resource_key),
        stored: None,
        by_sequence: false,
    }
}

/// The payload of a run's `agent.run.started` event (see [`terminal_payload`]).
fn started_payload(who: &Who<'_>, resource_key: &str, started: &Started<'_>) -> Value {
    let mut data = json!({
        "run_id": started.run_id,
        "actor": who.actor,
        "request_id": who.request_id,
        "goal": started.goal,
        "planner": started.planner,
    });
    data[resource_key] = json!(who.resource_id);
    data
}

/// Appends an event about a fact other than a run's start or end (an approval asked
/// for or decided, a write's effect) to the tenant's chain, and its outbox event
/// (`payload` is its `data`): the two inserts, for the caller to run in the
/// transaction that records the fact.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fact_events(
    db: &Db,
    tx: &mut Tx,
    head: &mut ChainHead,
    tenant: &str,
    run_id: &str,
    kind: &str,
    topic: &str,
    subject: String,
    payload: &Value,
) -> Result<[Statement; 2], DbError> {
    let event = Event {
        fact: Fact {
            tenant,
            run_id,
            kind,
            topic: topic.to_string(),
            subject,
        },
        payload: payload.clone(),
        resource_key: None,
        stored: None,
        by_sequence: false,
    };
    chain_events(db, tx, head, &event).await
}

/// Records a fact of the application's own (not one the host writes itself) in the
/// tenant's audit chain and its outbox, in one transaction of its own: the relay
/// publishes it like the host's events, as type `topic` about `subject`. `kind`
/// may not be `agent.run` (the host renders that kind's outbox event differently,
/// see [`outbox_data`]) nor `agent.run.started`: the host's own events of either
/// kind may be stored without their payload (see [`Event::left_to_run`]).
#[allow(clippy::too_many_arguments)]
pub async fn append_event(
    db: &Db,
    tenant: &str,
    run_id: &str,
    kind: &str,
    topic: &str,
    subject: &str,
    data: &Value,
) -> Result<(), DbError> {
    if kind == RUN_EVENT || kind == RUN_STARTED_EVENT {
        return Err(DbError::ReservedKind(kind.to_string()));
    }
    let mut tx = db.begin_lazy_write().await?;
    let statements = fact_events(
        db,
        &mut tx,
        &mut ChainHead::default(),
        tenant,
        run_id,
        kind,
        topic,
        subject.to_string(),
        data,
    )
    .await?;
    for s in &statements {
        tx.execute(&s.sql, &s.params).await?;
    }
    tx.commit().await
}

/// The chain head as a transaction's earlier appends left it: several events
/// appended in one transaction (an effect and the run's end) follow each other
/// although none of their inserts has run yet.
#[derive(Debug, Default)]
pub(crate) struct ChainHead {
    last: Option<(String, i64, String)>,
    /// The tenant whose chain this transaction has already locked (see [`LOCK`]).
    locked: Option<String>,
}

/// A column that takes the tenant chain's lock on PostgreSQL, for a statement
/// that reads `runs.tenant_id` (or a `tenant_id` column) before an append in the
/// same transaction: taken there, it costs no round trip of its own. The chain
/// head must still be read by a later statement, whose snapshot then sees every
/// append committed before the lock was granted. Call [`ChainHead::hold`] after.
pub(crate) const LOCK: &str =
    "pg_advisory_xact_lock(hashtext('caseops-audit:' || tenant_id))::text AS audit_lock";

/// `, LOCK` on PostgreSQL, nothing on SQLite: appended to a select list.
pub(crate) fn lock_column(dialect: super::Dialect) -> String {
    match dialect {
        super::Dialect::Postgres => format!(", {LOCK}"),
        super::Dialect::Sqlite => String::new(),
    }
}

impl ChainHead {
    /// The transaction holds `tenant`'s chain lock (taken by a [`LOCK`] column).
    pub(crate) fn hold(&mut self, tenant: &str) {
        self.locked = Some(tenant.to_string());
    }
}

/// The key of a tenant chain's advisory lock, as [`LOCK`] computes it too.
fn lock_key(tenant: &str) -> String {
    format!("caseops-audit:{tenant}")
}

/// Where an event goes: the tenant's chain (as `kind`) and the outbox (as `topic`,
/// about `subject`).
pub(crate) struct Fact<'a> {
    tenant: &'a str,
    run_id: &'a str,
    kind: &'a str,
    topic: String,
    subject: String,
}

/// One event to append: the chain's `payload` (what its hash covers; the outbox
/// event's `data` follows from it, see [`outbox_data`]).
pub(crate) struct Event<'a> {
    fact: Fact<'a>,
    payload: Value,
    /// A run's own event: the bundle's key of the resource id in its payload.
    resource_key: Option<&'static str>,
    /// What the `payload` column holds, when not the payload itself.
    stored: Option<String>,
    /// Stored the `compact-timeline` way: see [`Event::linked_by_sequence`].
    by_sequence: bool,
}

impl Event<'_> {
    /// The event stored the `compact-history` way (migration 1013): a run's own
    /// event keeps only its resource key as payload, the JSON string `"order_id"`
    /// say, and readers rebuild the rest from the run's row (see
    /// [`rebuilt_payload`]). The caller vouches that the row holds exactly what
    /// the payload was built from. Other events are stored as they are.
    pub(crate) fn left_to_run(mut self) -> Self {
        if let Some(key) = self.resource_key {
            self.stored = Some(Value::from(key).to_string());
        }
        self
    }

    /// The event stored the `compact-timeline` way (migration 1014), on top of
    /// [`Event::left_to_run`]: its `prev_hash` as '' (it is the hash of the
    /// event before it in the tenant's chain, which `audit verify` reads anyway)
    /// and its outbox row's subject as NULL when it is the run's own
    /// (`agent-runs/RUN`, which the relay rebuilds), and its `run_id` as '' (the
    /// audit event of its sequence names the run).
    pub(crate) fn linked_by_sequence(mut self) -> Self {
        if self.stored.is_some() {
            self.by_sequence = true;
        }
        self
    }

    /// The `prev_hash` column for an event whose predecessor's hash is `prev`.
    fn stored_prev<'p>(&self, prev: &'p str) -> &'p str {
        if self.by_sequence { "" } else { prev }
    }

    /// The outbox row's `run_id` column: '' where it is the audit event's own
    /// (the relay joins the event of the row's sequence, which names its run).
    fn stored_outbox_run(&self) -> &str {
        if self.by_sequence {
            ""
        } else {
            self.fact.run_id
        }
    }

    /// The outbox row's `subject` column.
    fn stored_subject(&self) -> Option<&str> {
        let own = self.by_sequence && self.fact.subject == run_subject(self.fact.run_id);
        (!own).then_some(self.fact.subject.as_str())
    }

    fn stored_payload(&self) -> String {
        self.stored
            .clone()
            .unwrap_or_else(|| self.payload.to_string())
    }
}

/// The outbox row beside an audit event: where and when to publish it, not the
/// event itself (the relay renders that from the audit event, `payload` NULL).
const OUTBOX_COLUMNS: &str = "event_id, tenant_id, run_id, topic, subject, created_at, seq";

/// Reads the tenant's chain head inside `tx` and returns the audit insert that links
/// `event` to it and the outbox insert that has the relay publish it, for the
/// caller to run in the transaction that records the fact (a run's creation, its
/// terminal checkpoint). The outbox
/// row takes the audit event's sequence number: appends to a tenant's chain are
/// serialized, so that number is the tenant's commit order, and the relay
/// publishes in it.
pub(crate) async fn chain_events(
    db: &Db,
    tx: &mut Tx,
    head: &mut ChainHead,
    event: &Event<'_>,
) -> Result<[Statement; 2], DbError> {
    let (fact, payload) = (&event.fact, &event.payload);
    let tenant = fact.tenant;
    let (prev_seq, prev_hash) = match &head.last {
        // An earlier append of this transaction: its inserts have not run yet.
        Some((t, seq, hash)) if t == tenant => (*seq, hash.clone()),
        _ => {
            // One appender per tenant chain at a time: on PostgreSQL a
            // transaction-scoped advisory lock on the tenant (SQLite's BEGIN
            // IMMEDIATE already serializes), unless an earlier statement of the
            // transaction took it.
            if db.dialect == super::Dialect::Postgres && head.locked.as_deref() != Some(tenant) {
                tx.fetch_optional(
                    "SELECT pg_advisory_xact_lock(hashtext(?))::text",
                    &params![lock_key(tenant)],
                )
                .await?;
                head.hold(tenant);
            }
            let last = tx
                .fetch_optional(
                    "SELECT seq, hash FROM audit_events WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1",
                    &params![tenant],
                )
                .await?;
            match last {
                Some(r) => (r.get::<i64>("seq")?, r.get::<String>("hash")?),
                None => (0, GENESIS.to_string()),
            }
        }
    };
    let seq = prev_seq + 1;
    let hash = event_hash(&prev_hash, seq, fact.kind, fact.run_id, payload);
    head.last = Some((tenant.to_string(), seq, hash.clone()));
    let now = now_ms();
    Ok([
        Statement::new(
            "INSERT INTO audit_events (tenant_id, seq, event_id, run_id, kind, payload, prev_hash, hash, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            params![
                tenant,
                seq,
                event_id(),
                fact.run_id,
                fact.kind,
                event.stored_payload(),
                event.stored_prev(&prev_hash),
                &hash,
                now
            ],
        ),
        Statement::new(
            format!("INSERT INTO outbox_events ({OUTBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"),
            params![
                event_id(),
                tenant,
                event.stored_outbox_run(),
                &fact.topic,
                event.stored_subject(),
                now,
                seq
            ],
        ),
    ])
}

/// PostgreSQL: the parts of one statement (see [`Statement::with`]) that append
/// `event` to its tenant's chain and the outbox when `gate` holds (a condition on
/// earlier parts, such as `EXISTS (SELECT 1 FROM fence)`), named `audit_head`,
/// `audit_event` and `audit_outbox`. The first takes the chain's lock and advances
/// `audit_heads` (migration 1007): its `ON CONFLICT DO UPDATE` works on the head's
/// newest committed version, which no read in a statement that began before the
/// lock could see, and the database hashes the event onto it exactly as
/// [`event_hash`] does. One round trip where [`chain_events`] needs a transaction
/// of three or more; one event per tenant per statement (the head is one row).
pub(crate) fn appended(event: &Event<'_>, gate: &str) -> Vec<(String, Statement)> {
    let fact = &event.fact;
    let tenant = fact.tenant;
    let content = hashed_content(fact.kind, fact.run_id, &event.payload);
    // A tenant's first event: no head row yet, so no hash for the database to link to.
    let first = linked_hash(GENESIS, 1, &content);
    let now = now_ms();
    let head = Statement::new(
        format!(
            "INSERT INTO audit_heads AS h (tenant_id, seq, prev_hash, hash) \
             SELECT ?, 1, ?, ? FROM (SELECT pg_advisory_xact_lock(hashtext(?))) AS chain_lock WHERE {gate} \
             ON CONFLICT (tenant_id) DO UPDATE SET seq = h.seq + 1, prev_hash = h.hash, \
             hash = encode(sha256(convert_to(h.hash || chr(10) || (h.seq + 1)::text || chr(10) || ?, 'UTF8')), 'hex') \
             RETURNING seq, prev_hash, hash"
        ),
        params![tenant, GENESIS, first, lock_key(tenant), content],
    );
    let prev = if event.by_sequence { "''" } else { "prev_hash" };
    let audit = Statement::new(
        format!(
            "INSERT INTO audit_events (tenant_id, seq, event_id, run_id, kind, payload, prev_hash, hash, at_ms) \
         SELECT ?, seq, ?, ?, ?, ?, {prev}, hash, ? FROM audit_head"
        ),
        params![
            tenant,
            event_id(),
            fact.run_id,
            fact.kind,
            event.stored_payload(),
            now
        ],
    );
    let outbox = Statement::new(
        format!(
            "INSERT INTO outbox_events ({OUTBOX_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, seq FROM audit_head"
        ),
        params![
            event_id(),
            tenant,
            event.stored_outbox_run(),
            &fact.topic,
            event.stored_subject(),
            now
        ],
    );
    vec![
        ("audit_head".to_string(), head),
        ("audit_event".to_string(), audit),
        ("audit_outbox".to_string(), outbox),
    ]
}

/// One event of a tenant's chain, as a reader lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub seq: i64,
    pub run_id: String,
    pub kind: String,
    pub at_ms: i64,
    pub hash: String,
}

/// The latest `limit` events of a tenant's chain, newest first.
pub async fn latest(db: &Db, tenant: &str, limit: i64) -> Result<Vec<Entry>, DbError> {
    let rows = db
        .fetch_all(
            "SELECT seq, run_id, kind, at_ms, hash FROM audit_events WHERE tenant_id = ? ORDER BY seq DESC LIMIT ?",
            &params![tenant, limit],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Entry {
                seq: r.get("seq")?,
                run_id: r.get("run_id")?,
                kind: r.get("kind")?,
                at_ms: r.get("at_ms")?,
                hash: r.get("hash")?,
            })
        })
        .collect()
}

/// What `verify` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    pub tenants: usize,
    pub events: usize,
    /// One line per broken link: tenant, sequence and what is wrong.
    pub problems: Vec<String>,
}

/// Recomputes every tenant's chain: an edited, inserted or deleted event breaks it.
pub async fn verify(db: &Db) -> Result<Verification, DbError> {
    let rows = db
        .fetch_all(
            &format!("{} ORDER BY a.tenant_id, a.seq", verified_rows()),
            &[],
        )
        .await?;
    verify_rows(&rows)
}

/// [`verify`] of one tenant's chain (what that tenant's console may see).
pub async fn verify_tenant(db: &Db, tenant: &str) -> Result<Verification, DbError> {
    let rows = db
        .fetch_all(
            &format!("{} WHERE a.tenant_id = ? ORDER BY a.seq", verified_rows()),
            &params![tenant],
        )
        .await?;
    verify_rows(&rows)
}

/// What [`verify_rows`] reads: each event, and the row of its run where its
/// payload was left to it.
fn verified_rows() -> String {
    format!(
        "SELECT a.tenant_id, a.seq, a.run_id, a.kind, a.payload, a.prev_hash, a.hash, {RUN_FACTS} \
         FROM audit_events a LEFT JOIN runs r ON {LEFT_TO_RUN} AND r.run_id = a.run_id"
    )
}

fn verify_rows(rows: &[Row]) -> Result<Verification, DbError> {
    let mut v = Verification::default();
    let mut current: Option<(String, i64, String)> = None;
    for r in rows {
        let tenant: String = r.get("tenant_id")?;
        let seq: i64 = r.get("seq")?;
        let stored_prev: String = r.get("prev_hash")?;
        let hash: String = r.get("hash")?;
        let kind: String = r.get("kind")?;
        let run_id: String = r.get("run_id")?;
        let payload: String = r.get("payload")?;
        v.events += 1;
        let (expected_seq, expected_prev) = match &current {
            Some((t, s, h)) if *t == tenant => (s + 1, h.clone()),
            _ => {
                v.tenants += 1;
                (1, GENESIS.to_string())
            }
        };
        if seq != expected_seq {
            v.problems.push(format!(
                "tenant `{tenant}`: event {seq} follows {} (an event is missing)",
                expected_seq - 1
            ));
        }
        // '' (`compact-timeline`): the hash of the event before it, which the
        // hash below then covers as a written one would.
        let prev_hash = if stored_prev.is_empty() {
            expected_prev.clone()
        } else {
            stored_prev
        };
        if prev_hash != expected_prev {
            v.problems.push(format!(
                "tenant `{tenant}`: event {seq} does not link to its predecessor"
            ));
        }
        match payload_of(r, &kind, &run_id, &tenant, &payload) {
            Ok(p) if event_hash(&prev_hash, seq, &kind, &run_id, &p) == hash => {}
            Ok(_) => v.problems.push(format!(
                "tenant `{tenant}`: event {seq} was altered (hash mismatch)"
            )),
            Err(why) => v
                .problems
                .push(format!("tenant `{tenant}`: event {seq} has {why}")),
        }
        current = Some((tenant, seq, hash));
    }
    Ok(v)
}

/// An event's id: time-ordered (UUIDv7), so that the unique indexes on event ids
/// grow at their right edge as runs' ids do (see the API's run ids).
fn event_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished() -> Outcome {
        Outcome {
            run_id: "r-1".into(),
            status: "completed".into(),
            stop_reason: None,
            final_answer: Some(json!({"outcome": "PICKED", "evidence_refs": ["d1"]})),
            provenance: Some(json!({"d1": {"tool": "t", "tool_call_id": "c1"}})),
            step_count: 4,
            recovery_count: 0,
        }
    }

    fn who() -> Who<'static> {
        Who {
            tenant: "tenant-a",
            resource_id: "O-1",
            actor: "alice",
            request_id: Some("q-1"),
        }
    }

    /// The published `data` of a finished run, byte for byte as earlier versions
    /// stored it in the outbox (field order included: consumers may hash it).
    #[test]
    fn a_finished_runs_outbox_data_follows_from_its_audit_payload_and_result() {
        let outcome = finished();
        let names = EventNames {
            completed_topic: "order.agent-run.completed.v1".into(),
            resource_key: "order_id",
            write_tools: Vec::new(),
        };
        let event = terminal_event(&who(), &names, &outcome);
        let data = outbox_data(
            RUN_EVENT,
            event.payload.clone(),
            outcome.final_answer.clone(),
        );
        assert_eq!(
            data.to_string(),
            r#"{"run_id":"r-1","request_id":"q-1","status":"completed","stop_reason":null,"result":{"outcome":"PICKED","evidence_refs":["d1"]},"provenance":{"d1":{"tool":"t","tool_call_id":"c1"}},"order_id":"O-1"}"#
        );
        // A run that ended without an answer publishes `result: null`.
        let data = outbox_data(RUN_EVENT, event.payload.clone(), None);
        assert_eq!(data["result"], Value::Null);
        assert!(data.get("actor").is_none() && data.get("step_count").is_none());
    }

    #[test]
    fn other_events_publish_their_audit_payload_unchanged() {
        let names = EventNames::default();
        let started = started_event(
            &who(),
            &names,
            &Started {
                run_id: "r-1",
                goal: "check",
                planner: "deterministic",
            },
        );
        let payload = started.payload.clone();
        assert_eq!(
            outbox_data(RUN_STARTED_EVENT, payload.clone(), None),
            payload
        );
        let fact = json!({"approval_id": "a-1", "actor": "bob", "step_count": 2});
        assert_eq!(
            outbox_data("approval.decided", fact.clone(), Some(json!(1))),
            fact
        );
    }
}
