//! The Cedar half of the compiler: the generated schema, policy validation against
//! it, and `caseops-compile test` with the real Cedar authorizer.

mod temp_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use temp_support::TempProject;

use caseops_compile::{check_sources, policies, render, run_scenarios, source};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn repo_checked() -> caseops_compile::Checked {
    caseops_compile::check_root(&repo_root()).unwrap()
}

#[test]
fn generated_cedar_schema_json_matches_snapshot() {
    let checked = repo_checked();
    let p = checked
        .policies
        .as_ref()
        .expect("repository policies validate");
    insta::assert_snapshot!(serde_json::to_string_pretty(&p.schema_json).unwrap());
}

#[test]
fn generated_cedar_schema_text_matches_snapshot() {
    let checked = repo_checked();
    let p = checked.policies.as_ref().unwrap();
    insta::assert_snapshot!(policies::schema_text(&p.schema_json).unwrap());
}

#[test]
fn generated_cedar_schema_text_parses_back_to_the_same_schema() {
    let checked = repo_checked();
    let p = checked.policies.as_ref().unwrap();
    let text = policies::schema_text(&p.schema_json).unwrap();
    // The text form is a schema of its own: the repository policies validate against it.
    let (schema, _) = cedar_policy::Schema::from_cedarschema_str(&text).unwrap();
    let result =
        cedar_policy::Validator::new(schema).validate(&p.set, cedar_policy::ValidationMode::Strict);
    assert!(result.validation_passed(), "{result}");
    let direct = cedar_policy::SchemaFragment::from_json_value(p.schema_json.clone()).unwrap();
    assert_eq!(
        direct.to_cedarschema().unwrap().replace("__cedar::", ""),
        text
    );
    assert!(
        !text.contains("__cedar::"),
        "primitive types are printed plainly"
    );
}

#[test]
fn system_injected_fields_never_reach_the_cedar_context() {
    let mut sources = source::load(&repo_root()).unwrap();
    let path = "contracts/tools/caseops_resolve_document_alias.yaml";
    let text = String::from_utf8(std::fs::read(repo_root().join(path)).unwrap()).unwrap();
    let text = text.replace(
        "  document_id:\n",
        "  tenant_id: system-injected\n  approval_ref: system-injected\n  document_id:\n",
    );
    sources.add(path, text.into_bytes());
    let checked = check_sources(sources);
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    let schema = &checked.policies.as_ref().unwrap().schema_json;
    let args = &schema["CaseOps"]["actions"]["caseops_resolve_document_alias"]["appliesTo"]["context"]
        ["attributes"]["arguments"]["attributes"];
    let names: Vec<&str> = args
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, ["case_id", "document_id"]);
}

#[test]
fn each_tool_is_an_action_in_the_group_of_its_risk() {
    let checked = repo_checked();
    let actions = &checked.policies.as_ref().unwrap().schema_json["CaseOps"]["actions"];
    for tool in &checked.project.tools {
        let group = match tool.risk.value.as_str() {
            "read_only" => "ReadOnly",
            "reversible_write" => "ReversibleWrite",
            _ => "IrreversibleWrite",
        };
        assert_eq!(actions[&tool.name.value]["memberOf"][0]["id"], group);
    }
    for group in ["ReadOnly", "ReversibleWrite", "IrreversibleWrite"] {
        assert!(actions.get(group).is_some(), "{group}");
    }
}

#[test]
fn renaming_an_argument_fails_the_policy_that_used_it_on_the_attribute() {
    let mut sources = source::load(&repo_root()).unwrap();
    let policy = "\n@id(\"forbid-odd-document\")\n@reason(\"TOOL_RESOURCE_MISMATCH\")\nforbid (principal, action == CaseOps::Action::\"caseops_resolve_document_alias\", resource)\nwhen { context.arguments.document_id == \"DOC-X\" };\n";
    let base =
        String::from_utf8(std::fs::read(repo_root().join("policies/caseops.cedar")).unwrap())
            .unwrap();
    let cedar = base.clone() + policy;
    sources.add("policies/caseops.cedar", cedar.clone().into_bytes());
    assert!(
        !check_sources(sources.clone()).has_errors(),
        "valid before the rename"
    );

    let path = "contracts/tools/caseops_resolve_document_alias.yaml";
    let tool = String::from_utf8(std::fs::read(repo_root().join(path)).unwrap()).unwrap();
    sources.add(
        path,
        tool.replace("  document_id:\n", "  source_document_id:\n")
            .into_bytes(),
    );
    let checked = check_sources(sources);
    let d = checked
        .diagnostics
        .iter()
        .find(|d| d.code.as_str() == "E0402")
        .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics));
    let label = d.primary.as_ref().unwrap();
    assert_eq!(
        checked.sources.get(label.file).path,
        "policies/caseops.cedar"
    );
    assert_eq!(&cedar[label.span.clone()], "context.arguments.document_id");
    // The suggestion itself is Cedar's (it picks the nearest remaining argument).
    assert!(
        d.help.as_deref().unwrap_or("").starts_with("did you mean"),
        "{:?}",
        d.help
    );
    let json = render::json(&checked.sources, &checked.diagnostics);
    assert!(
        json.contains("\"file\": \"policies/caseops.cedar\""),
        "{json}"
    );
}

