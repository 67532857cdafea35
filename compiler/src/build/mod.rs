//! `caseops-compile build`: the generated crate, byte for byte the same on every run.
//!
//! A host crate can compile its contracts from `build.rs`, in the style of `prost-build`:
//!
//! ```
//! # let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
//! # let out = std::env::temp_dir().join(format!("caseops-doctest-{}", std::process::id()));
//! // In build.rs: `root` holds `contracts/` and `policies/`.
//! let generated = caseops_compile::build::Builder::new()
//!     .root(&root)
//!     .out_dir(&out)
//!     .crate_name("my-bundle")
//!     .run()
//!     .expect("contracts compile");
//! assert!(out.join("src/tools.rs").is_file());
//! assert_eq!(generated.digest.len(), 64);
//! # std::fs::remove_dir_all(&out).unwrap();
//! ```

pub mod docs;
pub mod json_schema;
pub mod listings;
pub mod rust;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::source::{LoadError, Sources};
use crate::{Checked, check_root, render};

/// Bumped whenever the generator's output format changes, so the bundle digest (and
/// with it the drift check) changes too.
pub const GENERATOR_FORMAT: &str = "caseops-generated/1";

/// Why a build could not produce the crate.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("the contracts have errors; `caseops-compile check` shows them:\n{0}")]
    Invalid(String),
    #[error("generating `{path}` failed: {message}")]
    Generate { path: String, message: String },
    #[error("cannot write `{}`: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One generated file, its path relative to the output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub path: String,
    pub bytes: Vec<u8>,
}

/// Everything a build produces, in memory.
#[derive(Debug)]
pub struct Generated {
    pub files: Vec<Artifact>,
    pub digest: String,
}

/// Configures and runs a build (for the CLI and for `build.rs` of host crates).
#[derive(Debug, Clone)]
pub struct Builder {
    root: PathBuf,
    out_dir: Option<PathBuf>,
    crate_name: String,
    runtime_path: String,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    pub fn new() -> Self {
        Self {
            root: PathBuf::from("."),
            out_dir: None,
            crate_name: "caseops-generated".into(),
            runtime_path: "../runtime".into(),
        }
    }

    /// The project root holding `contracts/` and `policies/` (default `.`).
    pub fn root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = root.into();
        self
    }

    /// Where the crate is written (default `<root>/generated`).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// The generated crate's package name (default `caseops-generated`).
    pub fn crate_name(mut self, name: impl Into<String>) -> Self {
        self.crate_name = name.into();
        self
    }

    /// Path of `caseops-runtime` relative to the output directory (default `../runtime`).
    pub fn runtime_path(mut self, path: impl Into<String>) -> Self {
        self.runtime_path = path.into();
        self
    }

    /// Keeps the package name and runtime path of the crate already in the output
    /// directory (as the last `build` wrote them), so that `check` compares with
    /// what `build` would write there and a bare `build` does not rename it.
    pub fn settings_of_existing_output(mut self) -> Self {
        let Ok(text) = std::fs::read_to_string(self.output_dir().join("Cargo.toml")) else {
            return self;
        };
        let quoted = |line: &str| line.split('"').nth(1).map(str::to_string);
        for line in text.lines() {
            if line.starts_with("name = ") {
                if let Some(name) = quoted(line) {
                    self.crate_name = name;
                }
            } else if line.starts_with("caseops-runtime = ")
                && let Some(path) = line.split("path = ").nth(1).and_then(quoted)
            {
                self.runtime_path = path;
            }
        }
        self
    }

    pub fn output_dir(&self) -> PathBuf {
        self.out_dir
            .clone()
            .unwrap_or_else(|| self.root.join("generated"))
    }

    /// Checks the project and produces every file in memory.
    pub fn generate(&self) -> Result<Generated, BuildError> {
        let checked = check_root(&self.root)?;
        self.generate_from(&checked)
    }

    /// Produces every file from an already checked project.
    pub fn generate_from(&self, checked: &Checked) -> Result<Generated, BuildError> {
        if checked.has_errors() {
            return Err(BuildError::Invalid(render::human(
                &checked.sources,
                &checked.diagnostics,
                false,
            )));
        }
        generate(checked, &self.crate_name, &self.runtime_path)
    }

    /// Generates and writes the crate; files no longer produced are removed.
    pub fn run(&self) -> Result<Generated, BuildError> {
        let generated = self.generate()?;
        write(&self.output_dir(), &generated)?;
        Ok(generated)
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).expect("json values always serialize");
    s.push('\n');
    s.into_bytes()
}

