//! A tenant's tool catalog: the tools its runs may ever see.
//!
//! It is tenant configuration, the same for every run of the tenant, and it may list
//! far more tools than a run is offered. So it is shared, not copied: a clone is a
//! reference count, and what runs ask of it — whether it lists a tool, and a digest
//! that stands for it in decision-cache keys — is computed once per catalog, not
//! once per run or per step. A host that builds one `Catalog` per tenant and clones
//! it into each [`RunSpec`](crate::RunSpec) pays nothing per run for its size.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

#[derive(Clone, Default)]
pub struct Catalog(Arc<Listing>);

#[derive(Default)]
struct Listing {
    names: Vec<String>,
    lookup: OnceLock<HashSet<String>>,
    digest: OnceLock<String>,
}

impl Catalog {
    pub fn new(names: Vec<String>) -> Self {
        Self(Arc::new(Listing {
            names,
            lookup: OnceLock::new(),
            digest: OnceLock::new(),
        }))
    }

    /// The names, in the order the tenant listed them.
    pub fn names(&self) -> &[String] {
        &self.0.names
    }

    pub fn contains(&self, tool: &str) -> bool {
        // A short list is faster to scan than to hash into a set.
        if self.0.names.len() <= 16 {
            return self.0.names.iter().any(|n| n == tool);
        }
        self.0
            .lookup
            .get_or_init(|| self.0.names.iter().cloned().collect())
            .contains(tool)
    }

    /// SHA-256 of the count, then each name prefixed by its length (so no two
    /// lists give the same bytes), lowercase hex. Two catalogs with the same digest
    /// list the same names in the same order.
    pub fn digest(&self) -> &str {
        self.0.digest.get_or_init(|| {
            let mut hash = Sha256::new();
            hash.update((self.0.names.len() as u64).to_le_bytes());
            for name in &self.0.names {
                hash.update((name.len() as u64).to_le_bytes());
                hash.update(name.as_bytes());
            }
            crate::fingerprint::lower_hex(&hash.finalize())
        })
    }
}

impl PartialEq for Catalog {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.names == other.0.names
    }
}

impl Eq for Catalog {}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.0.names).finish()
    }
}

impl From<Vec<String>> for Catalog {
    fn from(names: Vec<String>) -> Self {
        Self::new(names)
    }
}

impl<S: Into<String>> FromIterator<S> for Catalog {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        Self::new(iter.into_iter().map(Into::into).collect())
    }
}

/// Stored and sent as the plain list of names.
impl Serialize for Catalog {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.names.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Catalog {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::Catalog;

    fn long(extra: &str) -> Catalog {
        (0..40)
            .map(|i| format!("tool_{i}"))
            .chain([extra.to_string()])
            .collect()
    }

    #[test]
    fn a_catalog_lists_exactly_its_names_short_or_long() {
        let short: Catalog = ["a", "b"].into_iter().collect();
        assert!(short.contains("a") && !short.contains("c") && !short.contains(""));
        let long = long("z");
        assert!(long.contains("tool_0") && long.contains("z") && !long.contains("tool_40"));
    }

    #[test]
    fn the_digest_changes_with_any_name_or_their_order_and_not_with_sharing() {
        let a = long("z");
        assert_eq!(a.digest(), a.clone().digest());
        assert_eq!(a.digest(), long("z").digest());
        assert_ne!(a.digest(), long("y").digest());
        let ab: Catalog = ["a", "b"].into_iter().collect();
        let ba: Catalog = ["b", "a"].into_iter().collect();
        assert_ne!(ab.digest(), ba.digest());
        // Boundaries between names count: ["ab"] is not ["a", "b"].
        let joined: Catalog = ["ab"].into_iter().collect();
        assert_ne!(ab.digest(), joined.digest());
        assert_eq!(ab.digest().len(), 64);
    }

    #[test]
    fn a_catalog_round_trips_as_a_plain_list() {
        let ab: Catalog = ["a", "b"].into_iter().collect();
        let json = serde_json::to_string(&ab).unwrap();
        assert_eq!(json, r#"["a","b"]"#);
        let back: Catalog = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ab);
        assert!(serde_json::from_str::<Catalog>(r#"{"a":1}"#).is_err());
    }
}
