//! The TypeScript declarations of the `agent/*` wire, generated from the Rust types (ts-rs,
//! derived under `cfg(test)` only, so the server binary carries none of it) into
//! `vscode-extension/src/shared/wire.ts`. The test below is the drift check: it regenerates the
//! file and fails when the checked-in one differs; `PI_WIRE_TS_WRITE=1 cargo test -p pi-lsp
//! --lib wire_ts` writes it.
//!
//! Types of pi-core and pi-ai (events, messages and content blocks, usage, queue, branch,
//! rewind and abort outcomes…) derive `TS` under their crates' `ts` feature, which only this
//! crate's dev-dependencies turn on (derive attributes only: release builds carry none of it).
//! `unknown` is left where the value is open: tool arguments and details, extension payloads,
//! session entries as stored. Mirrors declared here, each checked against the server's own
//! values by a test: `agent/plan`'s params (they flatten pi-core's `PlanState`, which a field
//! attribute cannot describe) and the custom message of an extension (`message_start` /
//! `message_end` carry it as a JSON value).

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use ts_rs::{Config, TS};

    use crate::methods::commands::{
        CommandInfo, CommandLocation, CommandSource, CommandsParams, CommandsResult,
    };
    use crate::methods::history::{HistoryParams, HistoryResult};
    use crate::methods::mcp::ServerParams;
    use crate::methods::plan::{PlanParams, PlanSetParams};
    use crate::methods::queue::{
        QueueEditParams, QueueEditResult, QueueRemoveParams, QueueRemoveResult,
    };
    use crate::methods::resume::ContinueResult;
    use crate::methods::rewind::ChangesResult;
    use crate::methods::rewind::RewindParams;
    use crate::protocol::*;
    use pi_ai::models::{ModelCost, ThinkingLevel};
    use pi_ai::{
        Api, AssistantEvent, AssistantMessage, ContentBlock, Cost, ImageContent, Message,
        StopReason, TextContent, ThinkingContent, ToolCall, ToolResultMessage, Usage, UserContent,
        UserMessage,
    };
    use pi_core::agent::{
        AgentEvent, CompactionReason, Delivery, ReplacedImage, SummarySource, ToolOutput,
    };
    use pi_core::approval::{ApprovalPolicy, Rule};
    use pi_core::compaction::CompactionResult;
    use pi_core::harness::queue::{QueueState, StoppedProcess};
    use pi_core::harness::rewind::{Change, FileOutcome, FileStatus, RewindOutcome};
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    /// One declaration per type, in this order (names are the Rust ones).
    fn declarations(cfg: &Config) -> Vec<String> {
        macro_rules! decls {
            ($($t:ty),* $(,)?) => { vec![$(format!("export {}", <$t as TS>::decl(cfg))),*] };
        }
        decls![
            // pi-ai: messages, content blocks, usage, the assistant's stream events, models
            TextContent,
            ThinkingContent,
            ImageContent,
            ToolCall,
            ContentBlock,
            UserContent,
            Cost,
            Usage,
            StopReason,
            UserMessage,
            AssistantMessage,
            ToolResultMessage,
            Message,
            AssistantEvent,
            Api,
            ModelCost,
            ThinkingLevel,
            // pi-core: the run's events, queue and usage, outcomes
            CustomMessageWire,
            ToolOutput,
            ReplacedImage,
            CompactionReason,
            CompactionResult,
            SummarySource,
            AgentEvent,
            Delivery,
            QueueState,
            QueuedMessage,
            UsageTotals,
            AttentionReason,
            pi_core::extension::CommandInfo,
            StoppedToolCall,
            StoppedProcess,
            AppliedEdit,
            AbortResult,
            BashResult,
            SessionBranchResult,
            ApprovalPolicy,
            Rule,
            Change,
            ChangesResult,
            FileStatus,
            FileOutcome,
            RewindOutcome,
            // agent/mcp/*
            ServerParams,
            // agent/prompt
            StreamingBehavior,
            ImageKind,
            ImageInput,
            PromptParams,
            PromptResult,
            PromptDisposition,
            // agent/abort, agent/compact, sessions
            AbortParams,
            CompactParams,
            CompactResult,
            SessionParams,
            // notifications
            AgentEventParams,
            QueueUpdateParams,
            UsageParams,
            AttentionParams,
            SaveDocumentParams,
            SaveDocumentResult,
            // agent/state, models
            ModelInfo,
            QueueModeName,
            SessionState,
            ModelListResult,
            ModelSetParams,
            ModelSetResult,
            ThinkingSetParams,
            ThinkingResult,
            // sessions
            SessionNewParams,
            SessionInfo,
            SessionListResult,
            SessionOpenParams,
            SessionForkParams,
            SessionForkResult,
            SessionBranchParams,
            RewindParams,
            TreeEntry,
            SessionTreeResult,
            SessionLabelParams,
            SessionLabelResult,
            SessionNameParams,
            SessionNameResult,
            ContextUsage,
            StatsTokens,
            SessionStatsResult,
            ExportFormat,
            SessionExportParams,
            SessionExportResult,
            MessagesResult,
            HistoryParams,
            HistoryResult,
            // queue
            QueueEditParams,
            QueueEditResult,
            QueueRemoveParams,
            QueueRemoveResult,
            // commands
            CommandSource,
            CommandLocation,
            CommandInfo,
            CommandsParams,
            CommandsResult,
            ExtensionCommandsResult,
            // agent/continue
            ContinueResult,
            // agent/plan (notification), agent/plan/get, agent/plan/set
            PlanModeWire,
            TodoStatusWire,
            TodoPriorityWire,
            TodoItemWire,
            PlanParamsWire,
            PlanSetParams,
        ]
    }

    /// An extension's custom message as `message_start` / `message_end` carry it (Pi's custom
    /// message; pi-core builds it as a JSON value).
    #[derive(Debug, Serialize, Deserialize, TS)]
    #[ts(rename = "CustomMessage")]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct CustomMessageWire {
        #[ts(type = "\"custom\"")]
        role: CustomRole,
        custom_type: String,
        #[ts(type = "string | Array<ContentBlock>")]
        content: Value,
        display: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional, type = "unknown")]
        details: Option<Value>,
        timestamp: i64,
    }

    /// The role of [`CustomMessageWire`].
    #[derive(Debug, Serialize, Deserialize, TS)]
    #[serde(rename_all = "camelCase")]
    enum CustomRole {
        Custom,
    }

    /// Mirror of pi-core's `PlanMode`.
    #[derive(Debug, Serialize, Deserialize, TS)]
    #[ts(rename = "PlanMode")]
    #[serde(rename_all = "lowercase")]
    enum PlanModeWire {
        Off,
        Plan,
        Executing,
    }

    /// Mirror of pi-core's `TodoStatus` (ACP's `PlanEntryStatus` names).
    #[derive(Debug, Serialize, Deserialize, TS)]
    #[ts(rename = "TodoStatus")]
    #[serde(rename_all = "snake_case")]
    enum TodoStatusWire {
        Pending,
        InProgress,
        Completed,
    }

    /// Mirror of pi-core's `TodoPriority` (ACP's `PlanEntryPriority` names).
    #[derive(Debug, Serialize, Deserialize, TS)]
    #[ts(rename = "TodoPriority")]
    #[serde(rename_all = "lowercase")]
    enum TodoPriorityWire {
        High,
        Medium,
        Low,
    }

    /// Mirror of pi-core's `TodoItem`.
    #[derive(Debug, Serialize, Deserialize, TS)]
    #[ts(rename = "TodoItem")]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct TodoItemWire {
        id: u64,
        text: String,
        done: bool,
        status: TodoStatusWire,
        priority: TodoPriorityWire,
    }

    /// Mirror of [`PlanParams`] with pi-core's `PlanState` flattened: `agent/plan` params and
    /// the `agent/plan/get` / `agent/plan/set` result.
    #[derive(Debug, Serialize, Deserialize, TS)]
    #[ts(rename = "PlanParams")]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct PlanParamsWire {
        session_id: String,
        available: bool,
        mode: PlanModeWire,
        todos: Vec<TodoItemWire>,
        next_id: u64,
        completed: usize,
        total: usize,
        plan_mode_available: bool,
    }

    #[test]
    fn the_plan_mirror_carries_the_servers_plan_params_unchanged() {
        use pi_core::extension::plan::{PlanMode, PlanState, TodoItem, TodoPriority, TodoStatus};
        let item = |id, status, priority| TodoItem {
            id,
            text: format!("step {id}"),
            done: status == TodoStatus::Completed,
            status,
            priority,
        };
        for mode in [PlanMode::Off, PlanMode::Plan, PlanMode::Executing] {
            let real = PlanParams {
                session_id: "s1".into(),
                available: true,
                state: PlanState {
                    mode,
                    todos: vec![
                        item(1, TodoStatus::Completed, TodoPriority::High),
                        item(2, TodoStatus::InProgress, TodoPriority::Medium),
                        item(3, TodoStatus::Pending, TodoPriority::Low),
                    ],
                    next_id: 4,
                    completed: 1,
                    total: 3,
                    plan_mode_available: true,
                },
            };
            let sent = serde_json::to_value(&real).unwrap();
            let mirror: PlanParamsWire = serde_json::from_value(sent.clone()).unwrap();
            assert_eq!(serde_json::to_value(&mirror).unwrap(), sent);
        }
    }

    #[test]
    fn the_custom_message_mirror_carries_an_extensions_message_unchanged() {
        use pi_core::session::EntryData;
        for details in [None, Some(serde_json::json!({"plan": [1, 2]}))] {
            let entry = EntryData::CustomMessage {
                custom_type: "plan-mode-context".into(),
                content: serde_json::json!([{"type": "text", "text": "hidden"}]),
                display: false,
                details,
            };
            // As pi-core's session events build it: the entry's fields, `role`, `timestamp`.
            let mut sent = serde_json::to_value(&entry).unwrap();
            let o = sent.as_object_mut().unwrap();
            o.remove("type");
            o.insert("role".into(), "custom".into());
            o.insert("timestamp".into(), 1_700_000_000_000_i64.into());
            let mirror: CustomMessageWire = serde_json::from_value(sent.clone()).unwrap();
            assert_eq!(serde_json::to_value(&mirror).unwrap(), sent);
        }
    }

    fn generated() -> String {
        // u64 counts and sizes are JSON numbers (serde_json writes them so).
        let cfg = Config::new().with_large_int("number");
        let mut out = String::from(
            "// Generated from the Rust types of the `agent/*` wire (server/lsp/src/protocol.rs and\n\
             // server/lsp/src/methods/*.rs) by server/lsp/src/wire_ts.rs. Do not edit: change the\n\
             // Rust type, then run `PI_WIRE_TS_WRITE=1 cargo test -p pi-lsp --lib wire_ts`.\n\
             // `cargo test` fails while this file differs from what the types generate.\n\n",
        );
        for d in declarations(&cfg) {
            out.push_str(d.trim_end());
            out.push_str("\n\n");
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    }

    fn wire_ts_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../vscode-extension/src/shared/wire.ts")
    }

    #[test]
    fn wire_ts_is_generated_from_the_rust_types() {
        let want = generated();
        let path = wire_ts_path();
        if std::env::var("PI_WIRE_TS_WRITE").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} differs from the Rust wire types: run `PI_WIRE_TS_WRITE=1 cargo test -p pi-lsp --lib wire_ts` and commit it",
            path.display()
        );
    }

    #[test]
    fn every_type_a_declaration_names_is_declared() {
        let text = generated();
        let declared: std::collections::BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("export type "))
            .filter_map(|l| l.split([' ', '<']).next())
            .collect();
        // The code without its comments (`// …` lines, `/** … */` doc blocks) and string types.
        let mut code = String::new();
        let mut rest = text.as_str();
        while let Some(start) = rest.find("/**") {
            code.push_str(&rest[..start]);
            rest = rest[start..]
                .split_once("*/")
                .map_or("", |(_, after)| after);
        }
        code.push_str(rest);
        let code: String = code
            .lines()
            .filter(|l| !l.starts_with("//"))
            .flat_map(|l| l.split('"').step_by(2))
            .collect::<Vec<_>>()
            .join(" ");
        // A name used in a declaration (an identifier starting upper-case) must be declared.
        let builtin = ["Array", "Record", "Partial"];
        for word in code.split(|c: char| !c.is_ascii_alphanumeric() && c != '_') {
            if word.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && !builtin.contains(&word)
            {
                assert!(
                    declared.contains(word),
                    "{word} is used in wire.ts but not declared"
                );
            }
        }
    }
}
