//! The run state machine (`contracts/state-machine.yaml`) and the invariants the
//! compiler proves about it by searching the transition graph.

use std::collections::{BTreeMap, VecDeque};

use crate::codes::Code;
use crate::reader::{Reader, Sp, is_snake_case};
use crate::source::FileId;
use crate::yaml::Node;

/// Non-terminal states the runtime drives, in the order it enters them.
pub const RUNTIME_STATES: &[&str] = &[
    "created",
    "planning",
    "tool_proposed",
    "tool_authorized",
    "tool_running",
    "observing",
];

/// Terminal states the runtime ends runs in.
pub const RUNTIME_TERMINALS: &[&str] = &["completed", "needs_human", "stopped", "failed"];

/// Every transition the runtime performs; each must be legal in the table.
///
/// INVARIANT: kept in step with the runtime's driver; the runtime's tests check that
/// each transition it applies is in the generated table, which is built from this file.
pub const RUNTIME_TRANSITIONS: &[(&str, &str)] = &[
    ("created", "planning"),
    ("created", "failed"),
    ("planning", "tool_proposed"),
    ("planning", "observing"),
    ("planning", "completed"),
    ("planning", "needs_human"),
    ("planning", "stopped"),
    ("planning", "failed"),
    ("tool_proposed", "tool_authorized"),
    ("tool_proposed", "stopped"),
    ("tool_proposed", "needs_human"),
    ("tool_proposed", "failed"),
    ("tool_proposed", "planning"),
    ("tool_authorized", "tool_running"),
    ("tool_authorized", "stopped"),
    ("tool_authorized", "failed"),
    ("tool_authorized", "planning"),
    ("tool_running", "observing"),
    ("tool_running", "needs_human"),
    ("tool_running", "stopped"),
    ("tool_running", "failed"),
    ("tool_running", "planning"),
    ("observing", "planning"),
    ("observing", "stopped"),
    ("observing", "failed"),
];

/// The state a run waits in while a person decides on a call that needs approval.
pub const APPROVAL_STATE: &str = "waiting_approval";

/// What the runtime does around an approval, needed only when a tool declares
/// `approval`: the proposed call waits; once decided it is authorized again (approved),
/// or the run stops (rejected, expired) or goes to a human (the approved call is no
/// longer permitted).
pub const APPROVAL_TRANSITIONS: &[(&str, &str)] = &[
    ("tool_proposed", APPROVAL_STATE),
    (APPROVAL_STATE, "tool_authorized"),
    (APPROVAL_STATE, "stopped"),
    (APPROVAL_STATE, "needs_human"),
    (APPROVAL_STATE, "failed"),
];

