//! Property tests: no input, however broken, makes the parser or the checker panic.

use caseops_compile::{Sources, check_sources, render, source, yaml};
use proptest::prelude::*;

fn repo_sources() -> Sources {
    source::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

/// Fragments that make YAML-shaped text reaching deep into the contract readers.
fn yamlish() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "name",
        "version",
        "input",
        "output",
        "risk",
        "max_attempts",
        "timeout_seconds",
        "effects",
        "confirm_with",
        "type",
        "items",
        "fields",
        "enum",
        "source",
        "case_id",
        "tenant_id",
        "stages",
        "transitions",
        "initial",
        "budgets",
        "&a",
        "*a",
        "<<",
        "?",
    ]);
    let values = prop::sample::select(vec![
        "",
        "read_only",
        "reversible_write",
        "model-proposed",
        "run-bound-resource",
        "optional list of string",
        "list of",
        "\"1.0\"",
        "1.0",
        "-1",
        "99999999999999999999999",
        "[a, b",
        "{x: 1}",
        "- a",
        "|",
        ">",
        "~",
        "null",
        "true",
        "'q",
        "道路",
        "\t",
        "!!binary x",
    ]);
    prop::collection::vec((0usize..4, keys, values), 0..24).prop_map(|lines| {
        lines
            .into_iter()
            .map(|(indent, k, v)| format!("{}{k}: {v}\n", "  ".repeat(indent)))
            .collect()
    })
}

fn check_as_tool(bytes: Vec<u8>) {
    let mut sources = repo_sources();
    sources.add("contracts/tools/caseops_resolve_document_alias.yaml", bytes);
    let checked = check_sources(sources);
    // Rendering touches every span: it must not panic either.
    let _ = render::human(&checked.sources, &checked.diagnostics, false);
    let _ = render::json(&checked.sources, &checked.diagnostics);
    let _ = render::sarif(&checked.sources, &checked.diagnostics);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_parser_or_checker(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = yaml::parse(&String::from_utf8_lossy(&bytes));
        check_as_tool(bytes);
    }

    #[test]
    fn arbitrary_yaml_never_panics_as_any_contract(text in yamlish()) {
        let _ = yaml::parse(&text);
        check_as_tool(text.clone().into_bytes());
        for path in ["contracts/agent.yaml", "contracts/state-machine.yaml"] {
            let mut sources = repo_sources();
            sources.add(path, text.clone().into_bytes());
            let checked = check_sources(sources);
            let _ = render::human(&checked.sources, &checked.diagnostics, false);
        }
    }

    #[test]
    fn every_diagnostic_span_lies_inside_its_file(text in yamlish()) {
        let mut sources = repo_sources();
        sources.add("contracts/tools/caseops_resolve_document_alias.yaml", text.into_bytes());
        let checked = check_sources(sources);
        for d in &checked.diagnostics {
            for l in d.primary.iter().chain(&d.secondary) {
                let f = checked.sources.get(l.file);
                prop_assert!(l.span.start <= l.span.end && l.span.end <= f.text.len(), "{:?}", d);
            }
        }
    }
}
