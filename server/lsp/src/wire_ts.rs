//! The TypeScript declarations of the `agent/*` wire, generated from the Rust types (ts-rs,
//! derived under `cfg(test)` only, so the server binary carries none of it) into
//! `vscode-extension/src/shared/wire.ts`. The test below is the drift check: it regenerates the
//! file and fails when the checked-in one differs; `PI_WIRE_TS_WRITE=1 cargo test -p pi-lsp
//! --lib wire_ts` writes it.
//!
//! Types of other crates (pi-core's events, pi-ai's content blocks…) carry no derive yet: their
//! fields are declared `unknown` (string enums: `string`) by `ts(type = …)` on the field, so a
//! client narrows them instead of trusting an `any`.

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use ts_rs::{Config, TS};

    use crate::methods::commands::{
        CommandInfo, CommandLocation, CommandSource, CommandsParams, CommandsResult,
    };
    use crate::methods::history::{HistoryParams, HistoryResult};
    use crate::methods::queue::{
        QueueEditParams, QueueEditResult, QueueRemoveParams, QueueRemoveResult,
    };
    use crate::protocol::*;

    /// One declaration per type, in this order (names are the Rust ones).
    fn declarations(cfg: &Config) -> Vec<String> {
        macro_rules! decls {
            ($($t:ty),* $(,)?) => { vec![$(format!("export {}", <$t as TS>::decl(cfg))),*] };
        }
        decls![
            // agent/prompt
            StreamingBehavior,
            ImageKind,
            ImageInput,
            PromptParams,
            PromptResult,
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
        ]
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
