//! Cedar decisions kept by the question asked, so that a question asked before is
//! answered without evaluating the policies again (stage 6's steady state).
//!
//! A question is everything a decision reads: the principal's facts (its key),
//! the tool, the approval and the arguments. It is found by a hash of those parts,
//! written straight from them, and a kept answer is given only for a question
//! equal to it in every part: a collision of hashes costs an evaluation, never a
//! wrong answer.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use serde_json::Value;

use crate::authorization::{Approval, AuthzDecision};

/// What a decision answered: allowed or denied, and whether some policy could not
/// be evaluated.
pub(crate) type Answer = (AuthzDecision, bool);

/// Questions kept; the cache is emptied when full. A deployment's distinct
/// questions (tenant × case × stage × tool × arguments) in flight at once are far
/// fewer.
const KEPT: usize = 4096;

/// One question, as the cache keeps it.
struct Asked {
    principal: String,
    tool: &'static str,
    approval: Approval,
    arguments: Value,
    answer: Answer,
}

impl Asked {
    fn is(&self, principal: &str, tool: &str, approval: Approval, arguments: &Value) -> bool {
        self.tool == tool
            && self.approval == approval
            && self.principal == principal
            && self.arguments == *arguments
    }
}

#[derive(Default)]
pub(crate) struct DecisionCache {
    /// Keyed so that an attacker who chooses arguments cannot choose collisions.
    hasher: RandomState,
    by_hash: HashMap<u64, Vec<Asked>>,
    kept: usize,
}

impl DecisionCache {
    /// The hash a question is filed under.
    pub(crate) fn hash(
        &self,
        principal: &str,
        tool: &str,
        approval: Approval,
        arguments: &Value,
    ) -> u64 {
        let mut h = self.hasher.build_hasher();
        principal.hash(&mut h);
        tool.hash(&mut h);
        approval.as_str().hash(&mut h);
        hash_value(arguments, &mut h);
        h.finish()
    }

    pub(crate) fn get(
        &self,
        hash: u64,
        principal: &str,
        tool: &str,
        approval: Approval,
        arguments: &Value,
    ) -> Option<&Answer> {
        self.by_hash
            .get(&hash)?
            .iter()
            .find(|a| a.is(principal, tool, approval, arguments))
            .map(|a| &a.answer)
    }

    pub(crate) fn insert(
        &mut self,
        hash: u64,
        principal: &str,
        tool: &'static str,
        approval: Approval,
        arguments: &Value,
        answer: Answer,
    ) {
        if self.kept >= KEPT {
            self.by_hash.clear();
            self.kept = 0;
        }
        let bucket = self.by_hash.entry(hash).or_default();
        // Two callers may have evaluated the same question at once.
        if bucket
            .iter()
            .any(|a| a.is(principal, tool, approval, arguments))
        {
            return;
        }
        bucket.push(Asked {
            principal: principal.to_string(),
            tool,
            approval,
            arguments: arguments.clone(),
            answer,
        });
        self.kept += 1;
    }
}

/// Feeds a JSON value to `h` so that equal values (as `Value`'s `==` has it) with
/// their members in the same order hash alike. Members in another order may hash
/// otherwise: a miss, answered by Cedar.
fn hash_value(value: &Value, h: &mut impl Hasher) {
    match value {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => {
            h.write_u8(1);
            h.write_u8(u8::from(*b));
        }
        // `Number`'s `==` compares the representation: an unsigned, a negative or a
        // float, each written as what it is.
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                h.write_u8(2);
                h.write_u64(u);
            } else if let Some(i) = n.as_i64() {
                h.write_u8(3);
                h.write_i64(i);
            } else {
                h.write_u8(4);
                h.write_u64(n.as_f64().map_or(0, f64::to_bits));
            }
        }
        Value::String(s) => {
            h.write_u8(5);
            s.hash(h);
        }
        Value::Array(items) => {
            h.write_u8(6);
            h.write_usize(items.len());
            for item in items {
                hash_value(item, h);
            }
        }
        Value::Object(map) => {
            h.write_u8(7);
            h.write_usize(map.len());
            for (k, v) in map {
                k.hash(h);
                hash_value(v, h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn allow() -> Answer {
        (AuthzDecision::Allow, false)
    }

    fn deny() -> Answer {
        (
            AuthzDecision::Deny {
                reason: "R".into(),
                policies: vec!["p".into()],
            },
            false,
        )
    }

    #[test]
    fn an_answer_is_given_only_for_the_same_question() {
        let mut cache = DecisionCache::default();
        let args = json!({"case_id": "X-1", "n": 1});
        let h = cache.hash("p1", "t", Approval::None, &args);
        cache.insert(h, "p1", "t", Approval::None, &args, allow());
        assert_eq!(
            cache.get(h, "p1", "t", Approval::None, &args),
            Some(&allow())
        );
        // Under the same hash, a question differing in any part finds nothing.
        let other = json!({"case_id": "X-1", "n": 2});
        assert_eq!(cache.get(h, "p2", "t", Approval::None, &args), None);
        assert_eq!(cache.get(h, "p1", "u", Approval::None, &args), None);
        assert_eq!(cache.get(h, "p1", "t", Approval::Approved, &args), None);
        assert_eq!(cache.get(h, "p1", "t", Approval::None, &other), None);
    }

    #[test]
    fn questions_under_one_hash_keep_their_own_answers() {
        let mut cache = DecisionCache::default();
        let (a, b) = (json!({"x": 1}), json!({"x": 2}));
        // Filed under one hash on purpose, as a collision would.
        cache.insert(7, "p", "t", Approval::None, &a, allow());
        cache.insert(7, "p", "t", Approval::None, &b, deny());
        assert_eq!(cache.get(7, "p", "t", Approval::None, &a), Some(&allow()));
        assert_eq!(cache.get(7, "p", "t", Approval::None, &b), Some(&deny()));
    }

    #[test]
    fn equal_values_hash_alike_and_numbers_by_their_representation() {
        let cache = DecisionCache::default();
        let h = |v: &Value| cache.hash("p", "t", Approval::None, v);
        assert_eq!(
            h(&json!({"a": [1, -2, 1.5, "s", null, true]})),
            h(&serde_json::from_str(r#"{"a":[1,-2,1.5,"s",null,true]}"#).unwrap())
        );
        assert_ne!(h(&json!({"a": 1})), h(&json!({"a": 1.0})));
        assert_ne!(h(&json!({"a": "1"})), h(&json!({"a": 1})));
        assert_ne!(h(&json!(["ab", "c"])), h(&json!(["a", "bc"])));
    }

    #[test]
    fn a_full_cache_starts_over() {
        let mut cache = DecisionCache::default();
        for n in 0..KEPT {
            let args = json!({ "n": n });
            let h = cache.hash("p", "t", Approval::None, &args);
            cache.insert(h, "p", "t", Approval::None, &args, allow());
        }
        let first = json!({ "n": 0 });
        let h0 = cache.hash("p", "t", Approval::None, &first);
        assert!(cache.get(h0, "p", "t", Approval::None, &first).is_some());
        let last = json!({ "n": KEPT });
        let h = cache.hash("p", "t", Approval::None, &last);
        cache.insert(h, "p", "t", Approval::None, &last, deny());
        assert!(cache.get(h0, "p", "t", Approval::None, &first).is_none());
        assert_eq!(cache.get(h, "p", "t", Approval::None, &last), Some(&deny()));
    }
}
