//! `caseops-compile new <dir>`: an agent project that passes `check`, `test`, `build`
//! and its own smoke test as it comes — a run contract, the state machine, one tool,
//! policies with scenarios, the compiled bundle and a host crate on `caseops-host`.

use std::path::{Component, Path, PathBuf};

use crate::build::{BuildError, Builder};

/// The template files, by their path in the new project. `__name__` (the package
/// name), `__agent__` (the agent id, also the crates' Rust name) and `__caseops__`
/// (the CaseOps checkout, relative to the project's crates) are replaced.
const TEMPLATES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../templates/new/Cargo.toml")),
    (".gitignore", include_str!("../templates/new/gitignore")),
    ("README.md", include_str!("../templates/new/README.md")),
    (
        "contracts/agent.yaml",
        include_str!("../templates/new/contracts/agent.yaml"),
    ),
    (
        "contracts/state-machine.yaml",
        include_str!("../templates/new/contracts/state-machine.yaml"),
    ),
    (
        "contracts/tools/item_lookup.yaml",
        include_str!("../templates/new/contracts/tools/item_lookup.yaml"),
    ),
    (
        "policies/__agent__.cedar",
        include_str!("../templates/new/policies/__agent__.cedar"),
    ),
    (
        "policies/tests/item_lookup.yaml",
        include_str!("../templates/new/policies/tests/item_lookup.yaml"),
    ),
    (
        "host/Cargo.toml",
        include_str!("../templates/new/host/Cargo.toml"),
    ),
    (
        "host/src/lib.rs",
        include_str!("../templates/new/host/src/lib.rs"),
    ),
    (
        "host/src/main.rs",
        include_str!("../templates/new/host/src/main.rs"),
    ),
    (
        "host/src/tools.rs",
        include_str!("../templates/new/host/src/tools.rs"),
    ),
    (
        "host/tests/smoke.rs",
        include_str!("../templates/new/host/tests/smoke.rs"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum NewError {
    #[error(
        "`{}` already exists and is not empty: `new` only writes into a new or empty folder",
        .0.display()
    )]
    NotEmpty(PathBuf),
    #[error(
        "`{0}` is not a usable project name: use lowercase letters, digits and `-`, starting with a letter (`--name`)"
    )]
    BadName(String),
    #[error(
        "no CaseOps checkout at `{}` (it needs `host/` and `runtime/`): pass `--caseops <path to the CaseOps repository>`",
        .0.display()
    )]
    NoCaseOps(PathBuf),
    #[error("cannot write `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the new contracts do not build: {0}")]
    Build(#[from] BuildError),
}

/// What to create.
#[derive(Debug, Clone)]
pub struct NewProject {
    pub dir: PathBuf,
    /// Package and binary name (default: the folder's name).
    pub name: Option<String>,
    /// The CaseOps checkout the crates depend on (default: the one this compiler
    /// was built from).
    pub caseops: Option<PathBuf>,
}

/// What was created.
#[derive(Debug)]
pub struct Created {
    pub name: String,
    pub agent: String,
    pub files: Vec<PathBuf>,
}

impl NewProject {
    pub fn create(&self) -> Result<Created, NewError> {
        let name = match &self.name {
            Some(n) => n.clone(),
            None => self
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.ends_with('-')
            && name.len() <= 40;
        if !valid {
            return Err(NewError::BadName(name));
        }
        let agent = name.replace('-', "_");
        let caseops = self
            .caseops
            .clone()
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
        if !caseops.join("host/Cargo.toml").is_file()
            || !caseops.join("runtime/Cargo.toml").is_file()
        {
            return Err(NewError::NoCaseOps(caseops));
        }
        if std::fs::read_dir(&self.dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(NewError::NotEmpty(self.dir.clone()));
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| NewError::Io { path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        // The crates sit one level below the project, so one relative path from
        // a crate to the checkout serves `host/` and `generated/` alike.
        let from = self.dir.join("host");
        let platform = relative(&caseops, &from).map_err(io(&caseops))?;
        let fill = |text: &str| {
            text.replace("__caseops__", &platform)
                .replace("__agent__", &agent)
                .replace("__name__", &name)
        };
        let mut files = Vec::new();
        for (path, text) in TEMPLATES {
            let path = self.dir.join(fill(path));
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, fill(text)).map_err(io(&path))?;
            files.push(path);
        }
        let generated = Builder::new()
            .root(&self.dir)
            .crate_name(format!("{name}-generated"))
            .runtime_path(format!("{platform}/runtime"))
            .run()?;
        files.extend(
            generated
                .files
                .iter()
                .map(|f| self.dir.join("generated").join(&f.path)),
        );
        Ok(Created { name, agent, files })
    }
}

/// `target` relative to the folder `from` (both made absolute first), so that a
/// project next to the checkout keeps working when both are moved together.
fn relative(target: &Path, from: &Path) -> std::io::Result<String> {
    let target = std::fs::canonicalize(target)?;
    let from = match std::fs::canonicalize(from) {
        Ok(p) => p,
        // `host/` does not exist yet: its parent does.
        Err(_) => std::fs::canonicalize(from.parent().unwrap_or(from))?.join("host"),
    };
    let t: Vec<Component> = target.components().collect();
    let f: Vec<Component> = from.components().collect();
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); f.len() - common];
    parts.extend(
        t[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    Ok(if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    })
}
