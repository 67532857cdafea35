//! A temporary project folder that is removed when the test is done with it.

use std::path::{Path, PathBuf};

pub struct TempProject(PathBuf);

impl TempProject {
    /// An empty folder `caseops-<name>-<pid>` under the system's temporary folder.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("caseops-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempProject(dir)
    }
}

impl std::ops::Deref for TempProject {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempProject {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempProject {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
