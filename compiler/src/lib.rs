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
pub mod codes;
pub mod diagnostic;
pub mod fields;
pub mod project;
pub mod reader;
pub mod render;
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
#[derive(Debug)]
pub struct Checked {
    pub sources: Sources,
    pub diagnostics: Vec<Diagnostic>,
    pub project: Project,
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
    Checked {
        sources,
        diagnostics: diags.into_sorted(),
        project,
    }
}

/// Reads the project below `root` and checks it.
pub fn check_root(root: &Path) -> Result<Checked, LoadError> {
    Ok(check_sources(source::load(root)?))
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
