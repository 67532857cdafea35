//! The set of input files of one compilation, and positions within them.

use std::path::{Path, PathBuf};

use crate::yaml::Span;

/// Index of a file in a [`Sources`] set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub usize);

/// One input file: its path relative to the project root (with `/` separators) and its
/// text. Bytes that are not UTF-8 are kept as replacement characters for display only;
/// such a file is reported and never parsed.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: String,
    pub text: String,
    /// Byte offset of the first invalid UTF-8 sequence, when the file is not UTF-8.
    pub invalid_utf8_at: Option<usize>,
    pub size: usize,
    line_starts: Vec<usize>,
}

impl SourceFile {
    pub fn new(path: impl Into<String>, bytes: Vec<u8>) -> Self {
        let size = bytes.len();
        let (text, invalid_utf8_at) = match String::from_utf8(bytes) {
            Ok(text) => (text, None),
            Err(e) => {
                let at = e.utf8_error().valid_up_to();
                (String::from_utf8_lossy(e.as_bytes()).into_owned(), Some(at))
            }
        };
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            path: path.into(),
            text,
            invalid_utf8_at,
            size,
            line_starts,
        }
    }

    /// 1-based line and 1-based column (in characters) of a byte offset.
    pub fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.line_starts[line];
        let column = self
            .text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(offset - start);
        (line + 1, column + 1)
    }
}

/// All input files of one project, addressed by [`FileId`].
#[derive(Debug, Clone, Default)]
pub struct Sources {
    files: Vec<SourceFile>,
}

impl Sources {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file (or replaces the one with the same path) and returns its id.
    pub fn add(&mut self, path: impl Into<String>, bytes: Vec<u8>) -> FileId {
        let file = SourceFile::new(path, bytes);
        if let Some(i) = self.files.iter().position(|f| f.path == file.path) {
            self.files[i] = file;
            return FileId(i);
        }
        self.files.push(file);
        FileId(self.files.len() - 1)
    }

    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0]
    }

    pub fn find(&self, path: &str) -> Option<FileId> {
        self.files.iter().position(|f| f.path == path).map(FileId)
    }

    pub fn remove(&mut self, path: &str) {
        self.files.retain(|f| f.path != path);
    }

    pub fn iter(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files.iter().enumerate().map(|(i, f)| (FileId(i), f))
    }

    /// Ids of the files under a directory prefix such as `contracts/tools/`, sorted by
    /// path so the output does not depend on directory listing order.
    pub fn under(&self, prefix: &str) -> Vec<FileId> {
        let mut ids: Vec<FileId> = self
            .iter()
            .filter(|(_, f)| f.path.starts_with(prefix))
            .map(|(id, _)| id)
            .collect();
        ids.sort_by(|a, b| self.get(*a).path.cmp(&self.get(*b).path));
        ids
    }

    /// A span clamped to the file, so a label can never point past the end.
    pub fn clamp(&self, id: FileId, span: &Span) -> Span {
        let len = self.get(id).text.len();
        let start = span.start.min(len);
        start..span.end.clamp(start, len)
    }
}

/// Error reading the project from disk (exit code 2 at the CLI).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("project root `{}` does not exist or is not a directory", .0.display())]
    MissingRoot(PathBuf),
    #[error("cannot read `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Reads every contract and policy file below `root` into a [`Sources`] set.
///
/// Reads `contracts/agent.yaml`, `contracts/state-machine.yaml`,
/// `contracts/tools/*.yaml` and `policies/**` (`.cedar` and `tests/*.yaml`). Missing
/// files are not an error here: the checker reports them as diagnostics.
pub fn load(root: &Path) -> Result<Sources, LoadError> {
    if !root.is_dir() {
        return Err(LoadError::MissingRoot(root.to_path_buf()));
    }
    let mut sources = Sources::new();
    for rel in ["contracts/agent.yaml", "contracts/state-machine.yaml"] {
        read_into(&mut sources, root, rel)?;
    }
    for dir in ["contracts/tools", "policies", "policies/tests"] {
        let path = root.join(dir);
        if !path.is_dir() {
            continue;
        }
        let entries = std::fs::read_dir(&path).map_err(|source| LoadError::Read {
            path: path.clone(),
            source,
        })?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let wanted = match dir {
                "policies" => name.ends_with(".cedar"),
                _ => name.ends_with(".yaml") || name.ends_with(".yml"),
            };
            if wanted && entry.path().is_file() {
                names.push(name);
            }
        }
        names.sort();
        for name in names {
            read_into(&mut sources, root, &format!("{dir}/{name}"))?;
        }
    }
    Ok(sources)
}

fn read_into(sources: &mut Sources, root: &Path, rel: &str) -> Result<(), LoadError> {
    let path = root.join(rel);
    match std::fs::read(&path) {
        Ok(bytes) => {
            sources.add(rel, bytes);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LoadError::Read { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let f = SourceFile::new("a.yaml", "ab\n道路: x\n".as_bytes().to_vec());
        assert_eq!(f.position(0), (1, 1));
        assert_eq!(f.position(3), (2, 1));
        let x = f.text.find('x').unwrap();
        assert_eq!(f.position(x), (2, 5));
    }

    #[test]
    fn invalid_utf8_is_recorded_with_its_offset() {
        let f = SourceFile::new("a.yaml", b"name: a\xff\n".to_vec());
        assert_eq!(f.invalid_utf8_at, Some(7));
    }
}
