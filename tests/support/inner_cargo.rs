//! Shared by the tests that run a second `cargo` inside the suite's build folder
//! (`compiler/tests/new_project.rs`, `service/tests/adding_a_tool.rs`), each
//! including it with `#[path]`: they belong to two crates with no test-support
//! crate in common.

use std::process::Command;

/// Leaves out of an inner `cargo` the variables cargo set for this test process:
/// build scripts that watch one of them (ring's watches `CARGO_MANIFEST_DIR` and
/// `CARGO_PKG_NAME`) would otherwise rerun in the shared build folder and rebuild
/// what the suite's own build compiled.
pub fn without_test_env(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&name.as_ref())
        {
            command.env_remove(name.as_ref());
        }
    }
    command
}