#[derive(Debug, Clone, PartialEq)]
pub enum InvariantKind {
    /// Every path from `from` to `to` passes `through`.
    MustPass {
        from: Sp<String>,
        to: Sp<String>,
        through: Sp<String>,
    },
    /// No transition leaves a terminal state.
    TerminalsFinal,
    /// Every state reaches a terminal state.
    AllReachTerminal,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Invariant {
    pub name: Sp<String>,
    pub kind: InvariantKind,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StateMachine {
    pub file: FileId,
    pub initial: Sp<String>,
    pub states: Vec<Sp<String>>,
    pub terminals: Vec<Sp<String>>,
    /// `(from, to)` in file order.
    pub transitions: Vec<(Sp<String>, Sp<String>)>,
    /// Span of the `transitions` key, for findings about the table as a whole.
    pub transitions_span: crate::yaml::Span,
    pub invariants: Vec<Invariant>,
}

impl StateMachine {
    fn is_declared(&self, s: &str) -> bool {
        self.states
            .iter()
            .chain(&self.terminals)
            .any(|x| x.value == s)
    }

    fn is_terminal(&self, s: &str) -> bool {
        self.terminals.iter().any(|x| x.value == s)
    }

    fn successors(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (from, to) in &self.transitions {
            out.entry(from.value.as_str()).or_default().push(&to.value);
        }
        out
    }
}

pub(crate) const KEYS: &[&str] = &["initial", "states", "terminal", "transitions", "invariants"];
pub(crate) const INVARIANT_KEYS: &[&str] = &["name", "kind", "from", "to", "through"];

pub fn read_state_machine(r: &mut Reader, root: &Node) -> Option<StateMachine> {
    let map = r.mapping(root, "state machine", Some(KEYS))?;
    let mut missing = false;
    let mut require = |r: &mut Reader, key: &str| {
        let n = map.get(key);
        if n.is_none() {
            let d = r
                .error(
                    Code::MissingKey,
                    map.span.start..map.span.start,
                    format!("the state machine has no `{key}`"),
                )
                .label(format!("`{key}` missing"))
                .help(match key {
                    "initial" => "add `initial: created`",
                    "states" => "add `states:` listing the non-terminal states",
                    "terminal" => "add `terminal:` listing the terminal states",
                    _ => "add `transitions:` mapping each state to the states it may move to",
                });
            r.report(d);
            missing = true;
        }
        n
    };
    let initial_node = require(r, "initial");
    let states_node = require(r, "states");
    let terminal_node = require(r, "terminal");
    let transitions_node = require(r, "transitions");

    let initial = initial_node.and_then(|n| r.string(n, "initial"));
    let states = states_node
        .map(|n| r.strings(n, "states"))
        .unwrap_or_default();
    let terminals = terminal_node
        .map(|n| r.strings(n, "terminal"))
        .unwrap_or_default();
    let all: Vec<Sp<String>> = states.iter().chain(&terminals).cloned().collect();
    r.unique(&all, "states");
    for s in &all {
        if !is_snake_case(&s.value) {
            let d = r
                .error(
                    Code::InvalidIdentifier,
                    s.span.clone(),
                    format!("state `{}` is not snake_case", s.value),
                )
                .label("invalid state name")
                .help("use lowercase letters, digits and `_`");
            r.report(d);
        }
    }

    let mut transitions = Vec::new();
    if let Some(node) = transitions_node
        && let Some(tmap) = r.mapping(node, "transitions", None)
    {
        for (from, key, targets) in tmap.entries() {
            let from = Sp::new(from.to_string(), key.span.clone());
            let tos = if matches!(targets.kind, crate::yaml::NodeKind::Null) {
                Vec::new()
            } else {
                r.strings(targets, &format!("transitions.{}", from.value))
            };
            r.unique(&tos, &format!("transitions.{}", from.value));
            for to in tos {
                transitions.push((from.clone(), to));
            }
        }
    }

    let invariants = map
        .get("invariants")
        .map(|n| read_invariants(r, n))
        .unwrap_or_default();

    if missing {
        return None;
    }
    Some(StateMachine {
        file: r.file,
        initial: initial?,
        states,
        terminals,
        transitions,
        transitions_span: map
            .key_node("transitions")
            .map(|k| k.span.clone())
            .unwrap_or(0..0),
        invariants,
    })
}

fn read_invariants(r: &mut Reader, node: &Node) -> Vec<Invariant> {
    let Some(items) = node.as_seq() else {
        r.string(node, "invariants"); // reports the type error
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items {
        let Some(map) = r.mapping(item, "invariant", Some(INVARIANT_KEYS)) else {
            continue;
        };
        let name = match map.get("name") {
            Some(n) => r.string(n, "invariant.name"),
            None => Some(Sp::new("unnamed".to_string(), item.span.clone())),
        };
        let Some(kind_node) = map.get("kind") else {
            let d = r
                .error(
                    Code::MissingKey,
                    item.span.clone(),
                    "invariant has no `kind`",
                )
                .label("`kind` missing")
                .help("use `kind: must_pass`, `terminals_final` or `all_reach_terminal`");
            r.report(d);
            continue;
        };
        let Some(kind) = r.one_of(
            kind_node,
            "invariant.kind",
            &["must_pass", "terminals_final", "all_reach_terminal"],
        ) else {
            continue;
        };
        let kind = match kind.value.as_str() {
            "must_pass" => {
                let mut get = |key: &str| match map.get(key) {
                    Some(n) => r.string(n, &format!("invariant.{key}")),
                    None => {
                        let d = r
                            .error(
                                Code::MissingKey,
                                kind.span.clone(),
                                format!("`must_pass` invariant has no `{key}`"),
                            )
                            .label(format!("`{key}` missing"))
                            .help("a `must_pass` invariant names `from`, `to` and `through`");
                        r.report(d);
                        None
                    }
                };
                let (from, to, through) = (get("from"), get("to"), get("through"));
                let (Some(from), Some(to), Some(through)) = (from, to, through) else {
                    continue;
                };
                InvariantKind::MustPass { from, to, through }
            }
            "terminals_final" => InvariantKind::TerminalsFinal,
            _ => InvariantKind::AllReachTerminal,
        };
        if let Some(name) = name {
            out.push(Invariant { name, kind });
        }
    }
    out
}

/// Checks the table against itself, the runtime's needs and the declared invariants.
pub fn check(r: &mut Reader, sm: &StateMachine) {
    let file = r.file;
    let unknown = |r: &mut Reader, s: &Sp<String>, sm: &StateMachine| {
        if !sm.is_declared(&s.value) {
            let names: Vec<&str> = sm
                .states
                .iter()
                .chain(&sm.terminals)
                .map(|x| x.value.as_str())
                .collect();
            let mut d = r
                .error(
                    Code::UnknownState,
                    s.span.clone(),
                    format!("unknown state `{}`", s.value),
                )
                .label("not declared under `states` or `terminal`");
            d = match crate::diagnostic::closest(&s.value, names.iter().copied()) {
                Some(c) => d.help(format!("did you mean `{c}`?")),
                None => d.help("declare it under `states` or `terminal`"),
            };
            r.report(d);
            return false;
        }
        true
    };

    unknown(r, &sm.initial, sm);
    if sm.is_terminal(&sm.initial.value) {
        let d = r
            .error(
                Code::TerminalHasTransition,
                sm.initial.span.clone(),
                format!("initial state `{}` is terminal", sm.initial.value),
            )
            .label("a run would end before it starts")
            .help("start in a non-terminal state such as `created`");
        r.report(d);
    }
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (from, to) in &sm.transitions {
        let ok_from = unknown(r, from, sm);
        let ok_to = unknown(r, to, sm);
        if ok_from && ok_to && sm.is_terminal(&from.value) {
            let d = r
                .error(
                    Code::TerminalHasTransition,
                    to.span.clone(),
                    format!(
                        "transition `{} → {}` leaves a terminal state",
                        from.value, to.value
                    ),
                )
                .label("transition out of a terminal state")
                .secondary(file, from.span.clone(), "terminal state")
                .help(format!(
                    "remove the transitions of `{}`; a terminal run is final",
                    from.value
                ));
            r.report(d);
        }
        seen.push((&from.value, &to.value));
    }

    for (i, want) in RUNTIME_STATES.iter().chain(RUNTIME_TERMINALS).enumerate() {
        let terminal = i >= RUNTIME_STATES.len();
        let declared_as = if sm.terminals.iter().any(|s| s.value == *want) {
            Some(true)
        } else if sm.states.iter().any(|s| s.value == *want) {
            Some(false)
        } else {
            None
        };
        if declared_as != Some(terminal) {
            let (key, other) = if terminal {
                ("terminal", "states")
            } else {
                ("states", "terminal")
            };
            let msg = match declared_as {
                None => format!("the runtime needs state `{want}`, which is not declared"),
                Some(_) => format!(
                    "`{want}` is declared under `{other}` but the runtime treats it as {}",
                    if terminal { "terminal" } else { "non-terminal" }
                ),
            };
            let d = r
                .error(Code::MissingState, sm.initial.span.clone(), msg)
                .label("state machine declared here")
                .help(format!("declare `{want}` under `{key}`"));
            r.report(d);
        }
    }

    for (from, to) in RUNTIME_TRANSITIONS {
        if sm.is_declared(from) && sm.is_declared(to) && !seen.contains(&(*from, *to)) {
            let span = sm
                .transitions
                .iter()
                .find(|(f, _)| f.value == *from)
                .map(|(f, _)| f.span.clone())
                .unwrap_or(sm.transitions_span.clone());
            let d = r
                .error(
                    Code::RuntimeTransitionMissing,
                    span,
                    format!("the runtime performs `{from} → {to}`, which the table does not allow"),
                )
                .label(format!("`{from}` has no transition to `{to}`"))
                .help(format!("add `{to}` to the transitions of `{from}`"));
            r.report(d);
        }
    }

    prove(r, sm);
}

/// When some tool needs approval (`gated` names them), the table must have the
/// approval state as a non-terminal state with the runtime's approval transitions, and
/// `waiting_approval` must be the only way from a proposed call to its authorization
/// other than the direct one the policies refuse such a call (E0410 proves that half).
pub fn check_approval(r: &mut Reader, sm: &StateMachine, gated: &[&str]) {
    let Some(first) = gated.first() else { return };
    let who = if gated.len() == 1 {
        format!("`{first}` needs approval")
    } else {
        format!("{} tools need approval (`{first}`, …)", gated.len())
    };
    if !sm.states.iter().any(|s| s.value == APPROVAL_STATE) {
        let d = r
            .error(
                Code::MissingState,
                sm.initial.span.clone(),
                format!(
                    "{who}, so the runtime needs state `{APPROVAL_STATE}`, which is not declared"
                ),
            )
            .label("state machine declared here")
            .help(format!(
                "declare `{APPROVAL_STATE}` under `states` with its transitions"
            ));
        r.report(d);
        return;
    }
    let seen: Vec<(&str, &str)> = sm
        .transitions
        .iter()
        .map(|(f, t)| (f.value.as_str(), t.value.as_str()))
        .collect();
    for (from, to) in APPROVAL_TRANSITIONS {
        if sm.is_declared(from) && sm.is_declared(to) && !seen.contains(&(*from, *to)) {
            let span = sm
                .transitions
                .iter()
                .find(|(f, _)| f.value == *from)
                .map(|(f, _)| f.span.clone())
                .unwrap_or(sm.transitions_span.clone());
            let d = r
                .error(
                    Code::RuntimeTransitionMissing,
                    span,
                    format!("{who}, and the runtime then performs `{from} → {to}`, which the table does not allow"),
                )
                .label(format!("`{from}` has no transition to `{to}`"))
                .help(format!("add `{to}` to the transitions of `{from}`"));
            r.report(d);
        }
    }
}

fn prove(r: &mut Reader, sm: &StateMachine) {
    let succ = sm.successors();
    let file = r.file;

    // Every state reaches a terminal: search backwards from the terminals.
    let mut reaches: Vec<&str> = sm.terminals.iter().map(|t| t.value.as_str()).collect();
    let mut changed = true;
    while changed {
        changed = false;
        for (from, to) in &sm.transitions {
            if reaches.contains(&to.value.as_str()) && !reaches.contains(&from.value.as_str()) {
                reaches.push(&from.value);
                changed = true;
            }
        }
    }
    for s in &sm.states {
        if !reaches.contains(&s.value.as_str()) {
            let d = r
                .error(
                    Code::NoPathToTerminal,
                    s.span.clone(),
                    format!("state `{}` cannot reach a terminal state", s.value),
                )
                .label("a run here could never end")
                .help(format!(
                    "add a transition from `{}` towards a terminal state such as `failed`",
                    s.value
                ));
            r.report(d);
        }
    }

    // Every state is reachable from the initial state (a warning: dead weight).
    let reachable = bfs_path(&succ, &sm.initial.value, None, None);
    for s in sm.states.iter().chain(&sm.terminals) {
        if s.value != sm.initial.value && !reachable.contains_key(s.value.as_str()) {
            let d = r
                .error(
                    Code::UnreachableState,
                    s.span.clone(),
                    format!(
                        "state `{}` is unreachable from `{}`",
                        s.value, sm.initial.value
                    ),
                )
                .label("no path leads here")
                .help("add a transition into it or remove it");
            r.report(d);
        }
    }

    for inv in &sm.invariants {
        if let InvariantKind::MustPass { from, to, through } = &inv.kind {
            if ![from, to, through].iter().all(|s| sm.is_declared(&s.value)) {
                for s in [from, to, through] {
                    if !sm.is_declared(&s.value) {
                        let d = r
                            .error(
                                Code::UnknownState,
                                s.span.clone(),
                                format!(
                                    "invariant `{}` names unknown state `{}`",
                                    inv.name.value, s.value
                                ),
                            )
                            .label("not a declared state")
                            .help("name a state declared under `states` or `terminal`");
                        r.report(d);
                    }
                }
                continue;
            }
            let parents = bfs_path(&succ, &from.value, Some(&through.value), Some(&to.value));
            if let Some(path) = path_to(&parents, &from.value, &to.value) {
                let first_hop = &path[1];
                let span = sm
                    .transitions
                    .iter()
                    .find(|(f, t)| f.value == path[0] && t.value == *first_hop)
                    .map(|(_, t)| t.span.clone())
                    .unwrap_or(inv.name.span.clone());
                let d = r
                    .error(
                        Code::InvariantViolated,
                        inv.name.span.clone(),
                        format!(
                            "invariant `{}` does not hold: `{}` reaches `{}` without `{}`: {}",
                            inv.name.value,
                            from.value,
                            to.value,
                            through.value,
                            path.join(" → ")
                        ),
                    )
                    .label("violated invariant")
                    .secondary(file, span, "the path starts with this transition")
                    .help(format!(
                        "route every path from `{}` to `{}` through `{}`",
                        from.value, to.value, through.value
                    ));
                r.report(d);
            }
        }
    }
}

/// Breadth-first search from `start`, never entering `avoid`, stopping at `goal`.
/// Returns each reached state with its predecessor (the start maps to itself).
fn bfs_path<'a>(
    succ: &BTreeMap<&'a str, Vec<&'a str>>,
    start: &'a str,
    avoid: Option<&str>,
    goal: Option<&str>,
) -> BTreeMap<&'a str, &'a str> {
    let mut parent = BTreeMap::new();
    parent.insert(start, start);
    let mut queue = VecDeque::from([start]);
    while let Some(s) = queue.pop_front() {
        if Some(s) == goal && s != start {
            break;
        }
        for &next in succ.get(s).map(Vec::as_slice).unwrap_or(&[]) {
            if Some(next) == avoid || parent.contains_key(next) {
                continue;
            }
            parent.insert(next, s);
            queue.push_back(next);
        }
    }
    parent
}

fn path_to(parents: &BTreeMap<&str, &str>, from: &str, to: &str) -> Option<Vec<String>> {
    if from == to || !parents.contains_key(to) {
        return None;
    }
    let mut path = vec![to.to_string()];
    let mut cur = to;
    while cur != from {
        cur = parents[cur];
        path.push(cur.to_string());
    }
    path.reverse();
    Some(path)
}
