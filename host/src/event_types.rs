//! The events a host publishes through its outbox: one catalog of types (name,
//! subject, what it reports, the JSON Schema of its `data`), the CloudEvents-style
//! envelope the relay publishes each outbox row in, and the reference page `docs/events.md` is
//! generated from — so the schema a consumer reads and the code that writes the
//! event cannot drift (a test compares the page with [`reference_page`]).

use serde_json::{Value, json};

use crate::store::audit::EventNames;

/// The envelope's version: a consumer that sees another one should not guess.
pub const SPEC_VERSION: &str = "1.0";
/// The envelope's `source`.
pub const SOURCE: &str = "caseops";

pub const APPROVAL_REQUESTED: &str = "approval.requested.v1";
pub const APPROVAL_DECIDED: &str = "approval.decided.v1";
pub const EFFECT_CONFIRMED: &str = "effect.confirmed.v1";

/// One event type of the catalog.
#[derive(Debug, Clone)]
pub struct EventType {
    pub name: String,
    /// The envelope's `subject`, with the resource's id in braces.
    pub subject: &'static str,
    /// When it is written (always in the transaction of the fact it reports).
    pub when: &'static str,
    /// JSON Schema (2020-12) of the envelope's `data`.
    pub data: Value,
}

fn nullable(t: &str) -> Value {
    json!({ "type": [t, "null"] })
}

/// Every event type a host with these names writes.
pub fn catalog(names: &EventNames) -> Vec<EventType> {
    let key = names.resource_key;
    let schema = |required: &[&str], properties: Value| {
        json!({
            "type": "object",
            "required": required,
            "properties": properties,
        })
    };
    vec![
        EventType {
            name: names.started_topic(),
            subject: "agent-runs/{run_id}",
            when: "a run is created (its first commit)",
            data: schema(
                &["run_id", key, "actor", "goal", "planner"],
                json!({
                    "run_id": {"type": "string"},
                    key: {"type": "string", "description": "the run-bound resource"},
                    "actor": {"type": "string", "description": "the principal that started the run"},
                    "request_id": nullable("string"),
                    "goal": {"type": "string"},
                    "planner": {"type": "string", "description": "the planner kind, e.g. `conformance` or `openai`"},
                }),
            ),
        },
        EventType {
            name: names.completed_topic.clone(),
            subject: "agent-runs/{run_id}",
            when: "a run reaches a terminal state (completed, needs_human, stopped, failed)",
            data: schema(
                &["run_id", key, "status"],
                json!({
                    "run_id": {"type": "string"},
                    key: {"type": "string"},
                    "request_id": nullable("string"),
                    "status": {"enum": ["completed", "needs_human", "stopped", "failed"]},
                    "stop_reason": nullable("string"),
                    "result": {"description": "the final answer of a completed run, else null"},
                    "provenance": {"description": "each cited evidence reference → the tool call that returned it"},
                }),
            ),
        },
        EventType {
            name: APPROVAL_REQUESTED.into(),
            subject: "approvals/{approval_id}",
            when: "a run parks in `waiting_approval` for one exact call",
            data: schema(
                &[
                    "approval_id",
                    "run_id",
                    "tool",
                    "arguments",
                    "action_fingerprint",
                    "approver_role",
                    "requested_by",
                    "expires_at_ms",
                ],
                json!({
                    "approval_id": {"type": "string"},
                    "run_id": {"type": "string"},
                    "tool": {"type": "string"},
                    "arguments": {"type": "object", "description": "the call's model-visible arguments"},
                    "action_fingerprint": {"type": "string"},
                    "approver_role": {"type": "string"},
                    "requested_by": {"type": "string"},
                    "expires_at_ms": {"type": "integer"},
                }),
            ),
        },
        EventType {
            name: APPROVAL_DECIDED.into(),
            subject: "approvals/{approval_id}",
            when: "an approval is approved, rejected or expires",
            data: schema(
                &[
                    "approval_id",
                    "run_id",
                    "tool",
                    "action_fingerprint",
                    "status",
                    "decided_by",
                ],
                json!({
                    "approval_id": {"type": "string"},
                    "run_id": {"type": "string"},
                    "tool": {"type": "string"},
                    "action_fingerprint": {"type": "string"},
                    "status": {"enum": ["approved", "rejected", "expired"]},
                    "decided_by": {"type": "string"},
                    "comment": nullable("string"),
                }),
            ),
        },
        EventType {
            name: EFFECT_CONFIRMED.into(),
            subject: "agent-runs/{run_id}/tool-executions/{tool_call_id}",
            when: "a write's effect is recorded as done (answered, or confirmed by `confirm_with`)",
            data: schema(
                &["run_id", "tool_call_id", "tool", "result"],
                json!({
                    "run_id": {"type": "string"},
                    "tool_call_id": {"type": "string"},
                    "tool": {"type": "string"},
                    "idempotency_key": nullable("string"),
                    "result": {"type": "object", "description": "the write's normalized result"},
                }),
            ),
        },
    ]
}

/// The envelope an outbox row holds and the relay publishes as it is.
pub fn envelope(
    id: &str,
    event_type: &str,
    subject: &str,
    tenant: &str,
    at_ms: i64,
    data: Value,
) -> Value {
    json!({
        "specversion": SPEC_VERSION,
        "id": id,
        "type": event_type,
        "source": SOURCE,
        "subject": subject,
        "time": rfc3339_ms(at_ms),
        "tenant": tenant,
        "datacontenttype": "application/json",
        "data": data,
    })
}

