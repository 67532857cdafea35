//! `caseops-compile check` speed: the repository, and generated stress projects of
//! 1,000 tools + 1,000 policies and 10,000 + 10,000 (contracts read, checked, schema
//! generated, every policy validated by Cedar's strict validator, every tool's
//! reachability asked of Cedar's authorizer).
//!
//! Run with `cargo bench -p caseops-compile --bench check`.

use std::hint::black_box;
use std::path::Path;

use caseops_compile::{Sources, check_sources, source};
use criterion::{Criterion, criterion_group, criterion_main};

/// A project with `n` read-only tools and one permit and one forbid policy per tool
/// pair, built on the repository's agent and state machine.
fn stress_sources(n: usize) -> Sources {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = Sources::new();
    let agent = std::fs::read_to_string(root.join("contracts/agent.yaml")).unwrap();
    let (head, tail) = agent.split_once("\ncatalog:").unwrap();
    let (_, after) = tail.split_once("\nbudgets:").unwrap();
    let mut catalog = String::from("\ncatalog:\n");
    for i in 0..n {
        catalog.push_str(&format!("  - stress_tool_{i:04}\n"));
    }
    sources.add(
        "contracts/agent.yaml",
        format!("{head}{catalog}\nbudgets:{after}").into_bytes(),
    );
    sources.add(
        "contracts/state-machine.yaml",
        std::fs::read(root.join("contracts/state-machine.yaml")).unwrap(),
    );
    let mut policies = Vec::new();
    for i in 0..n {
        sources.add(
            format!("contracts/tools/stress_tool_{i:04}.yaml"),
            format!(
                "name: stress_tool_{i:04}\nversion: \"1.0\"\ndescription: Stress tool {i}.\nrequired_scope: stress:read{}\nrisk: read_only\ntimeout_seconds: 5\nmax_attempts: 2\ninput:\n  case_id: {{source: run-bound-resource, max_length: 80}}\n  label: {{source: model-proposed, max_length: 200}}\n  limit: {{source: model-proposed, type: integer, minimum: 1, maximum: 50}}\noutput:\n  found: boolean\n  codes: list of string\n  evidence_ref: string\n",
                i % 7
            )
            .into_bytes(),
        );
        let effect = if i % 2 == 0 {
            format!(
                "@id(\"p{i}\")\npermit (principal is CaseOps::Task, action == CaseOps::Action::\"stress_tool_{i:04}\", resource is CaseOps::Case)\nwhen {{ principal.scopes.contains(context.required_scope) && resource == principal.resource && context.arguments.limit < 40 }};\n"
            )
        } else {
            format!(
                "@id(\"p{i}\")\n@reason(\"TOOL_SCOPE_MISSING\")\nforbid (principal, action == CaseOps::Action::\"stress_tool_{i:04}\", resource)\nwhen {{ context.arguments.label like \"*secret*\" }};\n"
            )
        };
        policies.push(effect);
    }
    // A thousand policies a file: a file may hold at most 1 MiB.
    for (k, chunk) in policies.chunks(1000).enumerate() {
        sources.add(
            format!("policies/stress_{k:02}.cedar"),
            chunk.concat().into_bytes(),
        );
    }
    sources
}

fn bench(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let repo = source::load(&root).unwrap();
    assert!(!check_sources(repo.clone()).has_errors());
    c.bench_function("check/repository", |b| {
        b.iter(|| black_box(check_sources(black_box(repo.clone()))))
    });

    let mut group = c.benchmark_group("check");
    group.sample_size(10);
    for n in [1000, 10_000] {
        let stress = stress_sources(n);
        let checked = check_sources(stress.clone());
        assert!(
            checked.diagnostics.is_empty(),
            "{:#?}",
            &checked.diagnostics[..3.min(checked.diagnostics.len())]
        );
        group.bench_function(format!("stress_{n}_tools_{n}_policies"), |b| {
            b.iter(|| black_box(check_sources(black_box(stress.clone()))))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
