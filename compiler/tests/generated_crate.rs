//! The fixture golden crate (generated from `tests/bundle-fixture`, compiled as a
//! workspace member) used as a host would use it.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bundle::tools::*;
use caseops_fixture_generated as bundle;
use caseops_runtime::{CallContext, ContractBundle, FieldSource, Risk, RunStateEnum, ToolError};

/// Runs a future whose handlers never wait (these return ready futures).
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

struct Handlers;

impl ToolHandlers for Handlers {
    async fn inventory_lookup(
        &self,
        ctx: &CallContext,
        input: InventoryLookupInput,
        trusted: InventoryLookupTrusted,
    ) -> Result<InventoryLookupOutput, ToolError> {
        assert_eq!(
            trusted.tenant_id, ctx.tenant_id,
            "injected from trusted context"
        );
        if input.sku == "NOPE" {
            return Err(ToolError::business("SKU_UNKNOWN", "no such product"));
        }
        Ok(InventoryLookupOutput {
            sku: input.sku,
            status: InventoryLookupOutputStatus::Low,
            unit_price: 2.5,
            locations: vec![InventoryLookupOutputLocationsItem {
                bin: "B1".into(),
                quantity: 3,
                checked_at: "2026-11-30T10:00:00Z".into(),
            }],
            supplier: None,
            evidence_ref: format!("inventory://{}", trusted.tenant_id),
        })
    }

    async fn inventory_reserve(
        &self,
        _ctx: &CallContext,
        input: InventoryReserveInput,
        trusted: InventoryReserveTrusted,
    ) -> Result<InventoryReserveOutput, ToolError> {
        Ok(InventoryReserveOutput {
            reservation_id: trusted.request_key,
            units: input.units,
            r#type: InventoryReserveOutputType::Soft,
        })
    }
}

fn ctx() -> CallContext {
    let mut c = CallContext {
        tenant_id: "t1".into(),
        task_id: "task".into(),
        resource_id: "S-1".into(),
        ..Default::default()
    };
    c.injected.insert("request_key".into(), "rk-1".into());
    c
}

#[test]
fn dispatch_decodes_calls_and_encodes_with_trusted_fields_from_context() {
    let out = block_on(dispatch(
        &Handlers,
        ToolId::InventoryLookup,
        &ctx(),
        serde_json::json!({"shelf_id": "S-1", "sku": "ABC"}),
    ))
    .unwrap();
    assert_eq!(out["status"], "LOW");
    assert_eq!(out["evidence_ref"], "inventory://t1");
    assert!(
        out.get("supplier").is_none(),
        "absent optional field is omitted"
    );
    let out = block_on(dispatch(
        &Handlers,
        ToolId::InventoryReserve,
        &ctx(),
        serde_json::json!({"shelf_id": "S-1", "sku": "ABC", "units": 4}),
    ))
    .unwrap();
    assert_eq!(
        out,
        serde_json::json!({"reservation_id": "rk-1", "units": 4, "type": "SOFT"})
    );
}

#[test]
fn unknown_or_model_supplied_injected_fields_are_rejected() {
    let err = block_on(dispatch(
        &Handlers,
        ToolId::InventoryLookup,
        &ctx(),
        serde_json::json!({"shelf_id": "S-1", "sku": "ABC", "tenant_id": "evil"}),
    ))
    .unwrap_err();
    assert!(
        matches!(err, ToolError::InvalidArguments(ref m) if m.contains("tenant_id")),
        "{err:?}"
    );
}

#[test]
fn a_missing_trusted_value_is_an_error_not_a_default() {
    let mut c = ctx();
    c.injected.clear();
    let err = block_on(dispatch(
        &Handlers,
        ToolId::InventoryReserve,
        &c,
        serde_json::json!({"shelf_id": "S-1", "sku": "ABC", "units": 4}),
    ))
    .unwrap_err();
    assert!(
        matches!(err, ToolError::InvalidArguments(ref m) if m.contains("request_key")),
        "{err:?}"
    );
}

#[test]
fn business_errors_pass_through_dispatch() {
    let err = block_on(dispatch(
        &Handlers,
        ToolId::InventoryLookup,
        &ctx(),
        serde_json::json!({"shelf_id": "S-1", "sku": "NOPE"}),
    ))
    .unwrap_err();
    assert_eq!(err, ToolError::business("SKU_UNKNOWN", "no such product"));
}

#[test]
fn the_contract_table_carries_the_contract_answers() {
    let reserve = ToolId::InventoryReserve.contract();
    assert_eq!(reserve.risk, Risk::ReversibleWrite);
    assert_eq!(reserve.idempotency_key, ["shelf_id", "sku", "request_key"]);
    assert_eq!(reserve.effects.unwrap().confirm_with, "inventory_lookup");
    assert_eq!(reserve.resource_field(), Some("shelf_id"));
    assert_eq!(
        reserve
            .inputs
            .iter()
            .find(|f| f.name == "request_key")
            .unwrap()
            .source,
        FieldSource::SystemInjected
    );
    assert!(
        reserve.retry_allowed(),
        "a write with an idempotency key may retry"
    );
    let lookup = ToolId::from_name("inventory_lookup").unwrap().contract();
    assert_eq!(lookup.backoff.initial_ms, 250);
    assert_eq!(bundle::Bundle::BUDGETS.tool_timeout_seconds(lookup), 8);
    assert_eq!(bundle::Bundle::BUDGETS.max_cost_micro_usd, Some(250_000));
    let schema: serde_json::Value = serde_json::from_str(lookup.input_schema).unwrap();
    assert_eq!(schema["properties"]["sku"]["maxLength"], 32);
}

#[test]
fn the_state_table_is_the_declared_one() {
    use bundle::RunState;
    assert_eq!(RunState::INITIAL, RunState::Created);
    assert!(RunState::is_legal(
        RunState::ToolAuthorized,
        RunState::ToolRunning
    ));
    assert!(!RunState::is_legal(
        RunState::ToolProposed,
        RunState::ToolRunning
    ));
    assert!(!RunState::is_legal(RunState::Created, RunState::Completed));
    assert!(RunState::Completed.is_terminal() && !RunState::Planning.is_terminal());
    assert_eq!(RunState::parse("needs_human"), Some(RunState::NeedsHuman));
}

#[test]
fn the_final_answer_type_round_trips_its_schema_version() {
    let answer: bundle::FinalAnswer = serde_json::from_value(serde_json::json!({
        "schema_version": "warehouse.restock-result.v2", "outcome": "RESTOCKED", "reserved_units": 10
    })).unwrap();
    assert_eq!(answer.outcome.as_str(), "RESTOCKED");
    assert_eq!(
        bundle::Bundle::FINAL_ANSWER_SCHEMA_VERSION,
        "warehouse.restock-result.v2"
    );
}
