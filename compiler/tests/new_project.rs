//! `caseops-compile new`: the project it writes passes the compiler's own checks as
//! it comes, and (ignored by default: it builds the project's crates) its smoke test.

#[path = "../../tests/support/inner_cargo.rs"]
mod inner_cargo;
mod temp_support;

use inner_cargo::without_test_env;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use temp_support::TempProject;

fn compile(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_caseops-compile"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `new <tmp>/shelf-checker` run from `tmp`; returns the project folder.
fn scaffold(tmp: &Path) -> PathBuf {
    let out = compile(&["new", "shelf-checker"], tmp);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("created agent `shelf_checker`"),
        "{}",
        text(&out)
    );
    tmp.join("shelf-checker")
}

#[test]
fn a_new_project_passes_check_test_and_build_as_it_comes() {
    let tmp = TempProject::new("new-project");
    let project = scaffold(&tmp);

    // `check` from inside the project finds it (and sees generated/ is current).
    let check = compile(&["check", "--deny-warnings"], &project.join("host/src"));
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        text(&check).contains("no problems found"),
        "{}",
        text(&check)
    );

    let test = compile(&["test"], &project);
    assert!(test.status.success(), "{}", text(&test));
    assert!(
        text(&test).contains("4 passed, 0 failed"),
        "{}",
        text(&test)
    );

    let before = std::fs::read(project.join("generated/src/lib.rs")).unwrap();
    let build = compile(&["build"], &project);
    assert!(build.status.success(), "{}", text(&build));
    assert_eq!(
        std::fs::read(project.join("generated/src/lib.rs")).unwrap(),
        before,
        "build rewrote what new wrote"
    );

    // Its Rust is as `cargo fmt` leaves it.
    let fmt = Command::new("rustfmt")
        .args(["--check", "--edition", "2024"])
        .args(["host/src/main.rs", "host/src/tools.rs", "host/src/lib.rs"])
        .arg("host/tests/smoke.rs")
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(fmt.status.success(), "{}", text(&fmt));

    // The crates are named after the project and depend on this checkout.
    let host = std::fs::read_to_string(project.join("host/Cargo.toml")).unwrap();
    assert!(host.contains("name = \"shelf-checker-host\""), "{host}");
    let platform = host
        .lines()
        .find(|l| l.starts_with("caseops-host"))
        .and_then(|l| l.split('"').nth(1))
        .unwrap();
    assert!(
        project
            .join("host")
            .join(platform)
            .join("Cargo.toml")
            .is_file(),
        "`{platform}` is not caseops-host from host/"
    );
    let generated = std::fs::read_to_string(project.join("generated/Cargo.toml")).unwrap();
    assert!(
        generated.contains("name = \"shelf-checker-generated\""),
        "{generated}"
    );
}

#[test]
fn new_refuses_a_folder_with_files_and_a_name_cargo_could_not_use() {
    let tmp = TempProject::new("new-refusals");
    std::fs::create_dir_all(tmp.join("taken")).unwrap();
    std::fs::write(tmp.join("taken/notes.txt"), "mine").unwrap();
    let out = compile(&["new", "taken"], &tmp);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("is not empty"), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(tmp.join("taken/notes.txt")).unwrap(),
        "mine"
    );

    let out = compile(&["new", "Bad_Name"], &tmp);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("`Bad_Name` is not a usable project name"),
        "{}",
        text(&out)
    );
    assert!(
        !tmp.join("Bad_Name").exists(),
        "nothing is written for a bad name"
    );

    let out = compile(&["new", "lost", "--caseops", "/nonexistent"], &tmp);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--caseops"), "{}", text(&out));
}

/// Builds the new project's crates against this checkout and runs its smoke test:
/// a real `serve` process, a run through the API, the tool over MCP. The project
/// gets this workspace's lock file (same dependency versions, no resolution) and
/// the artifact folder `target/scratch`, which `.ci/run` shares with the other
/// ignored build tests, with this workspace's build folder for the intermediate
/// artifacts, so dependencies already compiled are reused.
///
/// Reuse needs the same features too: the workspace's tests switch on a few more
/// of some dependencies' features (`std`, `serde`, `derive`, ...), and one differing
/// feature rebuilds a crate and everything above it (nine minutes of this test on a
/// 2-core machine). So the project gets one dev-dependency more, the workspace's
/// feature unifier: it adds features, never code of its own, and no crate the
/// template's code uses directly gains one it could come to rely on.
#[test]
#[ignore = "builds the new project's crates; .ci/run runs it with --ignored"]
fn a_new_project_passes_its_own_smoke_test() {
    let tmp = TempProject::new("new-smoke");
    let project = scaffold(&tmp);
    std::fs::copy(repo_root().join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    let manifest = project.join("host/Cargo.toml");
    let mut host = std::fs::read_to_string(&manifest).unwrap();
    host.push_str(&format!(
        "\n[dev-dependencies.caseops-workspace-deps]\npath = {:?}\nfeatures = [\"compiler\", \"service\"]\n",
        repo_root().join("workspace-deps").canonicalize().unwrap()
    ));
    std::fs::write(&manifest, host).unwrap();
    let out = without_test_env(&mut Command::new(env!("CARGO")))
        .args(["test", "--quiet"])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", repo_root().join("target/scratch"))
        .env("CARGO_BUILD_BUILD_DIR", repo_root().join("target"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("test result: ok. 1 passed"),
        "{}",
        text(&out)
    );
}
