//! Fault injection for the crash tests (feature `fault-injection` only): with
//! `CASEOPS_FAULT_KILL_AT_COMMIT=N` the process sends itself SIGKILL right after its
//! N-th run-store commit, so a test can prove recovery from every commit point.

#[cfg(feature = "fault-injection")]
pub fn after_commit(commits: usize) {
    let target = std::env::var("CASEOPS_FAULT_KILL_AT_COMMIT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    if target == Some(commits) {
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        // `kill` delivers asynchronously; never run past the point.
        std::process::abort();
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn after_commit(_commits: usize) {}
