//! Fault injection for the crash and fault tests (feature `fault-injection` only):
//! with `CASEOPS_FAULT_KILL_AT_COMMIT=N` the process sends itself SIGKILL right after
//! its N-th run-store commit, so a test can prove recovery from every commit point;
//! with `CASEOPS_FAULT_TOOL_DELAY_MS=N` every MCP `tools/call` takes N ms longer, so
//! a test can hold runs in flight while it kills or stops a replica; with
//! `CASEOPS_FAULT_KILL_AFTER_TOOL=name` the process dies right after that tool's
//! handler returned, before its result is sent or committed (a write's effect
//! happened and nothing recorded it); with `CASEOPS_FAULT_HANG_AFTER_TOOL=name` that
//! tool's first call answers nothing after its handler returned, until the caller
//! gives up (a tool server that times out after applying the effect).

#[cfg(feature = "fault-injection")]
fn die() -> ! {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    // `kill` delivers asynchronously; never run past the point.
    std::process::abort();
}

#[cfg(feature = "fault-injection")]
pub fn after_commit(commits: usize) {
    let target = std::env::var("CASEOPS_FAULT_KILL_AT_COMMIT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    if target == Some(commits) {
        die();
    }
}

#[cfg(feature = "fault-injection")]
pub fn after_tool(name: &str) {
    if std::env::var("CASEOPS_FAULT_KILL_AFTER_TOOL").is_ok_and(|t| t == name) {
        die();
    }
}

/// Hangs the first call of the named tool for good, once its handler returned.
#[cfg(feature = "fault-injection")]
pub async fn hang_after_tool(name: &str) {
    static HUNG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if std::env::var("CASEOPS_FAULT_HANG_AFTER_TOOL").is_ok_and(|t| t == name)
        && !HUNG.swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        std::future::pending::<()>().await;
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub async fn hang_after_tool(_name: &str) {}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn after_tool(_name: &str) {}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn after_commit(_commits: usize) {}

#[cfg(feature = "fault-injection")]
pub async fn tool_delay() {
    static DELAY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let ms = *DELAY.get_or_init(|| {
        std::env::var("CASEOPS_FAULT_TOOL_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    if ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub async fn tool_delay() {}
