//! The warehouse tool handlers, on the host's database.

use std::pin::Pin;

use caseops_host::api::Resources;
use caseops_host::params;
use caseops_host::store::{AppSchema, Db, DbError, Migration};
use caseops_runtime::{CallContext, ToolError};
use warehouse_generated::tools::*;

pub const SCHEMA: AppSchema = AppSchema {
    migrations: &[Migration {
        version: 1000,
        description: "warehouse stock",
        sqlite: include_str!("../migrations/sqlite.sql"),
        postgres: include_str!("../migrations/postgres.sql"),
    }],
    tables: &["stock", "reservations"],
};

#[derive(Clone)]
pub struct Warehouse {
    pub db: Db,
}

fn unavailable(e: DbError) -> ToolError {
    ToolError::transient("STORE_UNAVAILABLE", e.to_string())
}

impl Warehouse {
    /// Development stock: shelf S-1 of `tenant-a` holds 100 WIDGET-7.
    pub async fn seed(&self) -> Result<(), DbError> {
        self.db.execute("INSERT INTO stock (tenant_id, shelf_id, sku, on_hand) VALUES ('tenant-a', 'S-1', 'WIDGET-7', 100) ON CONFLICT DO NOTHING", &[]).await?;
        Ok(())
    }

    pub async fn shelf_exists(&self, tenant: &str, shelf: &str) -> Result<bool, DbError> {
        let row = self
            .db
            .fetch_optional(
                "SELECT 1 AS found FROM stock WHERE tenant_id = ? AND shelf_id = ? LIMIT 1",
                &params![tenant, shelf],
            )
            .await?;
        Ok(row.is_some())
    }
}

impl ToolHandlers for Warehouse {
    async fn inventory_lookup(
        &self,
        ctx: &CallContext,
        input: InventoryLookupInput,
    ) -> Result<InventoryLookupOutput, ToolError> {
        let stock = self
            .db
            .fetch_optional(
                "SELECT on_hand FROM stock WHERE tenant_id = ? AND shelf_id = ? AND sku = ?",
                &params![&ctx.tenant_id, &input.shelf_id, &input.sku],
            )
            .await
            .map_err(unavailable)?
            .ok_or_else(|| ToolError::business("SKU_UNKNOWN", "no such product on this shelf"))?;
        let rows = self.db.fetch_all("SELECT reservation_id, units FROM reservations WHERE tenant_id = ? AND shelf_id = ? AND sku = ? ORDER BY reservation_id", &params![&ctx.tenant_id, &input.shelf_id, &input.sku])
            .await
            .map_err(unavailable)?;
        let mut reserved = 0;
        let mut ids = Vec::new();
        for r in &rows {
            reserved += r.get::<i64>("units").map_err(unavailable)?;
            ids.push(r.get::<String>("reservation_id").map_err(unavailable)?);
        }
        Ok(InventoryLookupOutput {
            evidence_ref: format!("stock://{}/{}", input.shelf_id, input.sku),
            on_hand: stock.get("on_hand").map_err(unavailable)?,
            reserved,
            reservation_ids: ids,
            sku: input.sku,
        })
    }

    async fn inventory_reserve(
        &self,
        ctx: &CallContext,
        input: InventoryReserveInput,
        trusted: InventoryReserveTrusted,
    ) -> Result<InventoryReserveOutput, ToolError> {
        let id = format!("R-{}", &trusted.idempotency_key[..16]);
        let mut tx = self.db.begin_write().await.map_err(unavailable)?;
        let on_hand: Option<i64> = match tx
            .fetch_optional(
                "SELECT on_hand FROM stock WHERE tenant_id = ? AND shelf_id = ? AND sku = ?",
                &params![&ctx.tenant_id, &input.shelf_id, &input.sku],
            )
            .await
            .map_err(unavailable)?
        {
            Some(r) => Some(r.get("on_hand").map_err(unavailable)?),
            None => None,
        };
        let on_hand =
            on_hand.ok_or_else(|| ToolError::business("SKU_UNKNOWN", "no such product"))?;
        let taken = tx.fetch_optional("SELECT CAST(COALESCE(SUM(units), 0) AS BIGINT) AS n FROM reservations WHERE tenant_id = ? AND shelf_id = ? AND sku = ? AND idempotency_key <> ?", &params![&ctx.tenant_id, &input.shelf_id, &input.sku, &trusted.idempotency_key])
            .await
            .map_err(unavailable)?
            .map(|r| r.get::<i64>("n"))
            .transpose()
            .map_err(unavailable)?
            .unwrap_or(0);
        if taken + input.units > on_hand {
            return Err(ToolError::business(
                "INSUFFICIENT_STOCK",
                "not enough units left",
            ));
        }
        // The key makes the write happen once; a repeat returns the same reservation.
        tx.execute("INSERT INTO reservations (tenant_id, idempotency_key, reservation_id, shelf_id, sku, units) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", &params![&ctx.tenant_id, &trusted.idempotency_key, &id, &input.shelf_id, &input.sku, input.units])
            .await
            .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(InventoryReserveOutput {
            evidence_ref: format!("reservation://{id}"),
            reservation_id: id,
            units: input.units,
        })
    }
}

/// The API's question "does this shelf exist for this tenant?", from the stock.
impl Resources for Warehouse {
    fn exists<'a>(
        &'a self,
        tenant_id: &'a str,
        resource_id: &'a str,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>> {
        Box::pin(async move {
            self.shelf_exists(tenant_id, resource_id)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
