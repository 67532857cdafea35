//! A whole project: reads every contract file and runs the rules that span files.

use crate::agent::{AgentContract, read_agent};
use crate::codes::Code;
use crate::diagnostic::{Diagnostic, Diagnostics, closest};
use crate::reader::{Reader, list};
use crate::source::{FileId, Sources};
use crate::state_machine::{self, StateMachine, read_state_machine};
use crate::tool::{Risk, ToolContract, ToolOutline, read_tool};
use crate::yaml::{self, Node, NodeKind};

/// Largest contract or policy file the compiler reads.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;

pub const AGENT_PATH: &str = "contracts/agent.yaml";
pub const STATE_MACHINE_PATH: &str = "contracts/state-machine.yaml";
pub const TOOLS_DIR: &str = "contracts/tools/";

/// The typed contracts of a project. A part is `None` (or a tool absent) when its file
/// had errors that prevent reading it; the diagnostics say why.
#[derive(Debug, Default)]
pub struct Project {
    pub agent: Option<AgentContract>,
    pub state_machine: Option<StateMachine>,
    pub tools: Vec<ToolContract>,
    /// What cross-file rules need of every tool whose name could be read, including
    /// tools whose contract has errors.
    pub outlines: Vec<ToolOutline>,
    /// Some tool file could not be read into a contract; checks that need whole
    /// contracts (policies, scenarios) are skipped.
    pub tools_incomplete: bool,
    /// Some tool file did not even yield a name; checks that look a tool up by name
    /// are skipped, since a "no contract" finding would only repeat that error.
    pub tools_unnamed: bool,
}

/// Reads and checks every contract in `sources`, collecting all diagnostics.
pub fn check_contracts(sources: &Sources, diags: &mut Diagnostics) -> Project {
    let mut project = Project::default();

    match sources.find(AGENT_PATH) {
        Some(id) => {
            if let Some(root) = parse_file(sources, id, diags) {
                let mut r = Reader { file: id, diags };
                project.agent = read_agent(&mut r, &root);
            }
        }
        None => diags.push(missing_file(AGENT_PATH, "a run contract")),
    }
    match sources.find(STATE_MACHINE_PATH) {
        Some(id) => {
            if let Some(root) = parse_file(sources, id, diags) {
                let mut r = Reader { file: id, diags };
                project.state_machine = read_state_machine(&mut r, &root);
                if let Some(sm) = &project.state_machine {
                    state_machine::check(&mut r, sm);
                }
            }
        }
        None => diags.push(missing_file(STATE_MACHINE_PATH, "a run state machine")),
    }
    let tool_files = sources.under(TOOLS_DIR);
    if tool_files.is_empty() {
        diags.push(
            Diagnostic::unlocated(
                Code::MissingFile,
                None,
                "no tool contracts found in `contracts/tools/`",
            )
            .help("add one `contracts/tools/<name>.yaml` per tool"),
        );
    }
    for id in tool_files {
        if let Some(root) = parse_file(sources, id, diags) {
            let mut r = Reader { file: id, diags };
            let read = read_tool(&mut r, &root);
            match read.outline {
                Some(outline) => project.outlines.push(outline),
                None => project.tools_unnamed = true,
            }
            match read.contract {
                Some(tool) => project.tools.push(tool),
                None => project.tools_incomplete = true,
            }
        } else {
            project.tools_incomplete = true;
            project.tools_unnamed = true;
        }
    }

    cross_check(&project, diags);
    if let (Some(sm), Some(id)) = (&project.state_machine, sources.find(STATE_MACHINE_PATH)) {
        let gated: Vec<&str> = project
            .tools
            .iter()
            .filter(|t| t.approval.is_some() && t.risk.value != crate::tool::Risk::ReadOnly)
            .map(|t| t.name.value.as_str())
            .collect();
        let mut r = Reader { file: id, diags };
        state_machine::check_approval(&mut r, sm, &gated);
    }
    project
}

fn missing_file(path: &str, what: &str) -> Diagnostic {
    Diagnostic::unlocated(
        Code::MissingFile,
        None,
        format!("`{path}` is missing: every project needs {what}"),
    )
    .help(format!(
        "run from the project's folder or one below it, or pass `--root` (`CASEOPS_ROOT`); to start a project, create `{path}` (`caseops-compile explain E0009` shows a minimal one)"
    ))
}

