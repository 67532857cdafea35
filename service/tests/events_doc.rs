//! `docs/events.md` is generated from the host's event catalog with CaseOps's
//! names: the page a consumer reads cannot drift from the events the code writes.
//! `CASEOPS_UPDATE_DOCS=1` rewrites it.

use caseops_generated::Bundle;
use caseops_host::event_types::reference_page;
use caseops_host::relay::RelayConfig;
use caseops_host::store::audit::EventNames;

#[test]
fn docs_events_md_is_the_generated_reference_of_every_event_type() {
    let defaults = RelayConfig::default();
    let page = reference_page(
        &EventNames::of::<Bundle>(),
        &defaults.stream,
        &defaults.subject_prefix,
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/events.md");
    if std::env::var_os("CASEOPS_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &page).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == page,
        "docs/events.md is not what the catalog generates; run `CASEOPS_UPDATE_DOCS=1 cargo test -p caseops-service --test events_doc`"
    );
}
