//! The run driver: moves a run through the nine stages of a tool call, one legal
//! transition at a time, committing before every external call and at the end.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::Instrument;

use crate::authorization::{Approval, Authorization, AuthzDecision, AuthzLoadError, Principal};
use crate::bundle::ContractBundle;
use crate::capability_filter::{self, Health};
use crate::conclusion::{self, ConclusionCheck, NoDomainRules, Rejection};
use crate::context::{PlannerView, build_view};
use crate::contract::{Budgets, OnUnknown, ToolContract};
use crate::execution::{self, EffectStatus, ExecError, Executor, ToolCall};
use crate::fingerprint::call_hashes;
use crate::goal_assembly;
use crate::handler::{CallContext, idempotency_key};
use crate::machine::{IllegalTransition, Machine};
use crate::normalization::{Observation, normalize};
use crate::proposal::Planner;
use crate::protocol::{self, Decision};
use crate::run::{CallStatus, Checkpoint, LedgerRow, Outcome, RunSpec, SnapshotText, reasons};
use crate::state::RunStateEnum;
use crate::state_update::Controls;
use crate::store::{
    ApprovalRecord, ApprovalRequest, ApprovalStatus, Batch, CommitPoint, RunStore, StoreError,
};
use crate::telemetry;
use crate::validation::{SchemaError, Validators};

/// Why the runtime could not drive a run at all (the run itself records every
/// business outcome; these are infrastructure failures).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("runtime bug: {0}")]
    Illegal(#[from] IllegalTransition),
    #[error("run `{0}` has no committed checkpoint")]
    NotFound(String),
    #[error("run `{run_id}` has a corrupt checkpoint: {message}")]
    Corrupt { run_id: String, message: String },
    /// The driver was asked to stop between steps; the run is committed where it
    /// stopped and another driver may resume it.
    #[error("run `{0}` was handed over between steps")]
    Interrupted(String),
    /// Not a failure: a call of the run waits for a person's approval; the run is
    /// committed in `waiting_approval` and is driven again once it is decided.
    #[error("run `{0}` waits for an approval")]
    AwaitingApproval(String),
}

/// Asked between steps whether the driver should stop and hand its run over (a
/// process shutting down). A step in progress always finishes first.
pub trait Interrupt: Sync {
    fn requested(&self) -> bool;
}

/// Never interrupts.
impl Interrupt for () {
    fn requested(&self) -> bool {
        false
    }
}

impl Interrupt for std::sync::atomic::AtomicBool {
    fn requested(&self) -> bool {
        self.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Loading a bundle failed: its schemas or policies do not compile.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error(transparent)]
    Authorization(#[from] AuthzLoadError),
}

/// Milliseconds since the Unix epoch; injectable so tests can move time.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

fn system_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A bundle's compiled validators and policies, shared by every run.
pub struct Engine<B: ContractBundle> {
    validators: Validators,
    authorization: Authorization,
    budgets: Budgets,
    health: Health,
    clock: Clock,
    conclusion_check: Arc<dyn ConclusionCheck>,
    approval_ttl_ms: u64,
    _bundle: PhantomData<B>,
}

/// How long a person has to decide on a call by default: a day.
pub const DEFAULT_APPROVAL_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// The call in flight as a snapshot names it: by its id. Its ledger row is
/// committed with the snapshot, since every change to the pending row is recorded
/// ([`Run::record_pending`]).
#[derive(Serialize)]
struct PendingRef<'a> {
    tool_call_id: &'a str,
}

/// The call in flight as a snapshot holds it: named (from this version on) or
/// whole (written before; read for runs resumed from one).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
enum StoredPending {
    Whole { row: Box<LedgerRow> },
    Named { tool_call_id: String },
}

impl StoredPending {
    /// The pending call's row: its own, or the ledger's.
    fn restore(self, ledger: &[LedgerRow]) -> Result<LedgerRow, String> {
        match self {
            StoredPending::Whole { row } => Ok(*row),
            StoredPending::Named { tool_call_id } => ledger
                .iter()
                .find(|r| r.tool_call_id == tool_call_id)
                .cloned()
                .ok_or_else(|| format!("pending call `{tool_call_id}` is not in the ledger")),
        }
    }
}

/// The state of a run, written at every commit point but the terminal one (as
/// [`SnapshotOf`]). The spec is not in it: it never changes, so the store keeps it
/// once ([`Batch::spec`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Snapshot {
    /// Only in snapshots written before the spec moved to the store; read for
    /// runs that are resumed from one.
    #[serde(default)]
    spec: Option<RunSpec>,
    state: String,
    sequence: u64,
    stage: String,
    controls: Controls,
    pending: Option<StoredPending>,
    outcome: Option<Outcome>,
}

/// A run being driven, with the checkpoints and ledger rows of the open batch.
struct Run<S: RunStateEnum> {
    spec: RunSpec,
    machine: Machine<S>,
    stage: String,
    controls: Controls,
    /// The id of the call in flight, so that recovery knows what was pending.
    /// Its row is the one the run last recorded for it.
    pending: Option<String>,
    outcome: Option<Outcome>,
    checkpoints: Vec<Checkpoint>,
    ledger: Vec<LedgerRow>,
    /// The run's Cedar entities, built on first use (not persisted: rebuilt on resume).
    principal: Option<Principal>,
    /// Per tool of the bundle's table: whether the policies could permit it in this
    /// run (fixed with the principal, so asked once).
    permitted: Vec<bool>,
    /// The approval the next commit asks for.
    asking: Option<ApprovalRequest>,
    /// Whether the store has the spec (from this run's first commit on).
    spec_recorded: bool,
}

