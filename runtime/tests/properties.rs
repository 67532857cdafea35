//! Property tests: for random planner scripts and random executor failures, every run
//! records a legal path of the transition table, ends within `max_steps + 2` planner
//! calls (one more for a rejected answer's correction round), and no completed run
//! cites evidence its own succeeded calls did not return.

mod support;

use caseops_generated::{Bundle, RunState};
use caseops_runtime::store::MemoryStore;
use caseops_runtime::{ContractBundle, Engine, ExecError, RunStateEnum, ToolCall};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::*;

fn decision() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "caseops_get_case_snapshot",
            "caseops_get_policy_requirements",
            "caseops_list_unclassified_documents",
        ])
        .prop_map(|t| call(t, json!({"case_id": "C-102"}))),
        2 => "[A-Z0-9-]{1,12}".prop_map(|d| call("caseops_resolve_document_alias", json!({"case_id": "C-102", "document_id": d}))),
        1 => Just(call("caseops_get_case_snapshot", json!({"case_id": "C-999"}))),
        1 => Just(call("caseops_get_case_snapshot", json!({"case_id": "C-102", "x": 1}))),
        1 => Just(final_answer()),
        2 => prop::collection::vec(prop::sample::select(vec![
            "case://C-102@7",
            "policy://motor-claim-standard@2026.1",
            "evidence://C-102/DOC-C102-003@1",
            "evidence://C-102/unclassified",
            "evidence://C-102/DOC-FABRICATED@1",
            "case://C-999@1",
        ]), 0..4).prop_map(|refs| {
            let mut answer = final_answer();
            answer["answer"]["evidence_refs"] = json!(refs);
            answer
        }),
        1 => Just(json!({"decision": "needs_human", "reason": "unsure"})),
        1 => Just(json!({"decision": "dance"})),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    Transient,
    Business,
    BadResult,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![6 => Just(Fault::None), 2 => Just(Fault::Transient), 1 => Just(Fault::Business), 1 => Just(Fault::BadResult)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn every_run_is_a_legal_path_and_ends_within_the_step_budget(
        script in prop::collection::vec(decision(), 0..14),
        faults in prop::collection::vec(fault(), 1..20),
        max_steps in 1u32..6,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let faults2 = faults.clone();
        let executor = ScriptExecutor::new(move |c: &ToolCall, n| match faults2[n % faults2.len()] {
            Fault::None => Ok(result_for(c.tool.name, &c.arguments)),
            Fault::Transient => Err(ExecError::Transient { code: "BUSY".into(), message: "busy".into() }),
            Fault::Business => Err(ExecError::Business { code: "CASE_NOT_FOUND".into(), message: "gone".into() }),
            Fault::BadResult => Ok(json!({"unexpected": true})),
        });
        let planner = ScriptPlanner::new(script);
        let store = MemoryStore::new();
        let mut budgets = Bundle::BUDGETS;
        budgets.max_steps = max_steps;
        let engine = Engine::<Bundle>::new().unwrap().with_budgets(budgets);
        let out = rt.block_on(engine.start(spec("p"), &planner, &executor, &store)).unwrap();

        prop_assert!(planner.calls() <= max_steps as usize + 2, "{} planner calls", planner.calls());
        let run = store.get("p").unwrap();
        let mut state = RunState::INITIAL;
        for (i, cp) in run.checkpoints.iter().enumerate() {
            prop_assert_eq!(cp.sequence, i as u64 + 1);
            let to = RunState::parse(&cp.to).unwrap();
            prop_assert!(RunState::is_legal(state, to), "{} → {}", cp.from, cp.to);
            state = to;
        }
        prop_assert!(state.is_terminal());
        prop_assert_eq!(state.as_str(), out.status.as_str());
        prop_assert!(out.step_count <= max_steps);
        // a completed run cites only evidence its succeeded calls returned
        if out.status == "completed" {
            let observed: Vec<&str> = run.ledger.iter()
                .filter(|r| r.status == caseops_runtime::CallStatus::Succeeded)
                .filter_map(|r| {
                    let field = Bundle::tool(&r.tool_name)?.evidence_field;
                    r.result.as_ref()?.get(field)?.as_str()
                })
                .collect();
            let cited = out.final_answer.as_ref().unwrap()["evidence_refs"].as_array().unwrap();
            prop_assert!(!cited.is_empty());
            for reference in cited {
                prop_assert!(observed.contains(&reference.as_str().unwrap()), "{} not observed in {:?}", reference, observed);
            }
        }
        // the ledger agrees with the outcome: nothing is left in flight
        for row in &run.ledger {
            prop_assert!(!matches!(row.status, caseops_runtime::CallStatus::Proposed | caseops_runtime::CallStatus::Authorized | caseops_runtime::CallStatus::Running), "{:?}", row);
        }
    }
}