/// The digest of the governing sources: contracts and policies (not scenarios), with
/// the generator format, over `path NUL sha256 LF` lines in path order.
pub fn bundle_digest(sources: &Sources) -> (String, BTreeMap<String, String>) {
    let mut hashes = BTreeMap::new();
    for (_, f) in sources.iter() {
        if f.path.starts_with("contracts/")
            || (f.path.starts_with("policies/") && f.path.ends_with(".cedar"))
        {
            hashes.insert(f.path.clone(), sha256_hex(f.text.as_bytes()));
        }
    }
    let mut h = Sha256::new();
    h.update(GENERATOR_FORMAT.as_bytes());
    h.update(b"\n");
    for (path, sha) in &hashes {
        h.update(path.as_bytes());
        h.update(b"\0");
        h.update(sha.as_bytes());
        h.update(b"\n");
    }
    let digest = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    (digest, hashes)
}

fn generate(
    checked: &Checked,
    crate_name: &str,
    runtime_path: &str,
) -> Result<Generated, BuildError> {
    let project = &checked.project;
    let (agent, sm) = match (&project.agent, &project.state_machine) {
        (Some(a), Some(s)) => (a, s),
        _ => {
            return Err(BuildError::Invalid(
                "the run contract or state machine is missing".into(),
            ));
        }
    };
    let policies = checked
        .policies
        .as_ref()
        .ok_or_else(|| BuildError::Invalid("the policies did not validate".into()))?;
    let mut tools = project.tools.clone();
    tools.sort_by(|a, b| a.name.value.cmp(&b.name.value));
    let (digest, source_hashes) = bundle_digest(&checked.sources);

    let mut files: Vec<Artifact> = Vec::new();
    let mut add = |path: String, bytes: Vec<u8>| files.push(Artifact { path, bytes });
    let fail = |path: &str, message: String| BuildError::Generate {
        path: path.to_string(),
        message,
    };

    add(
        "Cargo.toml".into(),
        format!(
            "# @generated by caseops-compile — do not edit\n[package]\nname = \"{crate_name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\nlicense = \"Apache-2.0\"\npublish = false\ndescription = \"The compiled CaseOps contract bundle of agent `{}`\"\n\n[dependencies]\ncaseops-runtime = {{ path = \"{runtime_path}\" }}\nserde = {{ version = \"1\", features = [\"derive\"] }}\nserde_json = \"1\"\n",
            agent.name.value
        )
        .into_bytes(),
    );

    for tool in &tools {
        let name = &tool.name.value;
        add(
            format!("schemas/{name}.input.json"),
            pretty(&json_schema::input_schema(tool)),
        );
        add(
            format!("schemas/{name}.output.json"),
            pretty(&json_schema::output_schema(tool)),
        );
    }
    add(
        "schemas/final-answer.json".into(),
        pretty(&json_schema::final_answer_schema(
            &agent.final_answer.schema_version.value,
            &agent.final_answer.fields,
        )),
    );
    add(
        "mcp/tools.json".into(),
        pretty(&listings::mcp_tools(&tools)),
    );
    add(
        "openai/tools.json".into(),
        pretty(&listings::openai_tools(&tools)),
    );

    add("cedar/schema.json".into(), pretty(&policies.schema_json));
    let schema_text = crate::policies::schema_text(&policies.schema_json)
        .map_err(|e| fail("cedar/schema.cedarschema", e))?;
    add(
        "cedar/schema.cedarschema".into(),
        format!("// @generated by caseops-compile — do not edit\n{schema_text}").into_bytes(),
    );
    let mut policy_text = String::from("// @generated by caseops-compile — do not edit\n");
    for (_, text) in &policies.texts {
        policy_text.push('\n');
        policy_text.push_str(text.trim());
        policy_text.push('\n');
    }
    add("cedar/policies.cedar".into(), policy_text.into_bytes());

    add(
        "docs/tools.md".into(),
        docs::tool_catalog(agent, &tools, &digest)
            .map_err(|e| fail("docs/tools.md", e))?
            .into_bytes(),
    );
    add(
        "docs/state-machine.md".into(),
        docs::state_diagram(sm)
            .map_err(|e| fail("docs/state-machine.md", e))?
            .into_bytes(),
    );

    let rust_files = [
        (
            "src/lib.rs",
            rust::lib_module(&rust::LibInfo {
                agent,
                digest: &digest,
            }),
        ),
        ("src/tools.rs", rust::tools_module(&tools)),
        ("src/state.rs", rust::state_module(sm)),
        ("src/agent.rs", rust::agent_module(agent)),
    ];
    for (path, tokens) in rust_files {
        let text = rust::render(tokens).map_err(|e| fail(path, e))?;
        add(path.to_string(), rustfmt(&text).into_bytes());
    }

    let outputs: BTreeMap<String, String> = files
        .iter()
        .map(|f| (f.path.clone(), sha256_hex(&f.bytes)))
        .collect();
    let manifest = json!({
        "generator": GENERATOR_FORMAT,
        "agent": agent.name.value,
        "bundle_digest": digest,
        "sources": source_hashes,
        "outputs": outputs,
    });
    files.push(Artifact {
        path: "manifest.json".into(),
        bytes: pretty(&manifest),
    });
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Generated { files, digest })
}

