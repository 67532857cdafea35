//! `caseops-compile`: checks CaseOps contracts (`contracts/`) and policies (`policies/`)
//! the way `rustc` checks code, and compiles them into the generated crate.
//!
//! ```no_run
//! let checked = caseops_compile::check_root(std::path::Path::new(".")).unwrap();
//! for d in &checked.diagnostics {
//!     eprintln!("{} {}", d.code.as_str(), d.message);
//! }
//! assert!(!checked.has_errors());
//! ```

pub mod agent;
pub mod build;
pub mod cedar_schema;
pub mod codes;
pub mod diagnostic;
pub mod fields;
pub mod new_project;
pub mod policies;
pub mod project;
pub mod reachability;
pub mod reader;
pub mod render;
pub mod scenarios;
pub mod source;
pub mod state_machine;
pub mod tool;
pub mod yaml;

use std::path::Path;

pub use codes::Code;
pub use diagnostic::{Diagnostic, Severity};
pub use project::Project;
pub use source::{LoadError, Sources};

/// The result of checking a project: its files, every diagnostic (sorted) and the
/// contracts that could be read.
pub struct Checked {
    pub sources: Sources,
    pub diagnostics: Vec<Diagnostic>,
    pub project: Project,
    /// The validated policies; `None` when contracts or policies have errors.
    pub policies: Option<policies::Policies>,
    /// The authorization scenarios of `policies/tests/`, read but not yet run.
    pub scenarios: Vec<scenarios::Scenario>,
}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("diagnostics", &self.diagnostics)
            .field("project", &self.project)
            .field(
                "policies",
                &self
                    .policies
                    .as_ref()
                    .map(|p| p.origin.keys().collect::<Vec<_>>()),
            )
            .finish()
    }
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    pub fn has_warnings(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Warning)
    }
}

/// Checks an in-memory set of project files.
pub fn check_sources(sources: Sources) -> Checked {
    let mut diags = diagnostic::Diagnostics::default();
    let project = project::check_contracts(&sources, &mut diags);
    let policies = policies::check_policies(&sources, &project, &mut diags);
    if let Some(p) = &policies {
        reachability::check(&project, p, &mut diags);
    }
    let scenarios = scenarios::read_scenarios(&sources, &project, &mut diags);
    Checked {
        sources,
        diagnostics: diags.into_sorted(),
        project,
        policies,
        scenarios,
    }
}

/// Reads the project below `root` and checks it.
pub fn check_root(root: &Path) -> Result<Checked, LoadError> {
    Ok(check_sources(source::load(root)?))
}

/// Runs the authorization scenarios of a checked project. `None` when the project has
/// errors (the scenarios cannot be trusted to run against broken policies).
pub fn run_scenarios(checked: &Checked) -> Option<scenarios::TestReport> {
    if checked.has_errors() {
        return None;
    }
    let policies = checked.policies.as_ref()?;
    Some(scenarios::run(
        &checked.sources,
        &checked.project,
        policies,
        &checked.scenarios,
    ))
}

/// Every key of the contract language, by the place it is written (for the
/// reference in `docs/contract-language.md`, which a test holds to this list).
pub fn language_keys() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("contracts/agent.yaml", agent::AGENT_KEYS),
        ("resource", agent::RESOURCE_KEYS),
        ("resource.id", agent::RESOURCE_ID_KEYS),
        ("budgets", agent::BUDGET_KEYS),
        ("final_answer", agent::FINAL_ANSWER_KEYS),
        ("contracts/state-machine.yaml", state_machine::KEYS),
        ("invariants", state_machine::INVARIANT_KEYS),
        ("contracts/tools/*.yaml", tool::TOOL_KEYS),
        ("backoff", tool::BACKOFF_KEYS),
        ("effects", tool::EFFECTS_KEYS),
        ("output and final-answer fields", fields::LONG_KEYS),
        ("input fields", fields::INPUT_LONG_KEYS),
        ("policies/tests/*.yaml", scenarios::FILE_KEYS),
        ("scenarios", scenarios::SCENARIO_KEYS),
        ("defaults", scenarios::PRINCIPAL_KEYS),
        ("scenario context", scenarios::CONTEXT_KEYS),
    ]
}

/// Every code, one per line in code order: code, severity, title.
pub fn code_list() -> String {
    let mut codes = Code::ALL.to_vec();
    codes.sort_by_key(|c| c.as_str());
    codes
        .iter()
        .map(|c| {
            format!(
                "{}  {:<7}  {}\n",
                c.as_str(),
                c.severity().as_str(),
                c.title()
            )
        })
        .collect()
}

/// The long explanation of a code, with a failing and a fixed example.
pub fn explain(code: Code) -> String {
    let (bad, good) = code.examples();
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        "{} {}: {}\n\n{}\n\nFails:\n\n{}\nFixed:\n\n{}",
        code.severity().as_str(),
        code.as_str(),
        code.title(),
        code.explanation(),
        indent(bad),
        indent(good)
    )
}
