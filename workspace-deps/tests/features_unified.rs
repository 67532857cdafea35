//! Every binary of the workspace builds each third-party dependency with a feature
//! set the workspace's test build (`cargo test --workspace --all-features`) also
//! builds, so switching between the README's commands and `cargo run -p
//! caseops-compile` reuses most compiled dependencies instead of rebuilding them.
//! (`cargo tree` does not tell a build script's copy of a crate from the program's.
//! Both compile alike because the dev profile states the dependencies' debug level
//! (the workspace's Cargo.toml says why); a feature set that only one side of a
//! build asks for, as `indexmap`'s `serde` was for the service, is found by
//! building a copy: `.ci/run`'s ignored tests compile only the copy's own crates.)

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// `package → feature sets` as `cargo tree` resolves them for `args`.
fn feature_sets(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--locked", "--offline", "--prefix", "none"])
        .args(["--format", "{p}|{f}"])
        .args(args)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut sets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, features)) = line.trim_end_matches(" (*)").split_once('|') else {
            continue;
        };
        // Workspace members differ by their own features (`--all-features`); only
        // third-party packages are compiled once and shared.
        if package.contains(" (/") {
            continue;
        }
        sets.entry(package.to_string())
            .or_default()
            .insert(features.to_string());
    }
    sets
}

#[test]
fn every_binary_builds_its_dependencies_with_feature_sets_the_test_build_shares() {
    let workspace = feature_sets(&["--workspace", "--all-features", "-e", "normal,build,dev"]);
    let mut gaps = Vec::new();
    for binary in ["caseops-compile", "caseops-service"] {
        for (package, sets) in feature_sets(&["-p", binary, "-e", "normal,build"]) {
            let shared = workspace.get(&package).cloned().unwrap_or_default();
            for features in sets.difference(&shared) {
                gaps.push(format!(
                    "{binary}: {package} with [{features}]; the test build has {:?}",
                    shared
                ));
            }
        }
    }
    assert!(
        gaps.is_empty(),
        "add these features to workspace-deps/Cargo.toml ([build-dependencies] for \
         proc macros' and build scripts' dependencies):\n{}",
        gaps.join("\n")
    );
}