/// JSON Schema of the envelope around `data`.
pub fn envelope_schema(event: &EventType) -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["specversion", "id", "type", "source", "subject", "time", "tenant", "datacontenttype", "data"],
        "properties": {
            "specversion": {"const": SPEC_VERSION},
            "id": {"type": "string", "description": "unique per event; also the `Nats-Msg-Id`"},
            "type": {"const": event.name},
            "source": {"const": SOURCE},
            "subject": {"type": "string"},
            "time": {"type": "string", "format": "date-time"},
            "tenant": {"type": "string"},
            "datacontenttype": {"const": "application/json"},
            "data": event.data,
        },
    })
}

/// UTC time with milliseconds, e.g. `2026-12-02T11:30:00.123Z`.
pub fn rfc3339_ms(at_ms: i64) -> String {
    let (secs, ms) = (at_ms.div_euclid(1000), at_ms.rem_euclid(1000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Milliseconds since the epoch of a time [`rfc3339_ms`] wrote (`…T12:00:00.123Z`);
/// `None` for any other shape.
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || b[19] != b'.' || b[23] != b'Z' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = text.get(from..to)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 59 {
        return None;
    }
    // A civil date to days since 1970-01-01 (the inverse of `rfc3339_ms`).
    let y = year - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1000) + ms)
}

/// The NATS subject of an event: `<prefix>.<tenant>.<type>`. A tenant id's
/// characters that NATS gives meaning to (`.`, `*`, `>`, whitespace) become `_`.
pub fn subject(prefix: &str, tenant: &str, event_type: &str) -> String {
    let tenant: String = tenant
        .chars()
        .map(|c| match c {
            '.' | '*' | '>' => '_',
            c if c.is_whitespace() || c.is_control() => '_',
            c => c,
        })
        .collect();
    format!("{prefix}.{tenant}.{event_type}")
}

/// The reference page of the catalog (`docs/events.md` for CaseOps).
pub fn reference_page(names: &EventNames, stream: &str, prefix: &str) -> String {
    let mut page = String::from(
        "# Events\n\n\
         <!-- Generated from caseops_host::event_types::catalog; do not edit. \
         `CASEOPS_UPDATE_DOCS=1 cargo test -p caseops-service --test events_doc` rewrites it. -->\n\n\
         Every fact a downstream system needs is written as an event to the outbox in the\n\
         same transaction as the fact, and chained into the tenant's audit trail. The relay\n\
         (`caseops relay`, or `caseops serve --relay`) publishes them to NATS JetStream.\n\n",
    );
    page.push_str(&format!(
        "- **Stream** `{stream}` (created if missing), subjects `{prefix}.<tenant>.<type>`,\n\
         \x20 e.g. `{prefix}.acme.{}` for tenant `acme`. Characters of a tenant id that NATS gives a\n\
         \x20 meaning to (`.`, `*`, `>`, whitespace) are published as `_`.\n\
         - **Order**: commit order per tenant (the event's place in the tenant's audit chain).\n\
         - **Exactly once, as a consumer sees it**: each message's `Nats-Msg-Id` is the event\n\
         \x20 `id`; a relay that dies between publishing and marking publishes again, and\n\
         \x20 JetStream drops the duplicate within the stream's duplicate window (2 minutes).\n\
         - **Envelope** (CloudEvents 1.0 attributes, JSON): `specversion`, `id`, `type`,\n\
         \x20 `source` (`{SOURCE}`), `subject` (the resource), `time` (RFC 3339, UTC), `tenant`,\n\
         \x20 `datacontenttype`, `data`.\n\n",
        names.completed_topic
    ));
    page.push_str("| Type | Subject | Written when |\n|---|---|---|\n");
    let events = catalog(names);
    for e in &events {
        page.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            e.name, e.subject, e.when
        ));
    }
    for e in &events {
        page.push_str(&format!(
            "\n## `{}`\n\n{}.\n\nJSON Schema of the whole message:\n\n```json\n{}\n```\n",
            e.name,
            capitalized(e.when),
            serde_json::to_string_pretty(&envelope_schema(e)).expect("schemas serialize")
        ));
    }
    page
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_796_212_800_999), "2026-12-02T12:00:00.999Z");
    }

    #[test]
    fn written_times_read_back_to_the_same_millisecond() {
        for at in [
            0,
            951_782_400_123,
            1_796_212_800_999,
            4_102_444_799_999,
            86_399_999,
        ] {
            assert_eq!(parse_rfc3339_ms(&rfc3339_ms(at)), Some(at), "{at}");
        }
        for bad in [
            "",
            "2026-12-02T12:00:00Z",
            "2026-13-02T12:00:00.000Z",
            "2026-12-02T12:00:00.0a0Z",
            "2026-12-02 12:00:00.000Z",
            "+026-12-02T12:00:00.000Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_tenant_cannot_widen_or_split_a_subject() {
        assert_eq!(
            subject("caseops", "a.b*>c d", "approval.decided.v1"),
            "caseops.a_b__c_d.approval.decided.v1"
        );
    }

    #[test]
    fn every_catalog_type_is_unique_and_its_data_schema_compiles() {
        let events = catalog(&EventNames::default());
        let mut names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), events.len());
        for e in &events {
            jsonschema::validator_for(&envelope_schema(e)).unwrap();
        }
    }
}
