//! Stable diagnostic codes and their long explanations (`caseops-compile explain CODE`).
//!
//! A code never changes meaning once released; a retired code is not reused.

use crate::diagnostic::Severity;

macro_rules! codes {
    ($( $variant:ident = $code:literal, $sev:ident, $title:literal, $explain:literal, $bad:literal, $good:literal; )*) => {
        /// Every diagnostic code the compiler can emit.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code { $( $variant ),* }

        impl Code {
            pub const ALL: &'static [Code] = &[ $( Code::$variant ),* ];

            pub fn as_str(self) -> &'static str {
                match self { $( Code::$variant => $code ),* }
            }

            pub fn severity(self) -> Severity {
                match self { $( Code::$variant => Severity::$sev ),* }
            }

            /// One line naming the rule (used as the SARIF rule description).
            pub fn title(self) -> &'static str {
                match self { $( Code::$variant => $title ),* }
            }

            pub fn explanation(self) -> &'static str {
                match self { $( Code::$variant => $explain ),* }
            }

            /// A failing and a fixed example, in that order.
            pub fn examples(self) -> (&'static str, &'static str) {
                match self { $( Code::$variant => ($bad, $good) ),* }
            }
        }
    };
}

codes! {
    YamlSyntax = "E0001", Error, "malformed yaml",
        "The file is not well-formed YAML 1.2, so nothing in it can be checked. Tabs may not be used for indentation, brackets and quotes must be closed, and a key must be followed by `: `.",
        "input:\n\tcase_id: run-bound-resource\n",
        "input:\n  case_id: run-bound-resource\n";
    NotUtf8 = "E0002", Error, "file is not valid utf-8",
        "Contract and policy files must be UTF-8 text. The diagnostic points at the first byte that is not part of a valid UTF-8 sequence; re-save the file as UTF-8.",
        "title: caf\\xe9 (latin-1 bytes)\n",
        "title: café\n";
    FileTooLarge = "E0003", Error, "file is too large",
        "A contract or policy file may be at most 1 MiB. Larger files are not parsed, so a runaway generator or a pasted data dump cannot stall the build. Split the file or move data out of it.",
        "# a 5 MB contract file\n",
        "# one tool per file, a few kilobytes each\n";
    NotAMapping = "E0004", Error, "document is not a mapping",
        "Every contract file holds one YAML mapping at the top level. An empty file, a bare scalar or a list is reported here.",
        "- name: caseops_get_case_snapshot\n",
        "name: caseops_get_case_snapshot\n";
    DuplicateKey = "E0005", Error, "duplicate key",
        "A mapping names the same key twice. YAML requires unique keys and the compiler does not pick a winner: remove or rename one of them.",
        "max_attempts: 2\nmax_attempts: 3\n",
        "max_attempts: 2\n";
    UnknownKey = "E0006", Error, "unknown key",
        "The key is not part of the contract language at this place. Unknown keys are errors so a typo cannot silently drop a control (a misspelt `max_attempts` would otherwise fall back to a default).",
        "max_atempts: 2\n",
        "max_attempts: 2\n";
    WrongType = "E0007", Error, "value has the wrong type",
        "The value is of a different YAML type than the key requires. Versions and codes that look like numbers must be quoted to be strings.",
        "version: 1.0\n",
        "version: \"1.0\"\n";
    InvalidValue = "E0008", Error, "value is not one of the allowed values",
        "The key takes one of a fixed set of values (a risk class, a field source, a type, a backoff kind, an error class); the message lists them.",
        "risk: readonly\n",
        "risk: read_only\n";
    MissingFile = "E0009", Error, "required file is missing",
        "A project needs `contracts/agent.yaml`, `contracts/state-machine.yaml` and at least one tool contract in `contracts/tools/`.",
        "contracts/\n  tools/\n",
        "contracts/\n  agent.yaml\n  state-machine.yaml\n  tools/caseops_get_case_snapshot.yaml\n";
    MissingKey = "E0010", Error, "required key is missing",
        "A run contract or state machine leaves out a key that has no default.",
        "agent: caseops_investigation\n# no resource\n",
        "agent: caseops_investigation\nresource:\n  type: Case\n  id_field: case_id\n";
    UnansweredQuestion = "E0101", Error, "tool contract leaves a question unanswered",
        "Every tool contract answers nine questions: what it does, who can call it, when, where its input comes from, how its output is validated, its risk, its retry safety, how a write's effect is confirmed and what is recorded. The message names the question and the key that answers it.",
        "name: caseops_get_case_snapshot\nversion: \"1.0\"\n# no required_scope\n",
        "name: caseops_get_case_snapshot\nversion: \"1.0\"\nrequired_scope: case:read\n";
    InvalidToolName = "E0102", Error, "invalid tool name",
        "A tool name is what the model sees and what policies name: snake_case matching `^[a-z][a-z0-9_]*$`, at most 64 characters.",
        "name: GetCaseSnapshot\n",
        "name: caseops_get_case_snapshot\n";
    DuplicateTool = "E0103", Error, "duplicate tool name",
        "Two contract files declare the same tool name. Tool names identify actions in policies, ledger rows and MCP listings, so they must be unique across `contracts/tools/`.",
        "# a.yaml\nname: caseops_get_case_snapshot\n# b.yaml\nname: caseops_get_case_snapshot\n",
        "# b.yaml\nname: caseops_get_policy_requirements\n";
    InvalidVersion = "E0104", Error, "invalid version",
        "A contract version is semver-ish: one to three dot-separated numbers with an optional `-suffix`, written as a quoted string.",
        "version: \"v1\"\n",
        "version: \"1.0\"\n";
    InvalidFieldName = "E0105", Error, "invalid field name",
        "Input and output field names are snake_case (`^[a-z][a-z0-9_]*$`, at most 64 characters): they become JSON properties, Rust fields and Cedar attributes.",
        "input:\n  caseId: run-bound-resource\n",
        "input:\n  case_id: run-bound-resource\n";
    InvalidFieldType = "E0106", Error, "invalid field type or constraint",
        "A field's type is one of string, integer, number, boolean, date-time, `list of T`, object or enum, with constraints that fit it (`min_length`/`max_length`/`pattern` on strings, `minimum`/`maximum` on numbers, `items` on lists, `fields` on objects, `enum` values on enums), and a minimum never above its maximum.",
        "output:\n  version: {type: integer, min_length: 1}\n",
        "output:\n  version: {type: integer, minimum: 1}\n";
    IdentityFromModel = "E0107", Error, "identity field is not system-injected",
        "Identity, credentials, approvals, budgets, idempotency keys and audit data never come from the model. A field named like `tenant_id`, `principal`, `actor_id`, `api_key`, `token`, `access_token`, `approval*`, `budget*`, `idempotency_key`, `audit_*` or `*_timestamp` must be `system-injected`; the runtime fills it from trusted context and it never appears in a model-visible schema.",
        "input:\n  tenant_id: model-proposed\n",
        "input:\n  tenant_id: system-injected\n";
    RunBoundResource = "E0108", Error, "tool needs exactly one run-bound resource",
        "Exactly one input field of a tool is `run-bound-resource`: the resource the run is bound to, which the runtime checks against the run before authorization. None or several make that check impossible.",
        "input:\n  case_id: model-proposed\n",
        "input:\n  case_id: run-bound-resource\n";
    ResourceFieldMismatch = "E0109", Error, "run-bound field does not match the agent's resource id field",
        "The run-bound-resource field must have the name of the resource id field declared in `contracts/agent.yaml` (`resource.id_field`), so the runtime knows which argument to compare with the run's resource.",
        "input:\n  claim_id: run-bound-resource   # agent.yaml says id_field: case_id\n",
        "input:\n  case_id: run-bound-resource\n";
    RetryWithoutIdempotency = "E0110", Error, "write tool retries without an idempotency key",
        "A write tool with `max_attempts` above 1 would repeat its effect on every retry (a retry storm, duplicate payments). Declare `idempotency_key` (the input fields that identify one business intent) or set `max_attempts: 1`.",
        "risk: reversible_write\nmax_attempts: 3\n",
        "risk: reversible_write\nmax_attempts: 3\nidempotency_key: [case_id, document_id]\n";
    IrreversibleWithoutApproval = "E0111", Error, "irreversible write without approval",
        "An `irreversible_write` tool must name who approves it (`approval: <role>`); the control plane hands such calls to a human before execution.",
        "risk: irreversible_write\n",
        "risk: irreversible_write\napproval: claims_supervisor\n";
    WriteWithoutConfirmation = "E0112", Error, "write tool without effect confirmation",
        "When a write times out its effect is unknown. A write tool declares `effects.confirm_with`, a read-only tool that tells whether the effect happened, and `effects.on_unknown` (`needs_human` or `fail`) for when even that cannot tell.",
        "risk: reversible_write\n",
        "risk: reversible_write\neffects:\n  confirm_with: caseops_get_case_snapshot\n  on_unknown: needs_human\n";
    TimeoutOutOfRange = "E0113", Error, "timeout out of range",
        "`timeout_seconds` is within (0, 60]. The effective timeout is the smaller of this and the agent's `tool_timeout_ceiling_seconds`.",
        "timeout_seconds: 0\n",
        "timeout_seconds: 5\n";
    AttemptsOutOfRange = "E0114", Error, "max_attempts out of range",
        "`max_attempts` counts the first attempt and is within 1..=5.",
        "max_attempts: 10\n",
        "max_attempts: 2\n";
    UnknownStage = "E0115", Error, "unknown stage",
        "A tool's `stages` must name stages declared in `contracts/agent.yaml`.",
        "stages: [investigate]\n",
        "stages: [investigating]\n";
    UnknownToolReference = "E0116", Error, "reference to an unknown or unsuitable tool",
        "`requires` and `effects.confirm_with` name other tools by their contract name; `confirm_with` must name a read-only tool, and a tool cannot require itself.",
        "effects:\n  confirm_with: caseops_get_case_snapshots\n",
        "effects:\n  confirm_with: caseops_get_case_snapshot\n";
    InvalidEvidence = "E0117", Error, "evidence field is not a string output",
        "`evidence` names the output field that holds the evidence reference of a result. It must be a declared output field of type string. When `evidence` is left out, a field named `evidence_ref` is used.",
        "evidence: evidence\n",
        "evidence: evidence_ref\n";
    InvalidErrorCode = "E0118", Error, "invalid error code declaration",
        "Business error codes are SCREAMING_SNAKE_CASE and each is classed `business` (never retried) or `transient` (retried within `max_attempts` when the tool is safe to retry).",
        "errors:\n  not-found: business\n",
        "errors:\n  CASE_NOT_FOUND: business\n";
    UnknownIdempotencyField = "E0119", Error, "idempotency key names an unknown input field",
        "`idempotency_key` lists the input fields whose values identify one business intent; each must be a declared input field.",
        "idempotency_key: [case]\n",
        "idempotency_key: [case_id]\n";
    WriteKeyOnReadTool = "E0120", Error, "write-only key on a read-only tool",
        "`effects`, `idempotency_key` and `approval` only mean something for write tools. On a `read_only` tool they suggest the risk class is wrong.",
        "risk: read_only\napproval: supervisor\n",
        "risk: read_only\n";
    MissingDescription = "W0101", Warning, "tool has no description",
        "Without a `description` the model sees only the tool's name. Describe the one business operation the tool performs.",
        "name: caseops_get_case_snapshot\n",
        "name: caseops_get_case_snapshot\ndescription: Read the current snapshot of the run's case.\n";
    TimeoutAboveCeiling = "W0102", Warning, "timeout above the agent's ceiling",
        "The tool's `timeout_seconds` is above the agent's `tool_timeout_ceiling_seconds`; the runtime uses the ceiling.",
        "timeout_seconds: 30   # ceiling is 8\n",
        "timeout_seconds: 8\n";
    InvalidIdentifier = "E0201", Error, "invalid identifier",
        "Agent, stage, scope and resource names are identifiers: snake_case for agents, stages and fields, PascalCase for the resource type, `area:verb` for scopes.",
        "stages: [Investigating]\n",
        "stages: [investigating]\n";
    UnknownCatalogTool = "E0202", Error, "catalog names an unknown tool",
        "The tenant catalog (`catalog` in `contracts/agent.yaml`) is an allowlist of tool names; each must have a contract in `contracts/tools/`.",
        "catalog: [caseops_get_case_snapshots]\n",
        "catalog: [caseops_get_case_snapshot]\n";
    BudgetOutOfRange = "E0203", Error, "budget out of range",
        "Budgets bound every run: `max_steps` 1..=100, `repeat_limit` 1..=10, `max_wall_clock_seconds` 1..=3600, `tool_timeout_ceiling_seconds` 1..=60, `max_no_new_evidence_steps` 1..=100, optional `max_tokens` and `max_cost_usd` above 0.",
        "budgets:\n  max_steps: 0\n",
        "budgets:\n  max_steps: 8\n";
    InvalidDecisions = "E0204", Error, "planner decision kinds are not the three the runtime knows",
        "A planner proposes exactly one of `tool_call`, `final` or `needs_human` per round; `decisions` must list exactly these.",
        "decisions: [tool_call, final, retry]\n",
        "decisions: [tool_call, final, needs_human]\n";
    InvalidFinalAnswer = "E0205", Error, "invalid final-answer schema",
        "The final answer has a `schema_version` such as `caseops.agent-result.v1` and at least an `outcome` enum field; its fields use the output field language.",
        "final_answer:\n  schema_version: v1\n",
        "final_answer:\n  schema_version: caseops.agent-result.v1\n  fields:\n    outcome: {type: enum, enum: [DONE]}\n";
    InvalidApiPath = "E0207", Error, "invalid run API path",
        "`resource.api_path` is the HTTP route a host serves to start a run on one resource (`POST`). It starts with `/`, holds the resource id field in braces exactly once, and its other segments are lowercase letters, digits, `-`, `_` and `.`. It may not shadow a route every host serves (`/v1/agent-runs/...`, `/health/...`, `/metrics`). Left out, it is `/v1/<type in lowercase>s/{<id_field>}/agent-runs`.",
        "resource:\n  type: Case\n  id_field: case_id\n  api_path: /v1/cases/{id}/runs\n",
        "resource:\n  type: Case\n  id_field: case_id\n  api_path: /v1/cases/{case_id}/agent-runs\n";
    InvalidCitedEvidence = "E0208", Error, "invalid cited-evidence field",
        "`final_answer.evidence.field` names the answer field that cites evidence: a `list of string` field of the final answer. The runtime accepts a final answer only if every reference it cites was returned as evidence by a succeeded tool call of the same run; `required: true` also asks for at least one.",
        "final_answer:\n  evidence: {field: summary}\n",
        "final_answer:\n  evidence: {field: evidence_refs, required: true}\n";
    DeclaredTwice = "E0206", Error, "name declared twice",
        "A stage, catalog entry, state or list value is declared more than once.",
        "stages: [investigating, investigating]\n",
        "stages: [investigating]\n";
    NotInCatalog = "W0201", Warning, "tool is not in the tenant catalog",
        "The tool has a contract but is missing from `catalog` in `contracts/agent.yaml`, so no run will ever see it.",
        "catalog: []\n",
        "catalog: [caseops_get_case_snapshot]\n";
    CedarParse = "E0401", Error, "cedar syntax error",
        "A policy file is not valid Cedar. The diagnostic points at the token where the Cedar parser stopped.",
        "permit (principal, action, resource) when { principal.scopes.contains(\"case:read\") }\n",
        "permit (principal, action, resource) when { principal.scopes.contains(\"case:read\") };\n";
    CedarValidation = "E0402", Error, "policy does not type-check against the generated schema",
        "Policies are validated with Cedar's strict validator against the schema generated from the contracts: entity types, the task principal's attributes, one action per tool and each action's typed context (`tool`, `risk`, `required_scope`, `stage`, `approval`, `arguments`). A misspelt attribute, an argument a tool does not have (for example after renaming it in the contract) or a comparison of the wrong types fails here.",
        "when { context.arguments.document == \"x\" }\n",
        "when { context.arguments.document_id == \"x\" }\n";
    ToolNeverPermitted = "W0403", Warning, "no policy ever permits this catalog tool",
        "`check` asks the compiled policies, with Cedar's authorizer, whether each catalog tool could be permitted for a task before any arguments exist: a task holding every scope the agent's tools require (and one holding only the tool's own scope), on its own resource in its own tenant, in each stage the tool is offered. That is the runtime's own question when it decides which tools a run sees. When every such request is denied outright, no run will ever see or call the tool: typically a forbid such as `context.risk != \"read_only\"` covers a new write tool, or no permit policy names its action or risk group. A policy that needs the model's arguments to decide counts as possibly permitting, so this is never a guess.",
        "@id(\"forbid-writes\")\n@reason(\"TOOL_RISK_NOT_ALLOWED\")\nforbid (principal, action, resource) when { context.risk != \"read_only\" };\n# and a catalog tool with `risk: reversible_write`\n",
        "@id(\"permit-document-requests\")\npermit (principal is CaseOps::Task, action == CaseOps::Action::\"caseops_request_missing_document\", resource is CaseOps::Case)\nwhen { resource == principal.resource && principal.scopes.contains(context.required_scope) };\n# and `forbid-writes` narrowed to irreversible writes\n";
    PermitNeverApplies = "W0404", Warning, "permit policy never applies",
        "Over the same requests as W0403 (every catalog tool, every stage it is offered in, a task on its own resource), this permit policy was satisfied by none: it permits nothing. Its action may name no catalog tool or risk group with a tool in it, its resource type may not be the agent's, or its conditions may contradict what a task always is. Not reported when some policy needs arguments to decide.",
        "@id(\"permit-irreversible\")\npermit (principal, action in CaseOps::Action::\"IrreversibleWrite\", resource);\n# and no irreversible tool in the catalog\n",
        "# remove the policy, or add the tool it is meant for to the catalog\n";
    CedarWarning = "W0401", Warning, "cedar validator warning",
        "Cedar's validator found something suspicious that is not an error, such as a policy that can never apply.",
        "permit (principal, action, resource) when { false };\n",
        "permit (principal, action, resource) when { principal.scopes.contains(context.required_scope) };\n";
    UnknownReason = "E0403", Error, "unknown deny reason",
        "`@reason` gives the reason code a denial reports. It must be one of `deny_reasons` in `contracts/agent.yaml`, so callers and dashboards only ever see declared codes.",
        "@reason(\"SCOPE_MISSING\")\n",
        "@reason(\"TOOL_SCOPE_MISSING\")\n";
    PolicyWithoutId = "E0404", Error, "policy without `@id`",
        "Every policy carries `@id(\"...\")`: ids name the determining policies of a decision in ledger rows and audit events, and must not change when policies are reordered.",
        "permit (principal, action, resource);\n",
        "@id(\"permit-read-only\")\npermit (principal, action, resource);\n";
    ForbidWithoutReason = "E0405", Error, "forbid policy without `@reason`",
        "A forbid policy says why it denies with `@reason(\"CODE\")`, so a denied tool call carries a machine-readable reason.",
        "@id(\"no-writes\")\nforbid (principal, action, resource) when { context.risk != \"read_only\" };\n",
        "@id(\"no-writes\")\n@reason(\"TOOL_RISK_NOT_ALLOWED\")\nforbid (principal, action, resource) when { context.risk != \"read_only\" };\n";
    DuplicatePolicyId = "E0406", Error, "duplicate policy id",
        "Two policies share one `@id`. Ids must be unique across all files in `policies/`.",
        "@id(\"a\") permit (principal, action, resource);\n@id(\"a\") forbid (principal, action, resource);\n",
        "@id(\"a\") permit (principal, action, resource);\n@id(\"b\") forbid (principal, action, resource);\n";
    CedarSchemaInvalid = "E0407", Error, "generated cedar schema is invalid",
        "The Cedar schema generated from the contracts was rejected by Cedar. This is a compiler bug.",
        "",
        "";
    NoPolicies = "E0408", Error, "no policies",
        "`policies/` holds no `.cedar` file. Without a permit policy every tool call is denied.",
        "policies/\n",
        "policies/caseops.cedar\n";
    InvalidScenario = "E0409", Error, "invalid authorization scenario",
        "An authorization scenario in `policies/tests/*.yaml` names an unknown tool, an undeclared reason, or arguments that do not fit the tool's context.",
        "action: caseops_get_case_snapshots\n",
        "action: caseops_get_case_snapshot\n";
    ApprovalBypassed = "E0410", Error, "a call that needs approval is permitted without one",
        "A tool that declares `approval` (every `irreversible_write` does) runs only after a person approved the exact call: the runtime asks Cedar with `context.approval == \"none\"` first and parks the run in `waiting_approval` when that is denied but an approved call would be permitted. If the policies permit the call without an approval, the gate is open and the approval is never asked for. `check` evaluates every such catalog tool for a task holding every scope, on its own resource, in each stage, with `approval` set to `\"none\"`; any permit is this error.",
        "@id(\"permit-writes\")\npermit (principal, action in CaseOps::Action::\"IrreversibleWrite\", resource);\n",
        "@id(\"forbid-unapproved-irreversible-writes\")\n@reason(\"APPROVAL_REQUIRED\")\nforbid (principal, action in CaseOps::Action::\"IrreversibleWrite\", resource)\nunless { context.approval == \"approved\" };\n";
    PolicyNotExercised = "W0402", Warning, "policy not exercised by any scenario",
        "`caseops-compile test` found a policy that no scenario's decision was determined by. Add a scenario that proves what the policy allows or denies.",
        "# no scenario hits forbid-writes\n",
        "- name: writes are denied\n  action: some_write_tool\n  expect: deny\n  reason: TOOL_RISK_NOT_ALLOWED\n";
    GeneratedDrift = "E0501", Error, "generated crate is out of date",
        "`generated/` is written only by `caseops-compile build`. A file there differs from what `build` would write now (a contract or policy changed without a rebuild, or a generated file was edited by hand), is missing, or is not a generated file. Run `caseops-compile build` and commit the sources and `generated/` together.",
        "# edited contracts/tools/x.yaml, committed without rebuilding\n",
        "caseops-compile build && git add contracts generated\n";
    UnknownState = "E0301", Error, "unknown state",
        "A transition, invariant or the initial state names a state that is neither in `states` nor in `terminal`.",
        "transitions:\n  planing: [tool_proposed]\n",
        "transitions:\n  planning: [tool_proposed]\n";
    TerminalHasTransition = "E0302", Error, "transition leaves a terminal state",
        "No transition leaves a terminal state: a completed, stopped, failed or needs-human run is final.",
        "transitions:\n  completed: [planning]\n",
        "# no transitions from completed\n";
    NoPathToTerminal = "E0303", Error, "state cannot reach a terminal state",
        "Every state must reach a terminal state, or a run could be stuck forever. The compiler searches the transition graph from each state.",
        "transitions:\n  observing: [observing]\n",
        "transitions:\n  observing: [planning, stopped]\n";
    InvariantViolated = "E0304", Error, "state-machine invariant violated",
        "A declared invariant does not hold for the transition table. For `must_pass` the compiler finds a path from `from` to `to` that avoids `through` and prints it.",
        "transitions:\n  tool_proposed: [tool_running]\n",
        "transitions:\n  tool_proposed: [tool_authorized]\n  tool_authorized: [tool_running]\n";
    RuntimeTransitionMissing = "E0305", Error, "transition the runtime performs is not in the table",
        "The runtime moves a run along a fixed set of transitions (planning a step, authorizing it, running it, recovering, stopping). Each must be legal in `contracts/state-machine.yaml`, or the runtime would be unable to apply it.",
        "transitions:\n  planning: [tool_proposed]\n",
        "transitions:\n  planning: [tool_proposed, completed, needs_human, stopped, failed]\n";
    MissingState = "E0306", Error, "state the runtime needs is not declared",
        "The runtime drives the states `created planning tool_proposed tool_authorized tool_running observing` and the terminals `completed needs_human stopped failed`; each must be declared, terminals under `terminal`.",
        "states: [created, planning]\n",
        "states: [created, planning, tool_proposed, tool_authorized, tool_running, observing]\n";
    UnreachableState = "W0301", Warning, "state is unreachable",
        "No path from the initial state reaches this state, so it is dead weight in the table.",
        "states: [created, planning, archived]\n",
        "states: [created, planning]\n";
}

impl Code {
    pub fn parse(text: &str) -> Option<Code> {
        let upper = text.trim().to_ascii_uppercase();
        Code::ALL.iter().copied().find(|c| c.as_str() == upper)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_prefixed_by_severity() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.as_str()), "{} twice", code.as_str());
            let prefix = match code.severity() {
                Severity::Error => 'E',
                Severity::Warning => 'W',
            };
            assert!(code.as_str().starts_with(prefix));
        }
    }

    #[test]
    fn every_code_parses_back_case_insensitively() {
        for code in Code::ALL {
            assert_eq!(Code::parse(&code.as_str().to_lowercase()), Some(*code));
        }
        assert_eq!(Code::parse("E9999"), None);
    }
}