#[test]
fn every_repository_scenario_passes_and_every_policy_is_exercised() {
    let checked = repo_checked();
    let report = run_scenarios(&checked).expect("no errors");
    assert!(report.results.len() >= 10);
    assert_eq!(report.failed(), 0, "{:#?}", report.results);
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
}

#[test]
fn repository_scenarios_cover_every_reason_and_both_outcomes() {
    let checked = repo_checked();
    // Every reason a policy gives (a declared reason no policy gives cannot be shown).
    let reasons: Vec<String> = checked
        .policies
        .as_ref()
        .unwrap()
        .set
        .policies()
        .filter_map(|p| p.annotation("reason").map(str::to_string))
        .collect();
    assert!(reasons.len() >= 4, "{reasons:?}");
    let expected: Vec<&policies::Outcome> = checked.scenarios.iter().map(|s| &s.expect).collect();
    assert!(expected.contains(&&policies::Outcome::Allow));
    for r in reasons {
        assert!(
            expected.contains(&&policies::Outcome::Deny(Some(r.clone()))),
            "no scenario denies with {r}"
        );
    }
    let names: Vec<&str> = checked
        .scenarios
        .iter()
        .map(|s| s.name.value.as_str())
        .collect();
    assert!(names.iter().any(|n| n.contains("another tenant")));
    assert!(checked.scenarios.iter().any(|s| s.resource == "C-999"));
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_caseops-compile"))
}

fn copy_project(name: &str) -> TempProject {
    let dir = TempProject::new(&format!("test-{name}"));
    for sub in ["contracts/tools", "policies/tests"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for e in std::fs::read_dir(repo_root().join(sub)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join(sub).join(e.file_name())).unwrap();
        }
    }
    for f in [
        "contracts/agent.yaml",
        "contracts/state-machine.yaml",
        "policies/caseops.cedar",
    ] {
        std::fs::copy(repo_root().join(f), dir.join(f)).unwrap();
    }
    dir
}

#[test]
fn test_command_passes_on_the_repository_with_a_line_per_scenario() {
    let out = bin()
        .arg("test")
        .arg("--root")
        .arg(repo_root())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(
        "ok    policies/tests/read_only_tools.yaml: a valid but foreign case of the same tenant is denied"
    ));
    assert!(text.trim_end().ends_with(" passed, 0 failed"), "{text}");
}

#[test]
fn test_command_fails_on_a_wrong_expectation_and_names_both_outcomes() {
    let root = copy_project("fail");
    let path = root.join("policies/tests/read_only_tools.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen(
            "resource: C-999\n    expect: deny\n    reason: TOOL_RESOURCE_MISMATCH",
            "resource: C-999\n    expect: allow",
            1,
        ),
    )
    .unwrap();
    let out = bin().arg("test").arg("--root").arg(&root).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL  policies/tests/read_only_tools.yaml: a valid but foreign case of the same tenant is denied: expected allow, got deny (TOOL_RESOURCE_MISMATCH)"), "{text}");
    assert!(text.contains(", 1 failed"));
}

#[test]
fn test_command_warns_about_a_policy_no_scenario_exercises() {
    let root = copy_project("unexercised");
    std::fs::remove_file(root.join("policies/tests/writes.yaml")).unwrap();
    let out = bin().arg("test").arg("--root").arg(&root).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning does not fail: {text}"
    );
    assert!(
        text.contains(
            "warning[W0402]: no scenario's decision was determined by policy `forbid-unapproved-irreversible-writes`"
        ),
        "{text}"
    );
}

#[test]
fn test_command_refuses_to_run_scenarios_on_a_broken_project() {
    let root = copy_project("broken");
    let path = root.join("policies/caseops.cedar");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace(
            "principal.scopes.contains(context.required_scope) &&",
            "principal.scope.contains(context.required_scope) &&",
        ),
    )
    .unwrap();
    let out = bin().arg("test").arg("--root").arg(&root).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text.contains("error[E0402]") && text.contains("scenarios not run"),
        "{text}"
    );
}