/// [`Snapshot`] as written: borrowed from the run, so a commit copies nothing
/// before it serializes.
#[derive(Serialize)]
struct SnapshotOf<'a> {
    state: &'a str,
    sequence: u64,
    stage: &'a str,
    controls: &'a Controls,
    pending: Option<PendingRef<'a>>,
    outcome: &'a Option<Outcome>,
}

impl<S: RunStateEnum> Run<S> {
    fn snapshot(&self) -> SnapshotText {
        SnapshotText::of(&SnapshotOf {
            state: self.machine.state().as_str(),
            sequence: self.machine.sequence(),
            stage: &self.stage,
            controls: &self.controls,
            pending: self
                .pending
                .as_deref()
                .map(|tool_call_id| PendingRef { tool_call_id }),
            outcome: &self.outcome,
        })
    }

    /// Applies a transition (never an illegal one) and records its checkpoint.
    fn go(&mut self, to: S, reason: Option<&str>, now_ms: u64) -> Result<(), IllegalTransition> {
        let from = self.machine.state().as_str().to_string();
        let sequence = self.machine.apply(to)?;
        // The snapshot is filled in at the commit point, for the batch's last
        // checkpoint only: recovery always starts from the last committed one.
        let snapshot = None;
        self.checkpoints.push(Checkpoint {
            run_id: self.spec.run_id.clone(),
            sequence,
            from,
            to: to.as_str().to_string(),
            at_ms: now_ms,
            reason: reason.map(str::to_string),
            snapshot,
        });
        Ok(())
    }

    fn record(&mut self, row: LedgerRow) {
        self.ledger.retain(|r| r.tool_call_id != row.tool_call_id);
        self.ledger.push(row);
    }

    /// Records the row of the call in flight and names it as pending, so that the
    /// commit that writes the snapshot naming it also writes its row.
    fn record_pending(&mut self, row: &LedgerRow) {
        if self.pending.as_deref() != Some(row.tool_call_id.as_str()) {
            self.pending = Some(row.tool_call_id.clone());
        }
        self.record(row.clone());
    }
}

/// Ends a call without a result (denied, failed, refused): its ledger row says why
/// and the step counts against the no-new-evidence budget.
fn refuse_call<S: RunStateEnum>(
    run: &mut Run<S>,
    mut row: LedgerRow,
    status: CallStatus,
    class: &str,
    code: &str,
    now: u64,
) {
    telemetry::tool_refused(class);
    row.status = status;
    row.error_class = Some(class.to_string());
    row.error_code = Some(code.to_string());
    row.finished_at_ms = Some(now);
    run.record(row);
    run.controls.step_without_result();
}

fn state<S: RunStateEnum>(name: &str) -> S {
    // INVARIANT: the compiler checks that the table declares every state the runtime
    // names (E0306), so a generated bundle always has these.
    S::parse(name).unwrap_or_else(|| panic!("bundle lacks runtime state `{name}`"))
}

impl<B: ContractBundle> Engine<B> {
    /// Compiles the bundle's schemas and policies once.
    pub fn new() -> Result<Self, EngineError> {
        Ok(Self {
            validators: Validators::compile::<B>()?,
            authorization: Authorization::load::<B>()?,
            budgets: B::BUDGETS,
            health: Health::default(),
            clock: Arc::new(system_clock),
            conclusion_check: Arc::new(NoDomainRules),
            approval_ttl_ms: DEFAULT_APPROVAL_TTL_MS,
            _bundle: PhantomData,
        })
    }

