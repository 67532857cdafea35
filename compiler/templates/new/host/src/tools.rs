//! The tool handlers: one method per tool of the catalog, on the trait
//! `caseops-compile build` generates. Arguments arrive validated against the tool
//! contract and authorized by Cedar; the output is validated before anyone sees it.

use std::collections::HashMap;
use std::pin::Pin;

use caseops_host::api::Resources;
use caseops_runtime::{CallContext, ToolError};

// This agent's own crates.
use __agent___generated::tools::*;

/// The items each tenant has: `(tenant, item id) → (name, units in stock)`. A real
/// agent reads its own system here (or tables it migrates with the host's, see
/// `caseops_host::store::AppSchema`).
#[derive(Clone)]
pub struct Items {
    pub items: HashMap<(String, String), (String, i64)>,
}

impl Items {
    /// Development data: tenant `tenant-a` has item I-1.
    pub fn development() -> Self {
        let mut items = HashMap::new();
        items.insert(
            ("tenant-a".to_string(), "I-1".to_string()),
            ("blue widget".to_string(), 12),
        );
        Items { items }
    }
}

impl ToolHandlers for Items {
    async fn item_lookup(
        &self,
        ctx: &CallContext,
        input: ItemLookupInput,
    ) -> Result<ItemLookupOutput, ToolError> {
        let (name, in_stock) = self
            .items
            .get(&(ctx.tenant_id.clone(), input.item_id.clone()))
            .ok_or_else(|| ToolError::business("ITEM_NOT_FOUND", "no such item"))?;
        Ok(ItemLookupOutput {
            name: name.clone(),
            in_stock: *in_stock,
            evidence_ref: format!("item://{}", input.item_id),
        })
    }
}

/// The API's question "does this item exist for this tenant?": a run on a missing
/// one is answered 404 before it starts. Items kept in a table of the host's
/// database can say the same as SQL instead (`Resources::condition`): the
/// statement that creates a run then checks it, one statement per run fewer.
impl Resources for Items {
    fn exists<'a>(
        &'a self,
        tenant_id: &'a str,
        resource_id: &'a str,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>> {
        let found = self
            .items
            .contains_key(&(tenant_id.to_string(), resource_id.to_string()));
        Box::pin(async move { Ok(found) })
    }
}
