//! `docs/contract-language.md` is held to the compiler: every key it accepts and every
//! code it reports is documented, no documented code is made up, and every example
//! marked `# file: <path>` passes `check` laid over this repository's contracts.

use std::path::Path;

use caseops_compile::codes::Code;
use caseops_compile::diagnostic::Severity;
use caseops_compile::{check_sources, language_keys, source};

fn doc() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/contract-language.md"),
    )
    .expect("docs/contract-language.md exists")
}

#[test]
fn every_key_of_the_language_is_documented() {
    let text = doc();
    let mut missing = Vec::new();
    for (place, keys) in language_keys() {
        for key in keys {
            if !text.contains(&format!("`{key}`")) {
                missing.push(format!("{place}: `{key}`"));
            }
        }
    }
    assert!(missing.is_empty(), "undocumented keys: {missing:?}");
}

#[test]
fn every_code_is_documented_and_every_documented_code_exists() {
    let text = doc();
    for code in Code::ALL {
        assert!(
            text.contains(code.as_str()),
            "{} is not documented",
            code.as_str()
        );
    }
    let bytes = text.as_bytes();
    for (i, w) in bytes.windows(5).enumerate() {
        let looks_like_code =
            (w[0] == b'E' || w[0] == b'W') && w[1..].iter().all(u8::is_ascii_digit);
        let starts_word = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if looks_like_code && starts_word {
            let code = std::str::from_utf8(w).unwrap();
            assert!(
                Code::parse(code).is_some(),
                "the doc names `{code}`, which does not exist"
            );
        }
    }
}

#[test]
fn the_file_examples_pass_check() {
    let text = doc();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut examples = 0;
    for block in text.split("```yaml\n").skip(1) {
        let body = block.split("```").next().unwrap();
        let Some(path) = body.lines().next().and_then(|l| l.strip_prefix("# file: ")) else {
            continue;
        };
        examples += 1;
        let mut sources = source::load(&root).unwrap();
        sources.add(path.trim(), body.as_bytes().to_vec());
        let checked = check_sources(sources);
        let errors: Vec<String> = checked
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| format!("{} {}", d.code.as_str(), d.message))
            .collect();
        assert!(
            errors.is_empty(),
            "the example for `{path}` fails: {errors:?}"
        );
    }
    assert!(examples >= 3, "only {examples} checked examples");
}
