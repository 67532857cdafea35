//! `cargo` as a shell would start it, for tests that build a project beside this
//! workspace and share its build folder.

use std::process::Command;

/// `cargo test` hands this test its own package's `CARGO_PKG_*`, `CARGO_MANIFEST_*`
/// and a few more. A build script that tracks one of them (ring's tracks
/// `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`) reruns when the value differs from
/// the workspace build's, where they are unset, and every crate above it rebuilds:
/// ring, rustls, reqwest, async-nats and the OpenTelemetry exporter, minutes on two
/// cores, and once more in the next build without those variables.
pub fn plain_cargo() -> Command {
    let mut cargo = Command::new(env!("CARGO"));
    for (key, _) in std::env::vars_os() {
        let name = key.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(
                &*name,
                "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR"
            )
        {
            cargo.env_remove(&key);
        }
    }
    cargo
}
