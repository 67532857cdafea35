//! `caseops-host` is generic: nothing in its sources names a CaseOps tool, the case
//! resource, a CaseOps table or a reference datum. Everything CaseOps lives in this
//! crate, and a second agent links the host without inheriting any of it.

use std::path::{Path, PathBuf};

use caseops_generated::Bundle;
use caseops_runtime::ContractBundle;
use caseops_service::domain::reference_data;
use caseops_service::reference::SCHEMA;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_host_crate_names_nothing_of_caseops() {
    let data = reference_data();
    let mut names: Vec<String> = Bundle::TOOLS.iter().map(|t| t.name.to_string()).collect();
    names.push(Bundle::RESOURCE_ID_FIELD.to_string());
    names.push(Bundle::AGENT.to_string());
    names.extend(SCHEMA.tables.iter().map(|t| t.to_string()));
    names.extend(data.cases.iter().map(|c| c.case_id.clone()));
    names.extend(data.cases.iter().map(|c| c.tenant_id.clone()));
    names.extend(data.policies.iter().map(|p| p.policy_id.clone()));
    names.extend(data.documents.iter().map(|d| d.document_id.clone()));

    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/src"),
        &mut files,
    );
    assert!(files.len() > 10, "host sources found: {}", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for name in &names {
            if text.contains(name.as_str()) {
                found.push(format!("{} names `{name}`", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}
