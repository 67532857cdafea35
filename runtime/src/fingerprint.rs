//! Action fingerprints: what makes two proposals "the same action".
//!
//! `action_fingerprint = SHA-256(tool name ‖ 0x00 ‖ canonical JSON of the arguments)`,
//! lowercase hex. The canonical JSON form is:
//! - object keys sorted by their UTF-8 bytes, each key once;
//! - no whitespace anywhere;
//! - strings escaped as JSON requires and nothing more (`"`, `\`, control characters;
//!   non-ASCII characters are written as UTF-8, not `\u` escapes);
//! - numbers as serde_json prints them (integers without a fraction or exponent).
//!
//! It is distinct from `tool_call_id` (one call) and `idempotency_key` (one business
//! intent): the fingerprint detects loops and repeated proposals.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical JSON text of a value (see the module documentation).
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    // Only serde_json's output and ASCII punctuation were written.
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_text(k, out);
                out.push(b':');
                write(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        // serde_json prints scalars compactly, non-ASCII as UTF-8.
        scalar => json_text(scalar, out),
    }
}

/// serde_json's compact text of a key or scalar, written in place (`Value`'s
/// `Display` is the same text, through a fresh `String` each time).
fn json_text<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Writing a string or scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    lower_hex(&Sha256::digest(bytes))
}

/// Lowercase hex of a digest, two characters per byte.
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    }
    // Only ASCII digits and letters were written.
    String::from_utf8(out).expect("hex digits are UTF-8")
}

/// The fingerprint of proposing `tool` with `arguments`.
pub fn action_fingerprint(tool: &str, arguments: &Value) -> String {
    fingerprint_of(tool, &canonical_json(arguments))
}

/// SHA-256 of the canonical arguments alone (the audit record's `arguments_hash`).
pub fn arguments_hash(arguments: &Value) -> String {
    sha256_hex(canonical_json(arguments).as_bytes())
}

/// Both of a call's hashes, `(arguments_hash, action_fingerprint)`, from one
/// canonical form of the arguments.
pub fn call_hashes(tool: &str, arguments: &Value) -> (String, String) {
    let canonical = canonical_json(arguments);
    (
        sha256_hex(canonical.as_bytes()),
        fingerprint_of(tool, &canonical),
    )
}

fn fingerprint_of(tool: &str, canonical: &str) -> String {
    let digest = Sha256::new()
        .chain_update(tool.as_bytes())
        .chain_update([0])
        .chain_update(canonical.as_bytes())
        .finalize();
    lower_hex(&digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form_sorts_keys_and_drops_whitespace() {
        let v = json!({"b": [1, {"z": true, "a": null}], "a": "x"});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":"x","b":[1,{"a":null,"z":true}]}"#
        );
    }

    #[test]
    fn canonical_form_keeps_non_ascii_as_utf8_and_escapes_quotes() {
        let v = json!({"label": "道路交通事故认定书", "q": "say \"hi\"\n"});
        assert_eq!(
            canonical_json(&v),
            "{\"label\":\"道路交通事故认定书\",\"q\":\"say \\\"hi\\\"\\n\"}"
        );
    }

    #[test]
    fn canonical_form_writes_numbers_and_escapes_keys_as_serde_json_does() {
        let v = json!({"n": [-1, 0.1, 1.5, 18446744073709551615u64, -9223372036854775808i64],
            "k\u{1}\"": "\u{7f}\t\u{1f}/", "": {"b": false, "B": []}});
        assert_eq!(
            canonical_json(&v),
            concat!(
                r#"{"":{"B":[],"b":false},"k\u0001\"":""#,
                "\u{7f}",
                r#"\t\u001f/","n":[-1,0.1,1.5,18446744073709551615,-9223372036854775808]}"#
            )
        );
    }

    #[test]
    fn fingerprint_matches_fixed_vectors() {
        // Computed independently (Python hashlib) over the documented byte layout.
        assert_eq!(
            action_fingerprint("tool", &json!({})),
            "cea28cfd1128c5c2e5eb2dac8b62c0d17fbd1dd177eaa538b0ef6f18de248964"
        );
        assert_eq!(
            action_fingerprint("caseops_get_case_snapshot", &json!({"case_id": "C-102"})),
            "4b545e51b5d7955601b5991fea58f9c682546593e81398b0ab94140f680aa725"
        );
        assert_eq!(
            arguments_hash(&json!({"label": "道路"})),
            "afb75adca52b48c563066e4da723781f60efe67b8c9a7f5f4a06227bfbdfb9a2"
        );
    }

    #[test]
    fn both_hashes_at_once_are_each_hash_alone() {
        for (tool, args) in [
            ("tool", json!({})),
            ("caseops_get_case_snapshot", json!({"case_id": "C-102"})),
            (
                "t",
                json!({"b": [1, 2.5, null], "a": {"z": "道路", "y": "\"q\""}}),
            ),
        ] {
            assert_eq!(
                call_hashes(tool, &args),
                (arguments_hash(&args), action_fingerprint(tool, &args))
            );
        }
    }

    #[test]
    fn key_order_and_spacing_do_not_change_the_fingerprint() {
        let a: Value = serde_json::from_str(r#"{ "document_id" : "D", "case_id":"C" }"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"case_id":"C","document_id":"D"}"#).unwrap();
        assert_eq!(action_fingerprint("t", &a), action_fingerprint("t", &b));
        assert_ne!(action_fingerprint("t", &a), action_fingerprint("u", &a));
    }
}
