//! Types and constants several parts of the harness share: configuration values (queue
//! modes, retry, compaction, approval policy), what a tool can do for the approval policy, and
//! the text of an aborted call. A leaf: it imports nothing from this crate, so the agent, the
//! settings loader, the approval gate and compaction can all use it without depending on
//! each other.

use pi_ai::RetryPolicy;

/// How many queued messages one check delivers (Pi's `steeringMode` / `followUpMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueMode {
    /// One message per check (Pi's default).
    #[default]
    OneAtATime,
    /// Every queued message at once.
    All,
}

/// Automatic retry of transient provider failures: on/off (Pi's `retry.enabled`) and the
/// model layer's [`RetryPolicy`] (classes, backoff with jitter, `Retry-After`, never on
/// context overflow).
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySettings {
    pub enabled: bool,
    pub policy: RetryPolicy,
    /// `retry.provider.timeoutMs`: the longest wait for a response's headers and the longest
    /// silence inside its body ([`pi_ai::StreamOptions::timeout`]); `None`: the model layer's
    /// defaults (10 min to the headers, 5 min of silence). Running out is a retryable error.
    pub provider_timeout: Option<std::time::Duration>,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            enabled: true,
            policy: RetryPolicy::default(),
            provider_timeout: None,
        }
    }
}

/// Pi's compaction settings (`settings.json` `compaction`): whether automatic compaction runs,
/// the tokens reserved for the answer and the summary, the recent tokens kept raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    pub enabled: bool,
    pub reserve_tokens: u64,
    pub keep_recent_tokens: u64,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            enabled: true,
            reserve_tokens: DEFAULT_RESERVE_TOKENS,
            keep_recent_tokens: DEFAULT_KEEP_RECENT_TOKENS,
        }
    }
}

/// Pi's defaults: tokens reserved for the answer and the summary.
pub const DEFAULT_RESERVE_TOKENS: u64 = 16_384;
/// Pi's default of recent context kept raw.
pub const DEFAULT_KEEP_RECENT_TOKENS: u64 = 20_000;
/// `approvalPolicy` (a pi-lsp key; Pi has none): which tool calls need the user's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// `"ask"`: every mutating tool call (edits and bash) asks first.
    Ask,
    /// `"auto-edit"`: file edits are applied without asking; bash asks.
    AutoEdit,
    /// `"approve-all"`: nothing asks (Pi's behaviour).
    ApproveAll,
}

impl ApprovalPolicy {
    /// Parses the setting's value (`ask`, `auto-edit`, `approve-all`).
    pub fn parse(s: &str) -> Option<ApprovalPolicy> {
        match s {
            "ask" => Some(ApprovalPolicy::Ask),
            "auto-edit" => Some(ApprovalPolicy::AutoEdit),
            "approve-all" => Some(ApprovalPolicy::ApproveAll),
            _ => None,
        }
    }
}

/// What a tool can do, for the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Reads only (`read`, `grep`, `find`, `ls`).
    ReadOnly,
    /// Changes files and asks with its proposed change ([`Gate::approve_change`]): `edit`,
    /// `write`.
    Edit,
    /// Anything else (`bash`, extension and editor-side tools).
    Execute,
}

/// Text of the result given to calls stopped because the run was aborted while they ran.
pub const ABORTED_TEXT: &str = "Tool execution was aborted by the user.";

/// Text of the result Pi 1.6 gives the calls of a batch that had not started when the run was
/// aborted (`pi-agent-core`'s `createErrorToolResult("Operation aborted")`, #9986): every call
/// keeps a paired result.
pub const OPERATION_ABORTED_TEXT: &str = "Operation aborted";