    /// How long a person has to decide on a call that needs approval.
    pub fn with_approval_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.approval_ttl_ms = ttl.as_millis() as u64;
        self
    }

    /// Replaces the bundle's budgets (e.g. a tenant with tighter limits).
    pub fn with_budgets(mut self, budgets: Budgets) -> Self {
        self.budgets = budgets;
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The host's domain rules a final answer must satisfy besides grounding.
    pub fn with_conclusion_check(mut self, check: Arc<dyn ConclusionCheck>) -> Self {
        self.conclusion_check = check;
        self
    }

    pub fn with_health(mut self, health: Health) -> Self {
        self.health = health;
        self
    }

    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    pub fn validators(&self) -> &Validators {
        &self.validators
    }

    pub fn authorization(&self) -> &Authorization {
        &self.authorization
    }

    fn now(&self) -> u64 {
        (self.clock)()
    }

    /// The planner's view of a run in its current state (the context builder's input).
    fn view(&self, run: &mut Run<B::State>) -> PlannerView {
        let goal = goal_assembly::assemble::<B>(&run.spec, &run.stage);
        self.ensure_principal(run);
        let tools = capability_filter::effective_tools::<B>(
            &run.spec,
            &run.stage,
            &run.controls.succeeded_tools(),
            &self.health,
            &run.permitted,
        );
        let mut view = build_view(
            &goal,
            run.controls.step_count(),
            self.budgets.max_steps,
            &tools,
            run.controls.observations(),
            self.validators.final_answer_schema(),
            &|name| self.validators.input_schema(name).cloned(),
        );
        view.corrections = run.controls.corrections().to_vec();
        view
    }

    /// The run's Cedar entities, built at its first use (they never change in a run).
    fn ensure_principal(&self, run: &mut Run<B::State>) {
        if run.principal.is_none() {
            run.principal = self
                .authorization
                .principal(&run.spec, &run.stage, B::TOOLS)
                .ok();
            // Entities that cannot be built permit nothing: every call would be denied.
            run.permitted = B::TOOLS
                .iter()
                .map(|t| {
                    run.principal
                        .as_ref()
                        .is_some_and(|p| self.authorization.may_call(p, t))
                })
                .collect();
        }
    }

    /// Starts a new run and drives it to a terminal state.
    pub async fn start<P: Planner, E: Executor, St: RunStore>(
        &self,
        spec: RunSpec,
        planner: &P,
        executor: &E,
        store: &St,
    ) -> Result<Outcome, RuntimeError> {
        self.start_interruptible(spec, planner, executor, store, &())
            .await
    }

    /// [`Engine::start`], stopping between steps when `interrupt` asks
    /// ([`RuntimeError::Interrupted`]).
    pub async fn start_interruptible<P: Planner, E: Executor, St: RunStore, I: Interrupt>(
        &self,
        spec: RunSpec,
        planner: &P,
        executor: &E,
        store: &St,
        interrupt: &I,
    ) -> Result<Outcome, RuntimeError> {
        let now = self.now();
        let mut run = Run {
            stage: spec.stage.clone(),
            spec,
            machine: Machine::new(),
            controls: Controls::new(now),
            pending: None,
            outcome: None,
            checkpoints: Vec::new(),
            ledger: Vec::new(),
            principal: None,
            permitted: Vec::new(),
            asking: None,
            spec_recorded: false,
        };
        self.drive(&mut run, planner, executor, store, interrupt)
            .await
    }

    /// Resumes a run from its last committed checkpoint: a pending read is discarded
    /// and planned again, a write is reconciled with its `confirm_with` tool, anything
    /// else goes to a human.
    pub async fn resume<P: Planner, E: Executor, St: RunStore>(
        &self,
        run_id: &str,
        planner: &P,
        executor: &E,
        store: &St,
    ) -> Result<Outcome, RuntimeError> {
        self.resume_interruptible(run_id, planner, executor, store, &())
            .await
    }

    /// [`Engine::resume`], stopping between steps when `interrupt` asks.
    pub async fn resume_interruptible<P: Planner, E: Executor, St: RunStore, I: Interrupt>(
        &self,
        run_id: &str,
        planner: &P,
        executor: &E,
        store: &St,
        interrupt: &I,
    ) -> Result<Outcome, RuntimeError> {
        let stored = store
            .load(run_id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound(run_id.to_string()))?;
        if let Some(outcome) = stored.outcome {
            return Ok(outcome);
        }
        let last = stored
            .checkpoints
            .last()
            .ok_or_else(|| RuntimeError::NotFound(run_id.to_string()))?;
        let corrupt = |message: String| RuntimeError::Corrupt {
            run_id: run_id.to_string(),
            message,
        };
        let text = last
            .snapshot
            .as_ref()
            .ok_or_else(|| corrupt("the last checkpoint has no snapshot".into()))?;
        let snap: Snapshot =
            serde_json::from_str(text.as_str()).map_err(|e| corrupt(e.to_string()))?;
        let spec_recorded = stored.spec.is_some();
        let spec = stored
            .spec
            .or(snap.spec)
            .ok_or_else(|| corrupt("no spec on record".into()))?;
        if spec.run_id != run_id || snap.sequence != last.sequence {
            return Err(corrupt(
                "snapshot does not belong to this checkpoint".into(),
            ));
        }
        let current = B::State::parse(&snap.state)
            .ok_or_else(|| corrupt(format!("unknown state `{}`", snap.state)))?;
        let mut controls = snap.controls;
        controls
            .restore_observations(&stored.ledger)
            .map_err(corrupt)?;
        controls.resume_segment(last.at_ms, self.now());
        let pending = snap
            .pending
            .map(|p| p.restore(&stored.ledger))
            .transpose()
            .map_err(corrupt)?;
        let pending_id = pending.as_ref().map(|row| row.tool_call_id.clone());
        let mut run = Run {
            spec,
            machine: Machine::restore(current, snap.sequence),
            stage: snap.stage,
            controls,
            pending: pending_id,
            outcome: snap.outcome,
            checkpoints: Vec::new(),
            ledger: Vec::new(),
            principal: None,
            permitted: Vec::new(),
            asking: None,
            spec_recorded,
        };
        if let Some(outcome) = &run.outcome
            && current.is_terminal()
        {
            return Ok(outcome.clone());
        }
        let pending_state =
            ["tool_proposed", "tool_authorized", "tool_running"].contains(&current.as_str());
        if current.as_str() == "waiting_approval" {
            let resumed = self
                .resume_approval(&mut run, pending, stored.approval, executor, store)
                .await?;
            if let Some(outcome) = resumed {
                return Ok(outcome);
            }
        } else if pending_state {
            let resumed = self
                .recover_pending(&mut run, pending, stored.approval.as_ref(), executor, store)
                .await?;
            if let Some(outcome) = resumed {
                return Ok(outcome);
            }
        }
        self.drive(&mut run, planner, executor, store, interrupt)
            .await
    }

    /// A call was pending when the run stopped (`pending`, its row as committed).
    /// Reads are discarded and re-planned; writes are reconciled with
    /// `confirm_with`; anything else goes to a human.
    async fn recover_pending<E: Executor, St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        pending: Option<LedgerRow>,
        approval: Option<&ApprovalRecord>,
        executor: &E,
        store: &St,
    ) -> Result<Option<Outcome>, RuntimeError> {
        let now = self.now();
        let Some(mut row) = pending else {
            return self
                .stop(run, "needs_human", reasons::UNSAFE_RESUME_POINT, store)
                .await;
        };
        let tool = B::tool(&row.tool_name);
        match tool {
            Some(t) if !t.risk.is_write() => {
                row.status = CallStatus::Failed;
                row.error_class = Some("recovery".into());
                row.error_code = Some(reasons::RECOVERED_DISCARDED.into());
                row.finished_at_ms = Some(now);
                run.controls.forget_proposal(&row.fingerprint);
                run.record(row);
                run.pending = None;
                run.controls.recovered();
                run.go(
                    state("planning"),
                    Some("recovery: pending read discarded"),
                    now,
                )?;
                Ok(None)
            }
            Some(t) if t.risk == crate::contract::Risk::ReversibleWrite && t.effects.is_some() => {
                let effects = t.effects.expect("checked");
                let Some(confirm) = B::tool(effects.confirm_with) else {
                    return self
                        .stop(run, "needs_human", reasons::UNSAFE_RESUME_POINT, store)
                        .await;
                };
                let call = self.tool_call(run, t, &row.tool_call_id, row.arguments.clone(), None);
                let status = executor
                    .confirm_effect(&call, confirm)
                    .await
                    .unwrap_or(EffectStatus::Unknown);
                self.settle_unknown(run, t, row, status, store).await
            }
            // An irreversible write in flight: only proof that it took effect lets the
            // run go on; anything else is a person's to settle.
            Some(t) if t.risk == crate::contract::Risk::IrreversibleWrite => {
                let confirmed = match t.effects.and_then(|e| B::tool(e.confirm_with)) {
                    Some(confirm) => {
                        let call =
                            self.tool_call(run, t, &row.tool_call_id, row.arguments.clone(), None);
                        executor.confirm_effect(&call, confirm).await.ok()
                    }
                    None => None,
                };
                // Proven not to have happened, and approved exactly as it stands: the
                // approved action runs now, under the same idempotency key.
                let approved = approval.is_some_and(|a| {
                    a.status == ApprovalStatus::Approved
                        && a.tool_call_id == row.tool_call_id
                        && a.fingerprint == row.fingerprint
                });
                match confirmed {
                    Some(status @ EffectStatus::Applied(_)) => {
                        self.settle_unknown(run, t, row, status, store).await
                    }
                    Some(EffectStatus::NotApplied) if approved => {
                        run.controls.recovered();
                        let (arguments, id, fingerprint) = (
                            row.arguments.clone(),
                            row.tool_call_id.clone(),
                            row.fingerprint.clone(),
                        );
                        self.execute_authorized(
                            run,
                            t,
                            row,
                            arguments,
                            id,
                            Some(fingerprint),
                            executor,
                            store,
                        )
                        .await
                    }
                    _ => {
                        self.stop(run, "needs_human", reasons::UNSAFE_RESUME_POINT, store)
                            .await
                    }
                }
            }
            _ => {
                self.stop(run, "needs_human", reasons::UNSAFE_RESUME_POINT, store)
                    .await
            }
        }
    }

    /// A run parked in `waiting_approval` is driven again: with the decision on record
    /// for its waiting call (`waiting`, its row as committed) it executes exactly that
    /// call (approved), or stops (rejected, expired); with no decision yet it goes
    /// back to waiting.
    async fn resume_approval<E: Executor, St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        waiting: Option<LedgerRow>,
        approval: Option<ApprovalRecord>,
        executor: &E,
        store: &St,
    ) -> Result<Option<Outcome>, RuntimeError> {
        let tool = waiting.as_ref().and_then(|r| B::tool(&r.tool_name));
        let (Some(row), Some(tool)) = (waiting, tool) else {
            return self
                .stop(run, "needs_human", reasons::UNSAFE_RESUME_POINT, store)
                .await;
        };
        let Some(approval) = approval.filter(|a| a.tool_call_id == row.tool_call_id) else {
            return Err(RuntimeError::AwaitingApproval(run.spec.run_id.clone()));
        };
        let now = self.now();
        let refuse = |run: &mut Run<B::State>, row, code: &str| {
            refuse_call(run, row, CallStatus::Denied, "approval", code, now)
        };
        let same_action = approval.fingerprint == row.fingerprint;
        match approval.status {
            ApprovalStatus::Pending => Err(RuntimeError::AwaitingApproval(run.spec.run_id.clone())),
            ApprovalStatus::Rejected => {
                refuse(run, row, reasons::APPROVAL_REJECTED);
                self.stop(run, "stopped", reasons::APPROVAL_REJECTED, store)
                    .await
            }
            ApprovalStatus::Expired => {
                refuse(run, row, reasons::APPROVAL_EXPIRED);
                self.stop(run, "stopped", reasons::APPROVAL_EXPIRED, store)
                    .await
            }
            ApprovalStatus::Approved if !same_action => {
                refuse(run, row, reasons::APPROVAL_MISMATCH);
                self.stop(run, "needs_human", reasons::APPROVAL_MISMATCH, store)
                    .await
            }
            ApprovalStatus::Approved => {
                self.ensure_principal(run);
                let decision = match &run.principal {
                    Some(p) => self.authorization.authorize_with(
                        p,
                        tool,
                        &row.arguments,
                        Approval::Approved,
                    ),
                    None => {
                        AuthzDecision::unevaluable("the run's entities could not be built".into())
                    }
                };
                telemetry::authorization(tool.name, decision.reason());
                if let AuthzDecision::Deny { reason, .. } = decision {
                    refuse_call(run, row, CallStatus::Denied, "authorization", &reason, now);
                    return self.stop(run, "needs_human", &reason, store).await;
                }
                let arguments = row.arguments.clone();
                let id = row.tool_call_id.clone();
                let fingerprint = row.fingerprint.clone();
                let span = telemetry::tool_span(tool.name, &id, &fingerprint, tool.risk.as_str());
                self.execute_authorized(
                    run,
                    tool,
                    row,
                    arguments,
                    id,
                    Some(fingerprint),
                    executor,
                    store,
                )
                .instrument(span)
                .await
            }
        }
    }

    /// Parks the run: the proposed call waits for a person's approval.
    async fn await_approval<St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        tool: &'static ToolContract,
        mut row: LedgerRow,
        store: &St,
    ) -> Result<Option<Outcome>, RuntimeError> {
        let now = self.now();
        row.status = CallStatus::WaitingApproval;
        run.record_pending(&row);
        run.go(state("waiting_approval"), Some("approval requested"), now)?;
        // Derived from the call, so a repeated commit of the same request is one approval.
        let id = crate::fingerprint::sha256_hex(
            format!("{}\0{}", run.spec.run_id, row.tool_call_id).as_bytes(),
        );
        run.asking = Some(ApprovalRequest {
            approval_id: format!("apr-{}", &id[..32]),
            tool_call_id: row.tool_call_id.clone(),
            tool_name: tool.name.to_string(),
            arguments: row.arguments.clone(),
            fingerprint: row.fingerprint.clone(),
            approver_role: tool.approval.unwrap_or_default().to_string(),
            expires_at_ms: now + self.approval_ttl_ms,
        });
        self.commit(run, CommitPoint::AwaitingApproval, store)
            .await?;
        Err(RuntimeError::AwaitingApproval(run.spec.run_id.clone()))
    }

    /// Resolves a write whose effect was unknown, with what `confirm_with` found.
    async fn settle_unknown<St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        tool: &'static ToolContract,
        mut row: LedgerRow,
        status: EffectStatus,
        store: &St,
    ) -> Result<Option<Outcome>, RuntimeError> {
        let now = self.now();
        // The recovered run may be in any pending state; reach tool_running first so
        // every later transition is a legal one.
        match status {
            EffectStatus::Applied(result) => {
                self.advance_to_running(run, now)?;
                match normalize(
                    &self.validators,
                    tool,
                    &row.tool_call_id,
                    &row.arguments,
                    result,
                ) {
                    Ok(obs) => {
                        self.succeed(run, row, obs, now)?;
                        Ok(None)
                    }
                    Err(_) => {
                        row.status = CallStatus::Failed;
                        row.error_class = Some("contract".into());
                        row.error_code = Some(reasons::CONTRACT_VIOLATION.into());
                        run.record(row);
                        self.stop(run, "failed", reasons::CONTRACT_VIOLATION, store)
                            .await
                    }
                }
            }
            EffectStatus::NotApplied => {
                row.status = CallStatus::Failed;
                row.error_class = Some("unknown_effect".into());
                row.error_code = Some(reasons::EFFECT_NOT_APPLIED.into());
                row.finished_at_ms = Some(now);
                run.controls.forget_proposal(&row.fingerprint);
                run.record(row);
                run.pending = None;
                run.controls.recovered();
                run.go(state("planning"), Some("recovery: write not applied"), now)?;
                Ok(None)
            }
            EffectStatus::Unknown => {
                row.status = CallStatus::Failed;
                row.error_class = Some("unknown_effect".into());
                row.error_code = Some(reasons::EFFECT_UNKNOWN.into());
                row.finished_at_ms = Some(now);
                run.record(row);
                let on_unknown = tool
                    .effects
                    .map(|e| e.on_unknown)
                    .unwrap_or(OnUnknown::NeedsHuman);
                let to = if on_unknown == OnUnknown::Fail {
                    "failed"
                } else {
                    "needs_human"
                };
                self.stop(run, to, reasons::EFFECT_UNKNOWN, store).await
            }
        }
    }

    fn advance_to_running(
        &self,
        run: &mut Run<B::State>,
        now: u64,
    ) -> Result<(), IllegalTransition> {
        for s in ["tool_authorized", "tool_running"] {
            let current = run.machine.state().as_str();
            if current == "tool_running" {
                break;
            }
            if (current == "tool_proposed" && s == "tool_authorized")
                || (current == "tool_authorized" && s == "tool_running")
            {
                run.go(state(s), Some("recovery: effect confirmed"), now)?;
            }
        }
        Ok(())
    }

    fn succeed(
        &self,
        run: &mut Run<B::State>,
        mut row: LedgerRow,
        obs: Observation,
        now: u64,
    ) -> Result<(), IllegalTransition> {
        row.status = CallStatus::Succeeded;
        row.result = Some(Value::clone(&obs.result));
        row.finished_at_ms = Some(now);
        let obs = Observation {
            attempt: row.attempt_count,
            bundle_digest: row.bundle_digest.clone(),
            ..obs
        };
        run.record(row);
        run.pending = None;
        run.controls.observe(obs);
        run.go(state("observing"), None, now)
    }

    fn tool_call(
        &self,
        run: &Run<B::State>,
        tool: &'static ToolContract,
        id: &str,
        arguments: Value,
        approved_action: Option<String>,
    ) -> ToolCall {
        let mut context = CallContext {
            tenant_id: run.spec.tenant_id.clone(),
            task_id: run.spec.task_id.clone(),
            subject: run.spec.subject.clone(),
            resource_id: run.spec.resource_id.clone(),
            stage: run.stage.clone(),
            scopes: run.spec.scopes.clone(),
            tool_call_id: id.to_string(),
            correlation_id: run.spec.correlation_id.clone(),
            injected: Default::default(),
            approved_action,
        };
        if let Some(key) = idempotency_key(&run.spec.tenant_id, tool, &arguments) {
            context
                .injected
                .insert("idempotency_key".into(), json!(key));
        }
        ToolCall {
            tool_call_id: id.to_string(),
            tool,
            arguments,
            context,
            attempt: 1,
            timeout: std::time::Duration::from_secs(u64::from(
                self.budgets.tool_timeout_seconds(tool),
            )),
        }
    }

    async fn commit<St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        point: CommitPoint,
        store: &St,
    ) -> Result<(), RuntimeError> {
        let batch = self.batch(run, point);
        store.commit(batch).await?;
        run.spec_recorded = true;
        Ok(())
    }

    /// What the run writes at `point`, taken out of the run.
    fn batch(&self, run: &mut Run<B::State>, point: CommitPoint) -> Batch {
        // A finished run is resumed from its outcome, never from a snapshot.
        if point != CommitPoint::Terminal && !run.checkpoints.is_empty() {
            let snapshot = run.snapshot();
            if let Some(last) = run.checkpoints.last_mut() {
                last.snapshot = Some(snapshot);
            }
        }
        Batch {
            run_id: run.spec.run_id.clone(),
            point,
            spec: (!run.spec_recorded).then(|| run.spec.clone()),
            checkpoints: std::mem::take(&mut run.checkpoints),
            ledger: std::mem::take(&mut run.ledger),
            state: run.machine.state().as_str().to_string(),
            step_count: run.controls.step_count(),
            outcome: run.outcome.clone(),
            approval: run.asking.take(),
        }
    }

    /// Ends the run in `to` with `reason` (for stages that return `Option<Outcome>`).
    async fn stop<St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        to: &str,
        reason: &str,
        store: &St,
    ) -> Result<Option<Outcome>, RuntimeError> {
        self.finish(run, to, Some(reason), None, store)
            .await
            .map(Some)
    }

    /// Grounding first (a fabricated reference is named even when the domain rules
    /// would also object), then the host's domain rules.
    fn accept(&self, run: &Run<B::State>, answer: &Value) -> Result<Option<Value>, Rejection> {
        let observations = run.controls.observations();
        let provenance = match B::CITED_EVIDENCE_FIELD {
            Some(field) => Some(conclusion::ground(
                answer,
                field,
                B::CITED_EVIDENCE_REQUIRED,
                observations,
            )?),
            None => None,
        };
        self.conclusion_check.check(answer, observations)?;
        Ok(provenance.map(|p| serde_json::to_value(p).expect("provenance serializes")))
    }

    /// Moves to a terminal state and commits the outcome with it.
    async fn finish<St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        to: &str,
        reason: Option<&str>,
        answer: Option<Value>,
        store: &St,
    ) -> Result<Outcome, RuntimeError> {
        self.end(run, to, reason, answer, None, store).await
    }

    async fn end<St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        to: &str,
        reason: Option<&str>,
        answer: Option<Value>,
        provenance: Option<Value>,
        store: &St,
    ) -> Result<Outcome, RuntimeError> {
        let outcome = Outcome {
            run_id: run.spec.run_id.clone(),
            status: to.to_string(),
            stop_reason: reason.map(str::to_string),
            final_answer: answer,
            provenance,
            step_count: run.controls.step_count(),
            recovery_count: run.controls.recovery_count(),
        };
        run.outcome = Some(outcome.clone());
        run.pending = None;
        run.go(state(to), reason, self.now())?;
        self.commit(run, CommitPoint::Terminal, store).await?;
        Ok(outcome)
    }

    fn new_row(
        &self,
        run: &Run<B::State>,
        tool: &ToolContract,
        id: &str,
        arguments: &Value,
        arguments_hash: String,
        fingerprint: &str,
    ) -> LedgerRow {
        LedgerRow {
            run_id: run.spec.run_id.clone(),
            tool_call_id: id.to_string(),
            tool_name: tool.name.to_string(),
            tool_version: tool.version.to_string(),
            arguments: arguments.clone(),
            arguments_hash,
            fingerprint: fingerprint.to_string(),
            idempotency_key: idempotency_key(&run.spec.tenant_id, tool, arguments),
            status: CallStatus::Proposed,
            attempt_count: 0,
            result: None,
            error_class: None,
            error_code: None,
            bundle_digest: B::BUNDLE_DIGEST.to_string(),
            started_at_ms: self.now(),
            finished_at_ms: None,
        }
    }

    async fn drive<P: Planner, E: Executor, St: RunStore, I: Interrupt>(
        &self,
        run: &mut Run<B::State>,
        planner: &P,
        executor: &E,
        store: &St,
        interrupt: &I,
    ) -> Result<Outcome, RuntimeError> {
        loop {
            let current = run.machine.state();
            if current.is_terminal() {
                return Ok(run.outcome.clone().expect("a terminal run has an outcome"));
            }
            match current.as_str() {
                "created" | "observing" => {
                    // Between steps: the only place a driver hands a run over.
                    if interrupt.requested() {
                        if !run.checkpoints.is_empty() {
                            self.commit(run, CommitPoint::Suspend, store).await?;
                        }
                        return Err(RuntimeError::Interrupted(run.spec.run_id.clone()));
                    }
                    if let Some(reason) = run.controls.exhausted(&self.budgets, self.now())
                        && current.as_str() == "observing"
                    {
                        return self.finish(run, "stopped", Some(reason), None, store).await;
                    }
                    run.go(state("planning"), None, self.now())?;
                }
                "planning" => {
                    if let Some(outcome) = self.plan_step(run, planner, executor, store).await? {
                        return Ok(outcome);
                    }
                }
                other => {
                    // Only recovery leaves a run in a pending state between steps.
                    return Err(RuntimeError::Corrupt {
                        run_id: run.spec.run_id.clone(),
                        message: format!("cannot continue from `{other}` without recovery"),
                    });
                }
            }
        }
    }

    /// One planner round from `planning`: returns the outcome when the run ended.
    async fn plan_step<P: Planner, E: Executor, St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        planner: &P,
        executor: &E,
        store: &St,
    ) -> Result<Option<Outcome>, RuntimeError> {
        if let Some(reason) = run.controls.exhausted(&self.budgets, self.now()) {
            return self.stop(run, "stopped", reason, store).await;
        }
        if planner.is_external() {
            self.commit(run, CommitPoint::BeforePlanner, store).await?;
        }
        let view = self.view(run);
        let span = telemetry::planner_span(&run.spec.run_id, run.machine.sequence());
        let started = std::time::Instant::now();
        let proposed = async {
            let proposed = planner.propose(&view).await;
            telemetry::planner_round(started.elapsed(), proposed.is_ok());
            proposed
        };
        let raw = match proposed.instrument(span).await {
            Ok(raw) => raw,
            Err(_) => {
                return self
                    .stop(run, "failed", reasons::PLANNER_ERROR, store)
                    .await;
            }
        };
        let (decision, usage) = match protocol::parse::<B>(&raw) {
            Ok(d) => d,
            Err(_) => {
                return self
                    .stop(run, "failed", reasons::PROTOCOL_ERROR, store)
                    .await;
            }
        };
        run.controls.add_usage(usage);
        let (tool, arguments) = match decision {
            Decision::Final { mut answer } => {
                // The answer carries its schema version; the planner may leave it out.
                if answer.get("schema_version").is_none() {
                    answer["schema_version"] = json!(B::FINAL_ANSWER_SCHEMA_VERSION);
                }
                if self.validators.final_answer(&answer).is_err() {
                    return self
                        .stop(run, "failed", reasons::PROTOCOL_ERROR, store)
                        .await;
                }
                return match self.accept(run, &answer) {
                    Ok(provenance) => self
                        .end(run, "completed", None, Some(answer), provenance, store)
                        .await
                        .map(Some),
                    // One correction round: the planner sees why, as an observation.
                    Err(rejection) if run.controls.rejected_answers() == 0 => {
                        run.controls.reject_answer(rejection.message);
                        run.go(state("observing"), Some(&rejection.reason), self.now())?;
                        Ok(None)
                    }
                    Err(rejection) => {
                        self.stop(run, "needs_human", &rejection.reason, store)
                            .await
                    }
                };
            }
            Decision::NeedsHuman { .. } => {
                return self
                    .stop(run, "needs_human", reasons::PLANNER_NEEDS_HUMAN, store)
                    .await;
            }
            Decision::ToolCall { tool, arguments } => (tool, arguments),
        };
        if !run.controls.steps_left(&self.budgets) {
            return self
                .stop(run, "stopped", reasons::STEP_BUDGET_EXHAUSTED, store)
                .await;
        }

        let id = format!("{}:{}", run.spec.run_id, run.machine.sequence() + 1);
        let hashes = call_hashes(tool.name, &arguments);
        let span = telemetry::tool_span(tool.name, &id, &hashes.1, tool.risk.as_str());
        self.tool_step(run, tool, arguments, id, hashes, executor, store)
            .instrument(span)
            .await
    }

    /// One proposed tool call, from its checks to its normalized result: returns
    /// the outcome when the run ended.
    #[allow(clippy::too_many_arguments)]
    async fn tool_step<E: Executor, St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        tool: &'static ToolContract,
        arguments: Value,
        id: String,
        (arguments_hash, fingerprint): (String, String),
        executor: &E,
        store: &St,
    ) -> Result<Option<Outcome>, RuntimeError> {
        let now = self.now();
        let row = self.new_row(run, tool, &id, &arguments, arguments_hash, &fingerprint);
        run.record_pending(&row);
        run.go(state("tool_proposed"), None, now)?;

        let deny = |run: &mut Run<B::State>, row, status, class: &str, code: &str| {
            refuse_call(run, row, status, class, code, now)
        };
        if run.controls.propose(&fingerprint) >= self.budgets.repeat_limit {
            deny(
                run,
                row,
                CallStatus::Denied,
                "control",
                reasons::REPEATED_ACTION_FINGERPRINT,
            );
            return self
                .stop(run, "stopped", reasons::REPEATED_ACTION_FINGERPRINT, store)
                .await;
        }
        if self.validators.arguments(tool.name, &arguments).is_err() {
            deny(
                run,
                row,
                CallStatus::Failed,
                "contract",
                reasons::INVALID_ARGUMENTS,
            );
            return self
                .stop(run, "failed", reasons::INVALID_ARGUMENTS, store)
                .await;
        }
        self.ensure_principal(run);
        let decision = match &run.principal {
            Some(p) => self.authorization.authorize_as(p, tool, &arguments),
            None => AuthzDecision::unevaluable("the run's entities could not be built".into()),
        };
        let hidden = capability_filter::hidden_because(
            &run.spec,
            &run.stage,
            tool,
            &run.controls.succeeded_tools(),
            &self.health,
        )
        .is_some();
        if let AuthzDecision::Deny { reason, .. } = decision {
            // Denied only for want of an approval that could permit it: ask a person.
            let approvable = tool.approval.is_some()
                && tool.risk.is_write()
                && !hidden
                && run.principal.as_ref().is_some_and(|p| {
                    self.authorization
                        .authorize_with(p, tool, &arguments, Approval::Approved)
                        .is_allow()
                });
            if approvable {
                telemetry::authorization(tool.name, Some(reasons::APPROVAL_PENDING));
                return self.await_approval(run, tool, row, store).await;
            }
            telemetry::authorization(tool.name, Some(&reason));
            deny(run, row, CallStatus::Denied, "authorization", &reason);
            return self.stop(run, "needs_human", &reason, store).await;
        }
        telemetry::authorization(tool.name, hidden.then_some(reasons::TOOL_NOT_VISIBLE));
        if hidden {
            deny(
                run,
                row,
                CallStatus::Denied,
                "authorization",
                reasons::TOOL_NOT_VISIBLE,
            );
            return self
                .stop(run, "needs_human", reasons::TOOL_NOT_VISIBLE, store)
                .await;
        }
        self.execute_authorized(run, tool, row, arguments, id, None, executor, store)
            .await
    }

    /// An authorized call, from its commit to its normalized result: returns the
    /// outcome when the run ended. `approved` is the approved action's fingerprint.
    #[allow(clippy::too_many_arguments)]
    async fn execute_authorized<E: Executor, St: RunStore>(
        &self,
        run: &mut Run<B::State>,
        tool: &'static ToolContract,
        mut row: LedgerRow,
        arguments: Value,
        id: String,
        approved: Option<String>,
        executor: &E,
        store: &St,
    ) -> Result<Option<Outcome>, RuntimeError> {
        let now = self.now();
        let deny = |run: &mut Run<B::State>, row, status, class: &str, code: &str| {
            refuse_call(run, row, status, class, code, now)
        };
        // A recovered call proven not to have run is already in `tool_running`.
        if run.machine.state().as_str() != "tool_running" {
            row.status = CallStatus::Authorized;
            run.record_pending(&row);
            run.go(state("tool_authorized"), None, now)?;
        }
        row.status = CallStatus::Running;
        row.attempt_count = 1;
        run.record_pending(&row);
        if run.machine.state().as_str() != "tool_running" {
            run.go(state("tool_running"), None, now)?;
        }
        let read_only = tool.risk == crate::contract::Risk::ReadOnly;
        let batch = self.batch(run, CommitPoint::BeforeTool { read_only });
        let call = self.tool_call(run, tool, &id, arguments.clone(), approved);
        let execute = async {
            let started = std::time::Instant::now();
            let executed = execution::execute(executor, call.clone(), &self.budgets).await;
            (executed, started.elapsed())
        };
        let (executed, took) = if read_only && store.commits_remotely() {
            // A read-only call may run twice: recovery discards an interrupted one
            // and plans it again, which is why its commit need not be flushed either.
            // So it runs while its commit is under way instead of after it (one round
            // trip less per call). The run goes on only when both are done. A failed
            // commit (a lost lease, say) stops the call where it is and discards it.
            let call = async { Ok::<_, crate::store::StoreError>(execute.await) };
            tokio::try_join!(store.commit(batch), call)?.1
        } else {
            store.commit(batch).await?;
            execute.await
        };
        run.spec_recorded = true;
        row.attempt_count = executed.attempts;
        let now = self.now();
        let class = match &executed.result {
            Ok(_) => "ok",
            Err(e) => e.class(),
        };
        telemetry::tool_call(tool.name, class, executed.attempts, took);
        match executed.result {
            Ok(result) => match normalize(&self.validators, tool, &id, &arguments, result) {
                Ok(obs) => {
                    self.succeed(run, row, obs, now)?;
                    Ok(None)
                }
                Err(_) => {
                    deny(
                        run,
                        row,
                        CallStatus::Failed,
                        "contract",
                        reasons::CONTRACT_VIOLATION,
                    );
                    self.stop(run, "failed", reasons::CONTRACT_VIOLATION, store)
                        .await
                }
            },
            Err(ExecError::UnknownEffect(_)) if tool.risk.is_write() => {
                let status = match tool.effects.and_then(|e| B::tool(e.confirm_with)) {
                    Some(confirm) => executor
                        .confirm_effect(&call, confirm)
                        .await
                        .unwrap_or(EffectStatus::Unknown),
                    None => EffectStatus::Unknown,
                };
                run.controls.step_without_result();
                self.settle_unknown(run, tool, row, status, store).await
            }
            Err(e) => {
                let code = e.code().to_string();
                deny(run, row, CallStatus::Failed, e.class(), &code);
                let (to, reason) = match &e {
                    ExecError::Authorization { .. } => ("needs_human", code.as_str()),
                    ExecError::Transient { .. } if code == "TOOL_TIMEOUT" => {
                        ("failed", reasons::TOOL_TIMEOUT)
                    }
                    ExecError::Contract { .. } => ("failed", reasons::CONTRACT_VIOLATION),
                    ExecError::Protocol(_) => ("failed", reasons::PROTOCOL_ERROR),
                    _ => ("failed", code.as_str()),
                };
                self.stop(run, to, reason, store).await
            }
        }
    }
}
