//! The `caseops-compile` binary as a user runs it: exit codes, formats, `explain`.

mod temp_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use temp_support::TempProject;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_caseops-compile"))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A copy of the repository's contracts and policies in a fresh temporary directory.
fn project_copy(name: &str) -> TempProject {
    let dir = TempProject::new(&format!("cli-{name}"));
    copy_dir(&repo_root().join("contracts"), &dir.join("contracts"));
    copy_dir(&repo_root().join("policies"), &dir.join("policies"));
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

fn check(root: &Path, extra: &[&str]) -> Output {
    bin()
        .arg("check")
        .arg("--root")
        .arg(root)
        .args(extra)
        .output()
        .unwrap()
}

fn break_resolve_tool(root: &Path) {
    let path = root.join("contracts/tools/caseops_resolve_document_alias.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("max_attempts: 2", "max_attempts: 9")).unwrap();
}

#[test]
fn check_on_the_repository_exits_zero_and_says_so() {
    let out = check(&repo_root(), &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no problems found\n");
}

#[test]
fn an_invalid_contract_exits_one_with_a_located_human_diagnostic() {
    let root = project_copy("human");
    break_resolve_tool(&root);
    let out = check(&root, &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("error[E0114]"), "{text}");
    assert!(
        text.contains("contracts/tools/caseops_resolve_document_alias.yaml:"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no colour when stdout is not a terminal"
    );
}

#[test]
fn json_format_carries_code_file_and_one_based_positions() {
    let root = project_copy("json");
    break_resolve_tool(&root);
    let out = check(&root, &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &v[0];
    assert_eq!(d["code"], "E0114");
    assert_eq!(d["severity"], "error");
    assert_eq!(
        d["file"],
        "contracts/tools/caseops_resolve_document_alias.yaml"
    );
    let text =
        std::fs::read_to_string(root.join("contracts/tools/caseops_resolve_document_alias.yaml"))
            .unwrap();
    let line = text.lines().position(|l| l == "max_attempts: 9").unwrap() + 1;
    assert_eq!(d["line"], line);
    assert_eq!(d["column"], 15);
    assert_eq!(d["end_column"], 16);
    assert!(d["help"].as_str().unwrap().contains("between 1 and 5"));
}

#[test]
fn sarif_format_is_a_2_1_0_log_with_rules_and_regions() {
    let root = project_copy("sarif");
    break_resolve_tool(&root);
    let out = check(&root, &["--format", "sarif"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], "2.1.0");
    let run = &v["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "caseops-compile");
    assert_eq!(run["tool"]["driver"]["rules"][0]["id"], "E0114");
    let result = &run["results"][0];
    assert_eq!(result["ruleId"], "E0114");
    assert_eq!(result["ruleIndex"], 0);
    assert_eq!(result["level"], "error");
    let loc = &result["locations"][0]["physicalLocation"];
    assert_eq!(
        loc["artifactLocation"]["uri"],
        "contracts/tools/caseops_resolve_document_alias.yaml"
    );
    assert!(loc["region"]["startLine"].as_u64().unwrap() > 0);
}

#[test]
fn warnings_pass_unless_denied() {
    let root = project_copy("warn");
    let path = root.join("contracts/tools/caseops_resolve_document_alias.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("timeout_seconds: 5", "timeout_seconds: 30"),
    )
    .unwrap();
    assert_eq!(check(&root, &[]).status.code(), Some(0));
    let denied = check(&root, &["--deny-warnings"]);
    assert_eq!(denied.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&denied.stdout).contains("warning[W0102]"));
}

#[test]
fn a_missing_root_exits_two_with_one_line() {
    let out = check(Path::new("/nonexistent/caseops"), &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/caseops"), "{err}");
}

#[test]
fn the_root_can_come_from_the_environment() {
    let out = bin()
        .arg("check")
        .env("CASEOPS_ROOT", repo_root())
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn an_unknown_format_is_a_usage_error() {
    let out = check(&repo_root(), &["--format", "xml"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn explain_prints_the_rule_with_a_failing_and_a_fixed_example() {
    let out = bin().args(["explain", "e0107"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("error E0107: identity field is not system-injected"),
        "{text}"
    );
    assert!(text.contains("Fails:") && text.contains("tenant_id: model-proposed"));
    assert!(text.contains("Fixed:") && text.contains("tenant_id: system-injected"));
}

#[test]
fn explain_list_names_every_code_once_with_its_title() {
    let out = bin().args(["explain", "--list"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for code in caseops_compile::codes::Code::ALL {
        let lines = text
            .lines()
            .filter(|l| l.starts_with(code.as_str()))
            .count();
        assert_eq!(lines, 1, "{} listed {lines} times", code.as_str());
        assert!(text.contains(code.title()), "{}", code.as_str());
    }
}

#[test]
fn explain_of_an_unknown_code_exits_two() {
    let out = bin().args(["explain", "E9999"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`E9999`"));
}

#[test]
fn check_writes_nothing_into_the_project() {
    let root = project_copy("readonly");
    break_resolve_tool(&root);
    let before = snapshot(&root);
    check(&root, &[]);
    assert_eq!(before, snapshot(&root));
}

fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn check_from_a_subfolder_finds_the_project_above_it() {
    let root = project_copy("subfolder");
    let out = bin()
        .arg("check")
        .env_remove("CASEOPS_ROOT")
        .current_dir(root.join("contracts/tools"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("no problems found"));
}

#[test]
fn check_outside_any_project_says_how_to_point_at_one() {
    let outside = TempProject::new("outside");
    let out = bin()
        .arg("check")
        .env_remove("CASEOPS_ROOT")
        .current_dir(&*outside)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("error[E0009]") && text.contains("pass `--root`"),
        "{text}"
    );
}

#[test]
fn a_generated_crate_keeps_its_own_name_through_build_and_check() {
    let dir = project_copy("crate-name");
    let build = |extra: &[&str]| {
        bin()
            .arg("build")
            .arg("--root")
            .arg(&*dir)
            .args(extra)
            .output()
            .unwrap()
    };
    let first = build(&[
        "--crate-name",
        "my-bundle",
        "--runtime-path",
        "../../runtime",
    ]);
    assert!(first.status.success(), "{first:?}");
    // `check` compares with what `build` would write into that crate, not with a
    // crate of the default name.
    let out = check(&dir, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A bare `build` keeps the name and the runtime path.
    assert!(build(&[]).status.success());
    let manifest = std::fs::read_to_string(dir.join("generated/Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"my-bundle\""), "{manifest}");
    assert!(manifest.contains("path = \"../../runtime\""), "{manifest}");
}
