//! Stage 7, execution: the executor runs an authorized call under the contract's
//! timeout; transient failures of tools that are safe to retry are retried with
//! exponential backoff and jitter; an unknown effect is never retried blindly.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use crate::contract::{BackoffKind, Budgets, ErrorClass, ToolContract};
use crate::fingerprint::sha256_hex;
use crate::handler::CallContext;

/// One call as the executor receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub tool_call_id: String,
    pub tool: &'static ToolContract,
    pub arguments: Value,
    pub context: CallContext,
    pub attempt: u32,
    pub timeout: Duration,
}

/// Error classes and their default strategies: contract, authorization and business
/// errors are not retried, transient ones are retried with backoff on safe tools,
/// protocol errors fail the call, an unknown effect is reconciled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The call broke its contract (bad arguments at the server, bad result): no retry.
    #[error("contract error `{code}`: {message}")]
    Contract { code: String, message: String },
    /// The server refused the call: no retry; a human decides.
    #[error("authorization error `{code}`: {message}")]
    Authorization { code: String, message: String },
    /// A declared business outcome: no retry.
    #[error("business error `{code}`: {message}")]
    Business { code: String, message: String },
    /// Temporary: bounded retry with backoff, safe tools only.
    #[error("transient error `{code}`: {message}")]
    Transient { code: String, message: String },
    /// The protocol broke (malformed response, unknown method): reinitialize or isolate.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A write may or may not have happened: reconcile with `confirm_with`.
    #[error("unknown effect: {0}")]
    UnknownEffect(String),
}

impl ExecError {
    pub fn class(&self) -> &'static str {
        match self {
            ExecError::Contract { .. } => "contract",
            ExecError::Authorization { .. } => "authorization",
            ExecError::Business { .. } => "business",
            ExecError::Transient { .. } => "transient",
            ExecError::Protocol(_) => "protocol",
            ExecError::UnknownEffect(_) => "unknown_effect",
        }
    }

    pub fn code(&self) -> &str {
        match self {
            ExecError::Contract { code, .. }
            | ExecError::Authorization { code, .. }
            | ExecError::Business { code, .. }
            | ExecError::Transient { code, .. } => code,
            ExecError::Protocol(_) => "PROTOCOL_ERROR",
            ExecError::UnknownEffect(_) => "EFFECT_UNKNOWN",
        }
    }
}

/// What confirming a write found.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectStatus {
    /// The effect happened; this is the write's result.
    Applied(Value),
    /// The effect did not happen.
    NotApplied,
    /// The confirming read could not tell.
    Unknown,
}

/// Runs tool calls (in-process handlers, an MCP client, …).
pub trait Executor: Send + Sync {
    fn execute(&self, call: &ToolCall) -> impl Future<Output = Result<Value, ExecError>> + Send;

    /// Asks `confirm_with` whether an unknown write took effect: by default it calls
    /// the confirming tool through [`Executor::execute`], under the write's timeout; a
    /// confirming call that cannot answer leaves the effect unknown.
    fn confirm_effect(
        &self,
        call: &ToolCall,
        confirm_with: &'static ToolContract,
    ) -> impl Future<Output = Result<EffectStatus, ExecError>> + Send {
        async move {
            let confirm = crate::reconciliation::confirm_call(call, confirm_with);
            match tokio::time::timeout(confirm.timeout, self.execute(&confirm)).await {
                Ok(Ok(answer)) => Ok(crate::reconciliation::interpret(call.tool, &answer)),
                Ok(Err(e)) => Err(e),
                Err(_) => Ok(EffectStatus::Unknown),
            }
        }
    }
}

/// The result of executing one call with its retries.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    pub result: Result<Value, ExecError>,
    pub attempts: u32,
}

/// The delay before attempt `attempt + 1`: exponential (or fixed) from the contract,
/// capped, with deterministic "equal jitter" (half fixed, half spread by the call id)
/// so concurrent retries do not align.
pub fn backoff_delay(tool: &ToolContract, tool_call_id: &str, attempt: u32) -> Duration {
    let b = tool.backoff;
    let base = match b.kind {
        BackoffKind::None => return Duration::ZERO,
        BackoffKind::Fixed => b.initial_ms,
        BackoffKind::Exponential => b
            .initial_ms
            .saturating_mul(1u64 << attempt.saturating_sub(1).min(20)),
    }
    .min(b.max_ms);
    let h = sha256_hex(format!("{tool_call_id}/{attempt}").as_bytes());
    let spread = u64::from_str_radix(&h[..8], 16).unwrap_or(0) % (base / 2 + 1);
    Duration::from_millis(base / 2 + spread)
}

/// Executes with the per-tool timeout (`min(contract, ceiling)`) and the retry rules.
pub async fn execute<E: Executor>(executor: &E, mut call: ToolCall, budgets: &Budgets) -> Executed {
    let tool = call.tool;
    call.timeout = Duration::from_secs(u64::from(budgets.tool_timeout_seconds(tool)));
    let max = tool.max_attempts.max(1);
    let mut attempt = 1;
    loop {
        call.attempt = attempt;
        let result = match tokio::time::timeout(call.timeout, executor.execute(&call)).await {
            Ok(r) => r,
            // A read that timed out can be retried; a write's effect is unknown.
            Err(_) if tool.risk.is_write() => Err(ExecError::UnknownEffect(format!(
                "no answer within {} s",
                call.timeout.as_secs()
            ))),
            Err(_) => Err(ExecError::Transient {
                code: "TOOL_TIMEOUT".into(),
                message: format!("no answer within {} s", call.timeout.as_secs()),
            }),
        };
        // A declared code's class decides; an undeclared business code stays business.
        let result = match result {
            Err(ExecError::Business { code, message })
                if tool.error_class(&code) == Some(ErrorClass::Transient) =>
            {
                Err(ExecError::Transient { code, message })
            }
            other => other,
        };
        let retry = matches!(result, Err(ExecError::Transient { .. }))
            && tool.retry_allowed()
            && attempt < max;
        if !retry {
            return Executed {
                result,
                attempts: attempt,
            };
        }
        crate::telemetry::retry(tool.name, "transient");
        tokio::time::sleep(backoff_delay(tool, &call.tool_call_id, attempt)).await;
        attempt += 1;
    }
}