/// Turns one file into a YAML tree, reporting size, encoding and syntax problems.
pub fn parse_file(sources: &Sources, id: FileId, diags: &mut Diagnostics) -> Option<Node> {
    let file = sources.get(id);
    if file.size > MAX_FILE_BYTES {
        diags.push(
            Diagnostic::at(
                Code::FileTooLarge,
                id,
                0..0,
                format!(
                    "`{}` is {} bytes, above the limit of {} bytes",
                    file.path, file.size, MAX_FILE_BYTES
                ),
            )
            .label("file not parsed")
            .help("split the file; contract files are a few kilobytes"),
        );
        return None;
    }
    if let Some(at) = file.invalid_utf8_at {
        diags.push(
            Diagnostic::at(
                Code::NotUtf8,
                id,
                at..at,
                format!("`{}` is not valid utf-8", file.path),
            )
            .label("invalid byte sequence starts here")
            .help("save the file as UTF-8"),
        );
        return None;
    }
    let root = match yaml::parse(&file.text) {
        Ok(root) => root,
        Err(e) => {
            diags.push(syntax_error(sources, id, e));
            return None;
        }
    };
    match &root.kind {
        NodeKind::Map(_) => Some(root),
        NodeKind::Null => {
            diags.push(
                Diagnostic::at(
                    Code::NotAMapping,
                    id,
                    0..0,
                    format!("`{}` is empty", file.path),
                )
                .label("no content")
                .help("a contract file holds one mapping, e.g. `name: …`"),
            );
            None
        }
        other => {
            diags.push(
                Diagnostic::at(
                    Code::NotAMapping,
                    id,
                    root.span.clone(),
                    format!(
                        "expected a mapping at the top of `{}`, found {}",
                        file.path,
                        other.describe()
                    ),
                )
                .label("top-level value")
                .help("a contract file holds one mapping of keys to values"),
            );
            None
        }
    }
}

fn syntax_error(sources: &Sources, id: FileId, e: yaml::ParseError) -> Diagnostic {
    let text = &sources.get(id).text;
    // Tabs in indentation are the most common cause; say so plainly.
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let indent_len = line.len() - line.trim_start_matches([' ', '\t']).len();
        if let Some(tab) = line[..indent_len].find('\t')
            && e.offset.is_none_or(|o| offset + tab <= o + line.len())
        {
            let at = offset + tab;
            return Diagnostic::at(
                Code::YamlSyntax,
                id,
                at..at + 1,
                "tab character used for indentation",
            )
            .label("tab here")
            .help("YAML indents with spaces only; replace the tab with spaces");
        }
        offset += line.len();
    }
    let at = e.offset.unwrap_or(0).min(text.len());
    let end = text[at..]
        .char_indices()
        .nth(1)
        .map(|(i, _)| at + i)
        .unwrap_or(at);
    Diagnostic::at(
        Code::YamlSyntax,
        id,
        at..end,
        format!("malformed yaml: {}", e.message),
    )
    .label("the parser stopped here")
    .help("fix the YAML syntax; nothing else in this file was checked")
}