/// Formats with `rustfmt` when it is on PATH, so checked-in files are rustfmt-clean;
/// without it, prettyplease's output is used as is.
fn rustfmt(text: &str) -> String {
    let child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return text.to_string();
    };
    if let Some(mut stdin) = child.stdin.take()
        && stdin.write_all(text.as_bytes()).is_err()
    {
        return text.to_string();
    }
    match child.wait_with_output() {
        Ok(out) if out.status.success() && !out.stdout.is_empty() => {
            String::from_utf8(out.stdout).unwrap_or_else(|_| text.to_string())
        }
        _ => text.to_string(),
    }
}

/// Files of the output directory that the generator owns (everything but `target/`).
fn existing_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(dir)
                .map(|r| r.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            if rel == "target" || rel.starts_with("target/") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// Writes the crate. Each file goes to a temporary sibling first and is renamed into
/// place, so an interrupted build never leaves a half-written file.
pub fn write(dir: &Path, generated: &Generated) -> Result<(), BuildError> {
    let err = |path: &Path, source| BuildError::Write {
        path: path.to_path_buf(),
        source,
    };
    for f in &generated.files {
        let path = dir.join(&f.path);
        if std::fs::read(&path).is_ok_and(|old| old == f.bytes) {
            continue;
        }
        let parent = path.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
        let tmp = parent.join(format!(".{}.tmp", f.path.replace('/', "_")));
        std::fs::write(&tmp, &f.bytes).map_err(|e| err(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| err(&path, e))?;
    }
    let wanted: Vec<&str> = generated.files.iter().map(|f| f.path.as_str()).collect();
    for stale in existing_files(dir) {
        if !wanted.contains(&stale.as_str()) {
            let path = dir.join(&stale);
            std::fs::remove_file(&path).map_err(|e| err(&path, e))?;
        }
    }
    Ok(())
}

/// How a file on disk differs from what `build` would write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    Missing(String),
    Differs(String),
    Extra(String),
}

/// Compares the output directory with a fresh generation.
pub fn drift(dir: &Path, generated: &Generated) -> Vec<Drift> {
    let mut out = Vec::new();
    for f in &generated.files {
        match std::fs::read(dir.join(&f.path)) {
            Ok(bytes) if bytes == f.bytes => {}
            Ok(_) => out.push(Drift::Differs(f.path.clone())),
            Err(_) => out.push(Drift::Missing(f.path.clone())),
        }
    }
    let wanted: Vec<&str> = generated.files.iter().map(|f| f.path.as_str()).collect();
    for extra in existing_files(dir) {
        if !wanted.contains(&extra.as_str()) {
            out.push(Drift::Extra(extra));
        }
    }
    out
}

/// The drift check of `caseops-compile check`: one diagnostic per file that differs
/// from what `build` would write. Skipped when the project has errors (build would
/// refuse) or has no output directory yet.
pub fn drift_diagnostics(checked: &mut Checked, builder: &Builder) -> Vec<Diagnostic> {
    let dir = builder.output_dir();
    if checked.has_errors() || !dir.is_dir() {
        return Vec::new();
    }
    let generated = match builder.generate_from(checked) {
        Ok(g) => g,
        Err(e) => {
            return vec![
                Diagnostic::unlocated(
                    Code::GeneratedDrift,
                    None,
                    format!("cannot generate the crate: {e}"),
                )
                .help("this is a compiler bug; please report it"),
            ];
        }
    };
    let out_rel = dir
        .strip_prefix(&builder.root)
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .unwrap_or_else(|_| dir.to_string_lossy().into_owned());
    let drifted = drift(&dir, &generated);
    let Some(first) = drifted.first() else {
        return Vec::new();
    };
    // One error for the whole directory: one cause, one fix, however many files.
    let files: Vec<String> = drifted
        .iter()
        .map(|d| {
            let (path, what) = match d {
                Drift::Missing(p) => (p, "is missing"),
                Drift::Differs(p) => (p, "differs"),
                Drift::Extra(p) => (p, "is not written by the compiler"),
            };
            format!("`{out_rel}/{path}` {what}")
        })
        .collect();
    let first_path = match first {
        Drift::Missing(p) | Drift::Differs(p) | Drift::Extra(p) => p,
    };
    let shown = format!("{out_rel}/{first_path}");
    let bytes = std::fs::read(dir.join(first_path)).unwrap_or_default();
    let id = checked.sources.add(shown, bytes);
    let count = match files.len() {
        1 => "1 file".to_string(),
        n => format!("{n} files"),
    };
    vec![
        Diagnostic::unlocated(
            Code::GeneratedDrift,
            Some(id),
            format!(
                "`{out_rel}/` is not what `caseops-compile build` writes ({count}): {}",
                files.join(", ")
            ),
        )
        .help("run `caseops-compile build` and commit the contracts and `generated/` together"),
    ]
}

/// Shorthand used by tests: the JSON value of a generated file.
pub fn json_of(generated: &Generated, path: &str) -> Option<Value> {
    generated
        .files
        .iter()
        .find(|f| f.path == path)
        .and_then(|f| serde_json::from_slice(&f.bytes).ok())
}
