//! The `caseops-compile` command line.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use caseops_compile::build::{self, BuildError, Builder};
use caseops_compile::{Code, check_root, explain, render};
use clap::{Parser, Subcommand, ValueEnum};

/// Checks and compiles CaseOps contracts (`contracts/`) and policies (`policies/`).
///
/// Exit status: 0 when clean, 1 when any error is found (or any warning with
/// `--deny-warnings`), 2 on a usage or I/O failure.
#[derive(Parser)]
#[command(name = "caseops-compile", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check every contract and report all problems at once.
    Check {
        /// Project root holding `contracts/` and `policies/` (default: the nearest
        /// folder, from here upwards, that has `contracts/agent.yaml`).
        #[arg(long, env = "CASEOPS_ROOT")]
        root: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// Treat warnings as errors (exit 1 when any warning is found).
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Compile the contracts into the generated crate (`generated/` by default).
    ///
    /// Refuses to write anything when `check` finds an error. The output is the same
    /// byte for byte on every run.
    Build {
        /// Project root holding `contracts/` and `policies/` (default: the nearest
        /// folder, from here upwards, that has `contracts/agent.yaml`).
        #[arg(long, env = "CASEOPS_ROOT")]
        root: Option<PathBuf>,
        /// Output directory (default `<root>/generated`).
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// Package name of the generated crate (default: the one the output
        /// directory's crate has, else `caseops-generated`).
        #[arg(long)]
        crate_name: Option<String>,
        /// Path of `caseops-runtime` relative to the output directory (default: the
        /// one the output directory's crate has, else `../runtime`).
        #[arg(long)]
        runtime_path: Option<String>,
    },
    /// Evaluate the authorization scenarios in `policies/tests/` with the Cedar authorizer.
    ///
    /// Prints a pass/fail line per scenario and warns about policies no scenario
    /// exercised; exits 1 when any scenario fails or the project has errors.
    Test {
        /// Project root holding `contracts/` and `policies/` (default: the nearest
        /// folder, from here upwards, that has `contracts/agent.yaml`).
        #[arg(long, env = "CASEOPS_ROOT")]
        root: Option<PathBuf>,
    },
    /// Create an agent project: a run contract, the state machine, one tool, Cedar
    /// policies with scenarios, its compiled bundle and a host crate on
    /// `caseops-host` — ready for `check`, `test`, `build` and `cargo test`.
    New {
        /// The folder to create (it must not exist, or be empty).
        dir: PathBuf,
        /// Package and binary name (default: the folder's name).
        #[arg(long)]
        name: Option<String>,
        /// The CaseOps repository the new crates depend on by path (default: the
        /// checkout this compiler was built from).
        #[arg(long, env = "CASEOPS_SOURCE")]
        caseops: Option<PathBuf>,
    },
    /// Print the long explanation of a diagnostic code, e.g. `E0107`.
    Explain {
        /// The code, e.g. `E0107`.
        #[arg(required_unless_present = "list")]
        code: Option<String>,
        /// List every code with its severity and title instead.
        #[arg(long, conflicts_with = "code")]
        list: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// rustc-like text, coloured on a terminal.
    Human,
    /// An array of diagnostics with 1-based positions.
    Json,
    /// SARIF 2.1.0 for code-scanning uploaders.
    Sarif,
}

/// The project root: `--root` as given, else the nearest folder from the current
/// one upwards holding `contracts/agent.yaml` (as cargo finds `Cargo.toml`), else
/// the current folder (whose diagnostics then say what is missing).
fn project_root(given: Option<PathBuf>) -> PathBuf {
    if let Some(root) = given {
        return root;
    }
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    here.ancestors()
        .find(|dir| dir.join("contracts/agent.yaml").is_file())
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            root,
            format,
            deny_warnings,
        } => {
            let root = project_root(root);
            let mut checked = match check_root(&root) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let builder = Builder::new().root(&root).settings_of_existing_output();
            let drift = build::drift_diagnostics(&mut checked, &builder);
            checked.diagnostics.extend(drift);
            let out = match format {
                Format::Human => render::human(
                    &checked.sources,
                    &checked.diagnostics,
                    std::io::stdout().is_terminal(),
                ),
                Format::Json => render::json(&checked.sources, &checked.diagnostics),
                Format::Sarif => render::sarif(&checked.sources, &checked.diagnostics),
            };
            if std::io::stdout().write_all(out.as_bytes()).is_err() {
                return ExitCode::from(2);
            }
            if checked.has_errors() || (deny_warnings && checked.has_warnings()) {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Command::Test { root } => test(&project_root(root)),
        Command::Build {
            root,
            out_dir,
            crate_name,
            runtime_path,
        } => {
            let root = project_root(root);
            let mut builder = Builder::new().root(&root);
            if let Some(dir) = out_dir {
                builder = builder.out_dir(dir);
            }
            builder = builder.settings_of_existing_output();
            if let Some(name) = crate_name {
                builder = builder.crate_name(name);
            }
            if let Some(path) = runtime_path {
                builder = builder.runtime_path(path);
            }
            match builder.run() {
                Ok(g) => {
                    println!(
                        "wrote {} files to `{}` (bundle {})",
                        g.files.len(),
                        builder.output_dir().display(),
                        &g.digest[..16]
                    );
                    ExitCode::SUCCESS
                }
                Err(BuildError::Invalid(report)) => {
                    print!("{report}");
                    eprintln!("error: nothing written: the contracts have errors");
                    ExitCode::from(1)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::New { dir, name, caseops } => {
            let project = caseops_compile::new_project::NewProject { dir, name, caseops };
            match project.create() {
                Ok(created) => {
                    println!(
                        "created agent `{}` in `{}` ({} files)",
                        created.agent,
                        project.dir.display(),
                        created.files.len()
                    );
                    println!("next: cd {}", project.dir.display());
                    println!("      caseops-compile check && caseops-compile test");
                    println!(
                        "      cargo test             # a real run of `{}` through its API and MCP",
                        created.name
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Explain { list: true, .. } => {
            print!("{}", caseops_compile::code_list());
            ExitCode::SUCCESS
        }
        Command::Explain { code, .. } => {
            let code = code.unwrap_or_default();
            match Code::parse(&code) {
                Some(c) => {
                    print!("{}", explain(c));
                    ExitCode::SUCCESS
                }
                None => {
                    eprintln!(
                        "error: `{code}` is not a caseops-compile diagnostic code (`caseops-compile explain --list` lists them)"
                    );
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn test(root: &std::path::Path) -> ExitCode {
    let checked = match check_root(root) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let color = std::io::stdout().is_terminal();
    let Some(report) = caseops_compile::run_scenarios(&checked) else {
        print!(
            "{}",
            render::human(&checked.sources, &checked.diagnostics, color)
        );
        println!("scenarios not run: fix the errors above first");
        return ExitCode::from(1);
    };
    for (file, name, passed, detail) in &report.results {
        if *passed {
            println!("ok    {file}: {name}");
        } else {
            println!("FAIL  {file}: {name}: {detail}");
        }
    }
    let mut diagnostics = checked.diagnostics.clone();
    diagnostics.extend(report.diagnostics.iter().cloned());
    if !diagnostics.is_empty() {
        print!("{}", render::human(&checked.sources, &diagnostics, color));
    }
    let failed = report.failed();
    println!("{} passed, {failed} failed", report.results.len() - failed);
    if failed > 0
        || diagnostics
            .iter()
            .any(|d| d.severity == caseops_compile::Severity::Error)
    {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