/// Rules that relate the agent, the state machine and the tools to each other.
fn cross_check(project: &Project, diags: &mut Diagnostics) {
    let tools = &project.outlines;
    // Name lookups by set and map: projects may declare thousands of tools.
    let in_catalog: std::collections::HashSet<&str> = project
        .agent
        .iter()
        .flat_map(|a| a.catalog.iter().map(|c| c.value.as_str()))
        .collect();
    let mut first_of: std::collections::HashMap<&str, &ToolOutline> = Default::default();

    for tool in tools {
        if let Some(first) = first_of.get(tool.name.value.as_str()).copied() {
            diags.push(
                Diagnostic::at(
                    Code::DuplicateTool,
                    tool.file,
                    tool.name.span.clone(),
                    format!("tool `{}` is declared twice", tool.name.value),
                )
                .label("declared again here")
                .secondary(first.file, first.name.span.clone(), "first defined here")
                .help("rename one of the tools or delete the duplicate file"),
            );
        } else {
            first_of.insert(&tool.name.value, tool);
        }
    }

    for tool in tools.iter().filter(|_| !project.tools_unnamed) {
        let mut r = Reader {
            file: tool.file,
            diags,
        };
        for req in &tool.requires {
            check_tool_ref(&mut r, tools, tool, req, "requires", false);
        }
        if let Some(confirm_with) = &tool.confirm_with {
            check_tool_ref(
                &mut r,
                tools,
                tool,
                confirm_with,
                "effects.confirm_with",
                true,
            );
        }
    }

    let Some(agent) = &project.agent else {
        return;
    };
    let stage_names: Vec<&str> = agent.stages.iter().map(|s| s.value.as_str()).collect();
    for tool in tools {
        let mut r = Reader {
            file: tool.file,
            diags,
        };
        let bound = tool.run_bound.len();
        // An agent without readable stages was already reported; do not blame every tool.
        for stage in tool
            .stages
            .iter()
            .flatten()
            .filter(|_| !stage_names.is_empty())
        {
            if !stage_names.contains(&stage.value.as_str()) {
                let mut d = r
                    .error(
                        Code::UnknownStage,
                        stage.span.clone(),
                        format!("stage `{}` is not declared by the agent", stage.value),
                    )
                    .label("unknown stage");
                d = match closest(&stage.value, stage_names.iter().copied()) {
                    Some(c) => d.help(format!("did you mean `{c}`?")),
                    None => d.help(format!("declared stages: {}", list(&stage_names))),
                };
                r.report(d);
            }
        }
        for field in &tool.run_bound {
            // With several run-bound fields E0108 already names the problem.
            if bound == 1 && field.value != agent.resource.id_field.value {
                let d = r
                    .error(
                        Code::ResourceFieldMismatch,
                        field.span.clone(),
                        format!(
                            "run-bound field `{}` does not match the agent's resource id field `{}`",
                            field.value, agent.resource.id_field.value
                        ),
                    )
                    .label("run-bound resource")
                    .secondary(agent.file, agent.resource.id_field.span.clone(), "resource id field declared here")
                    .help(format!("rename the field to `{}`", agent.resource.id_field.value));
                r.report(d);
            }
        }
        let ceiling = agent.budgets.tool_timeout_ceiling_seconds as i64;
        if let Some(timeout) = &tool.timeout_seconds
            && timeout.value > ceiling
            && timeout.value <= 60
        {
            let d = r
                .error(
                    Code::TimeoutAboveCeiling,
                    timeout.span.clone(),
                    format!(
                        "`timeout_seconds` {} is above the agent's ceiling of {ceiling}; the runtime uses {ceiling}",
                        timeout.value
                    ),
                )
                .label("clamped to the ceiling")
                .help(format!("set `timeout_seconds: {ceiling}` or raise `tool_timeout_ceiling_seconds`"));
            r.report(d);
        }
        if !in_catalog.contains(tool.name.value.as_str()) {
            let d = r
                .error(
                    Code::NotInCatalog,
                    tool.name.span.clone(),
                    format!("tool `{}` is not in the tenant catalog", tool.name.value),
                )
                .label("no run will see this tool")
                .secondary(agent.file, catalog_span(agent), "catalog declared here")
                .help(format!(
                    "add `{}` to `catalog` in `contracts/agent.yaml`",
                    tool.name.value
                ));
            r.report(d);
        }
    }

    let names: Vec<&str> = tools.iter().map(|t| t.name.value.as_str()).collect();
    let known: std::collections::HashSet<&str> = names.iter().copied().collect();
    let mut r = Reader {
        file: agent.file,
        diags,
    };
    for entry in agent.catalog.iter().filter(|_| !project.tools_unnamed) {
        if !known.contains(entry.value.as_str()) {
            let mut d = r
                .error(
                    Code::UnknownCatalogTool,
                    entry.span.clone(),
                    format!("catalog names `{}`, which has no contract", entry.value),
                )
                .label("unknown tool");
            d = match closest(&entry.value, names.iter().copied()) {
                Some(c) => d.help(format!("did you mean `{c}`?")),
                None => d.help("add a contract in `contracts/tools/` or remove the entry"),
            };
            r.report(d);
        }
    }
}

fn catalog_span(agent: &AgentContract) -> crate::yaml::Span {
    agent
        .catalog
        .first()
        .map(|c| c.span.clone())
        .unwrap_or(agent.name.span.clone())
}

fn check_tool_ref(
    r: &mut Reader,
    tools: &[ToolOutline],
    tool: &ToolOutline,
    name: &crate::reader::Sp<String>,
    key: &str,
    must_read: bool,
) {
    let target = tools.iter().find(|t| t.name.value == name.value);
    let problem = match target {
        None => Some(format!(
            "`{key}` names `{}`, which has no contract",
            name.value
        )),
        Some(t) if t.name.value == tool.name.value => {
            Some(format!("tool `{}` names itself in `{key}`", name.value))
        }
        Some(t) if must_read && t.risk.is_some_and(|risk| risk != Risk::ReadOnly) => Some(format!(
            "`{key}` names `{}`, which is not a read-only tool",
            name.value
        )),
        Some(_) => None,
    };
    if let Some(message) = problem {
        let names: Vec<&str> = tools
            .iter()
            .filter(|t| t.name.value != tool.name.value)
            .map(|t| t.name.value.as_str())
            .collect();
        let mut d = r
            .error(Code::UnknownToolReference, name.span.clone(), message)
            .label("tool reference");
        d = match (target, closest(&name.value, names.iter().copied())) {
            (None, Some(c)) => d.help(format!("did you mean `{c}`?")),
            _ if must_read => {
                d.help("name a read-only tool that shows whether the write took effect")
            }
            _ => d.help("name another tool that has a contract in `contracts/tools/`"),
        };
        r.report(d);
    }
}
