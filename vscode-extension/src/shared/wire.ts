// Generated from the Rust types of the `agent/*` wire (server/lsp/src/protocol.rs and
// server/lsp/src/methods/*.rs) by server/lsp/src/wire_ts.rs. Do not edit: change the
// Rust type, then run `PI_WIRE_TS_WRITE=1 cargo test -p pi-lsp --lib wire_ts`.
// `cargo test` fails while this file differs from what the types generate.

export type TextContent = { text: string, 
/**
 * Provider signature of the text block (OpenAI Responses); omitted when absent.
 */
textSignature?: string | null, };

export type ThinkingContent = { thinking: string, thinkingSignature?: string | null, 
/**
 * True for Anthropic `redacted_thinking` (the signature holds the opaque payload).
 */
redacted?: boolean, };

export type ImageContent = { 
/**
 * The base64 text, shared: every copy of a history (the agent's, a request's view, the
 * request cache's) holds the one text, not a copy of megabytes (case SESS-05).
 */
data: string, mimeType: string, };

export type ToolCall = { id: string, name: string, 
/**
 * Parsed JSON arguments; `{}` when the model's text did not parse.
 */
arguments: unknown, 
/**
 * The streamed argument text when it did not parse as JSON (cut by the output limit,
 * case LEN-01), kept for the error the loop reports. Never sent to a model: requests carry
 * the replay-safe `arguments` only. Omitted when absent (Pi writes no such field).
 */
rawArguments?: string | null, };

export type ContentBlock = { "type": "text" } & TextContent | { "type": "thinking" } & ThinkingContent | { "type": "image" } & ImageContent | { "type": "toolCall" } & ToolCall;

export type UserContent = string | Array<ContentBlock>;

export type Cost = { input: number, output: number, cacheRead: number, cacheWrite: number, total: number, 
/**
 * Pi 1.6's `totalFromProvider`: `false` once the cost was computed from the model's rates
 * (pi-ai's `calculateCost`, on every response that reported usage), `true` when `total` is
 * the amount the provider billed (OpenRouter's reported `cost`); absent on a response that
 * reported no usage, as Pi writes it.
 */
totalFromProvider?: boolean | null, };

export type Usage = { input: number, output: number, cacheRead: number, cacheWrite: number, 
/**
 * Cache writes with a one-hour lifetime, part of `cache_write` (Pi 1.6's `cacheWrite1h`:
 * Anthropic's `cache_creation.ephemeral_1h_input_tokens`, billed at twice the input rate);
 * absent for the other wire formats, as Pi writes it.
 */
cacheWrite1h?: number | null, 
/**
 * Reasoning tokens, part of `output` (Pi 1.6's `reasoning`: chat completions'
 * `completion_tokens_details.reasoning_tokens`, Responses' `output_tokens_details.
 * reasoning_tokens`, 0 when not reported; Anthropic's `output_tokens_details.
 * thinking_tokens` only when reported); absent where Pi writes none.
 */
reasoning?: number | null, totalTokens: number, cost: Cost, };

export type StopReason = "stop" | "length" | "toolUse" | "error" | "aborted" | "pending";

export type UserMessage = { content: UserContent, timestamp: number, };

export type AssistantMessage = { content: Array<ContentBlock>, api: string, provider: string, model: string, responseId?: string | null, 
/**
 * The model name the stream reported when it differs from `model` (Pi's `responseModel`,
 * set by the chat-completions adapter from the first chunk naming another model).
 */
responseModel?: string | null, usage: Usage, stopReason: StopReason, 
/**
 * The provider's own stop reason before it was mapped to `stop_reason` (Pi 1.6's
 * `rawStopReason`): chat completions' `finish_reason`, Anthropic's `stop_reason`,
 * Responses' `status` (`incomplete.<reason>` with its `incomplete_details.reason`).
 * Absent when the stream named none.
 */
rawStopReason?: string | null, errorMessage?: string | null, timestamp: number, 
/**
 * The thinking level the request asked for (`off`, `minimal`, …, `max`): Pi 1.6's
 * `thinkingLevel`, which its agent loop stamps on the finished message. Absent on a
 * streamed message's start and in files written without it.
 */
thinkingLevel?: string | null, 
/**
 * The effort the provider was told in the conversation itself (Pi 1.6's
 * `providerThinkingLevel`): an `openai-responses` model with
 * `compat.supportsMidConvoEffort` stores the `configuration_update` effort it was sent,
 * replayed before this answer's items to the same model. Absent otherwise. (Boxed: a
 * `Message`'s variants stay within 200 bytes of each other.)
 */
providerThinkingLevel?: string | null, };

export type ToolResultMessage = { toolCallId: string, 
/**
 * Pi always writes it; foreign or hand-made files may not (read as "").
 */
toolName: string, content: Array<ContentBlock>, details?: unknown, isError: boolean, timestamp: number, };

export type Message = { "role": "user" } & UserMessage | { "role": "assistant" } & AssistantMessage | { "role": "toolResult" } & ToolResultMessage;

export type AssistantEvent = { "type": "start" } | { "type": "text_start", contentIndex: number, } | { "type": "text_delta", contentIndex: number, delta: string, } | { "type": "text_end", contentIndex: number, content: string, } | { "type": "thinking_start", contentIndex: number, } | { "type": "thinking_delta", contentIndex: number, delta: string, } | { "type": "thinking_end", contentIndex: number, content: string, } | { "type": "toolcall_start", contentIndex: number, id: string, name: string, } | { "type": "toolcall_delta", contentIndex: number, delta: string, } | { "type": "toolcall_end", contentIndex: number, toolCall: ToolCall, } | { "type": "done", reason: StopReason, message: AssistantMessage, } | { "type": "error", reason: StopReason, error: AssistantMessage, };

export type Api = "anthropic-messages" | "openai-completions" | "openai-responses" | "scripted";

export type ModelCost = { input: number, output: number, cacheRead: number, cacheWrite: number, };

export type ThinkingLevel = "off" | "minimal" | "low" | "medium" | "high" | "xhigh" | "max";

export type CustomMessage = { role: "custom", customType: string, content: string | Array<ContentBlock>, display: boolean, details?: unknown, timestamp: number, };

export type ToolOutput = { content: Array<ContentBlock>, 
/**
 * The tool's own details (each tool's shape; extension tools' are open).
 */
details?: unknown, 
/**
 * Set by the tool (or the after hook), never by the model: when every result of a batch
 * has it, the loop does not request another response on its own.
 */
terminate?: boolean, 
/**
 * Pi 1.6's `structuredContent`: the result for programmatic callers (`bash`: `{output,
 * truncated, full_output_path?, exit_code, wall_time_seconds}`, `read`: the text, or
 * `{type: "image", data, mimeType, note}`; `core/tools/bash.js`, `read.js`). Sent with
 * `tool_execution_end`'s `result`, never stored (Pi 1.6's `createToolResultMessage`
 * leaves it out); dropped when the after hook replaces the content (Pi's
 * `finalizeExecutedToolCall`).
 */
structuredContent?: unknown, 
/**
 * A result the tool returned marked as failed (Pi 1.6's `isError: true` on a returned
 * result, not a thrown error: `bash`'s non-zero exit, [`ToolError::structured_content`]):
 * the call's result is an error result, and `tool_execution_end`'s `result` says
 * `isError: true` as Pi's does. Not stored.
 */
isError?: boolean, };

export type ReplacedImage = { hash: string, mimeType: string, note: string, };

export type CompactionReason = "threshold" | "overflow" | "manual";

export type CompactionResult = { summary: string, firstKeptEntryId: string, tokensBefore: number, 
/**
 * Pi 1.6: tokens of the context rebuilt after the compaction, estimated as Pi estimates
 * (`estimateMessagesTokens`: characters / 4 per message, not a provider's count).
 */
estimatedTokensAfter?: number | null, 
/**
 * Pi 1.6: the usage of the summary requests (written on the `compaction` entry).
 */
usage?: Usage | null, 
/**
 * `{readFiles, modifiedFiles}`.
 */
details: { readFiles: Array<string>, modifiedFiles: Array<string> }, };

export type SummarySource = "compaction" | "branchSummary";

export type AgentEvent = { "type": "agent_start" } | { "type": "turn_start" } | { "type": "message_start", message: Message, } | { "type": "message_update", assistantMessageEvent: AssistantEvent, } | { "type": "message_end", message: Message, } | { "type": "message_start", message: CustomMessage, } | { "type": "message_end", message: CustomMessage, } | { "type": "message_start", message: unknown, } | { "type": "message_end", message: unknown, } | { "type": "tool_execution_start", toolCallId: string, toolName: string, args: unknown, } | { "type": "tool_execution_update", toolCallId: string, toolName: string, args: unknown, partialResult: ToolOutput, } | { "type": "tool_execution_end", toolCallId: string, toolName: string, result: ToolOutput, isError: boolean, durationMs?: number | null, } | { "type": "turn_end", message: Message, toolResults: Array<{ role: "toolResult" } & ToolResultMessage>, } | { "type": "agent_end", messages: Array<Message>, willRetry: boolean, } | { "type": "agent_settled", aborted: boolean, } | { "type": "auto_retry_start", attempt: number, maxAttempts: number, delayMs: number, errorMessage: string, } | { "type": "summarization_retry_scheduled", attempt: number, maxAttempts: number, delayMs: number, errorMessage: string, } | { "type": "summarization_retry_attempt_start", source: SummarySource, reason?: CompactionReason | null, } | { "type": "summarization_retry_finished" } | { "type": "auto_retry_end", success: boolean, attempt: number, finalError?: string | null, } | { "type": "images_replaced", images: Array<ReplacedImage>, } | { "type": "attempt_left_out" } | { "type": "entry_appended", entry: unknown, } | { "type": "compaction_start", reason: CompactionReason, } | { "type": "compaction_end", reason: CompactionReason, 
/**
 * Left out when none, as Pi 1.6 leaves out an `undefined` result.
 */
result?: CompactionResult | null, aborted: boolean, willRetry: boolean, errorMessage?: string | null, } | { "type": "extension_error", extensionPath: string, event: string, error: string, };

export type Delivery = "steer" | "followUp" | "nextTurn";

export type QueueState = "queued" | "delivered" | "consumed" | "dropped" | "removed";

export type QueuedMessage = { queueId: string, delivery: Delivery, 
/**
 * The message's text (images are not repeated).
 */
text: string, };

export type UsageTotals = { input: number, output: number, cacheRead: number, cacheWrite: number, totalTokens: number, 
/**
 * US dollars at the model's per-million-token prices.
 */
cost: number, };

export type AttentionReason = "finished" | "failed" | "permission" | "question";

export type ExtensionCommandInfo = { 
/**
 * Invoked as `/name args`.
 */
name: string, description?: string | null, 
/**
 * Always `extension`.
 */
source: string, 
/**
 * The extension's path, `<builtin:NAME>` for built-ins.
 */
path: string, };

export type StoppedToolCall = { toolCallId: string, toolName: string, args: unknown, };

export type StoppedProcess = { toolCallId: string, command: string, };

export type AppliedEdit = { toolCallId: string, toolName: string, 
/**
 * The path as the tool received it (relative to the workspace root unless absolute).
 */
path: string, };

export type AbortReport = { 
/**
 * True when a run was active and has been told to stop.
 */
aborted: boolean, 
/**
 * The run that was stopped.
 */
runId?: string | null, 
/**
 * Tool calls that were executing when the abort arrived (each got an error result).
 */
stoppedToolCalls: Array<StoppedToolCall>, 
/**
 * Shell commands (`bash` tool calls) whose process group was killed.
 */
stoppedProcesses: Array<StoppedProcess>, 
/**
 * Edits the run had already applied (they stay applied; undo them in the editor).
 */
appliedEdits: Array<AppliedEdit>, 
/**
 * Edits sent to the editor that it had not answered when the run stopped: each may
 * still be applied, and is recorded in the session when the editor answers (a late
 * result, [`crate::harness::Notice::LateResult`]). Left out when empty.
 */
pendingEdits?: Array<AppliedEdit>, 
/**
 * Steering / follow-up / next-turn messages still queued: they go with the next prompt
 * unless the queue is cleared.
 */
queuedMessages: Array<QueuedMessage>, };

export type BashOutcome = { 
/**
 * The output's tail (Pi's limits), stdout and stderr merged.
 */
output: string, 
/**
 * Absent when killed by a signal or cancelled.
 */
exitCode: number | null, cancelled: boolean, truncated: boolean, fullOutputPath?: string | null, 
/**
 * The `bashExecution` entry, when written at once (the session was idle).
 */
entryId?: string | null, 
/**
 * When a run was active: the entry waits for it to end (in the context: queued for the
 * next prompt under this id).
 */
queueId?: string | null, };

export type BranchOutcome = { leafId: string | null, summaryEntryId?: string | null, summary?: string | null, 
/**
 * Text of the user message navigated to, for the editor's input.
 */
editorText?: string | null, messageCount: number, };

export type ApprovalPolicy = "ask" | "auto-edit" | "approve-all";

export type Rule = { 
/**
 * The tool, e.g. `edit` or `bash`.
 */
tool: string, 
/**
 * For `bash`: the command prefix (whole words) the rule allows.
 */
commandPrefix?: string | null, };

export type Change = { 
/**
 * The tool call that made it.
 */
toolCallId: string, 
/**
 * `edit` or `write`.
 */
toolName: string, 
/**
 * The file as tools show it: relative to the workspace root inside it, else absolute.
 */
path: string, 
/**
 * The file, absolute.
 */
absolutePath: string, 
/**
 * The entry of the tool result.
 */
entryId: string, 
/**
 * Unified diff of the change (`details.unifiedDiff`; long lines clipped, SESSX-03), or
 * `""` when the result has none.
 */
diff: string, 
/**
 * `xxh3:<16 hex>` of the text before; `null` when the change created the file or was
 * recorded without hashes.
 */
hashBefore: string | null, 
/**
 * `xxh3:<16 hex>` of the text after; `null` when recorded without hashes.
 */
hashAfter: string | null, 
/**
 * The change created the file.
 */
created: boolean, };

export type ChangesResult = { 
/**
 * The agent's changes on the active branch, oldest first
 * ([`pi_core::harness::rewind::Change`]).
 */
changes: Array<Change>, };

export type FileStatus = "reverted" | "reapplied" | "refused" | "unchanged";

export type FileOutcome = { 
/**
 * As in [`Change::path`].
 */
path: string, status: FileStatus, 
/**
 * Why a file was refused.
 */
reason?: string | null, };

export type RewindOutcome = { 
/**
 * The leaf before the rewind: rewinding to it undoes this rewind.
 */
previousLeafId: string | null, 
/**
 * The leaf now (the rewind's `custom` entry, see the module docs).
 */
leafId: string | null, 
/**
 * Every file the agent changed between the two positions, in the order first changed.
 */
files: Array<FileOutcome>, };

export type McpServerParams = { server: string, exposure?: string, };

export type StreamingBehavior = "steer" | "followUp";

export type ImageKind = "image";

export type ImageInput = { type: ImageKind, data: string, mimeType: string, };

export type PromptParams = { 
/**
 * The user's message.
 */
text: string, 
/**
 * Images sent with the text.
 */
images?: Array<ImageInput> | null, 
/**
 * Continue this session (in memory, or its file in `.pi/sessions/`); a new one when absent.
 */
sessionId?: string | null, 
/**
 * `provider/id`; overrides every other model choice for this session from now on.
 */
model?: string | null, 
/**
 * Required while a run is active; otherwise ignored.
 */
streamingBehavior?: StreamingBehavior | null, };

export type PromptResult = { sessionId: string, 
/**
 * The run the prompt started, or the active run it was queued into.
 */
runId: string, 
/**
 * True when the prompt was queued into an active run (steer / followUp).
 */
queued: boolean, 
/**
 * The queued message's id in `agent/queueUpdate` notifications (when `queued`).
 */
queueId?: string | null, 
/**
 * The extension command the text invoked (`/name args`); then no run started and
 * `runId` is empty. A failing command is reported as an `extension_error` event.
 */
command?: string | null, 
/**
 * What happened to the prompt, as Pi 1.6's RPC `prompt` reports it (`data.disposition`).
 */
disposition: PromptDisposition, };

export type PromptDisposition = "started" | "queued" | "handled";

export type AbortParams = { sessionId: string, };

export type CompactParams = { sessionId: string, 
/**
 * Extra focus for the summary (Pi's `/compact <instructions>`); it reaches every summary
 * request (case CMP-07).
 */
instructions?: string | null, };

export type CompactResult = CompactionResult;

export type SessionParams = { sessionId: string, };

export type AgentEventParams = { sessionId: string, runId: string, 
/**
 * This notification's number within the session: 1, 2, 3… one more for each
 * `agent/event` of the session. `agent/messages` answers with the last one its
 * `streamingMessage` and `messages` include.
 */
seq: number, event: AgentEvent, 
/**
 * `true` (else absent) when the event's entry could not be written to the session file
 * (a full disk, a file-size limit): the session keeps it in memory and writes it, before
 * anything else, once the file takes writes again; `window/showMessage` and
 * `agent/attention` `failed` say the session stopped saving.
 */
unsaved?: boolean, };

export type QueueUpdateParams = { sessionId: string, queueId: string, delivery: Delivery, state: QueueState, text: string, 
/**
 * Texts of the steering messages still waiting, oldest first (Pi's `queue_update`).
 */
steering: Array<string>, 
/**
 * Texts of the follow-up messages still waiting, oldest first.
 */
followUp: Array<string>, };

export type UsageParams = { sessionId: string, runId: string, 
/**
 * This response (turn).
 */
turn: UsageTotals, 
/**
 * Every response stored in the session file so far, this one included (abandoned
 * branches too: they were paid for).
 */
session: UsageTotals, 
/**
 * Tokens of the context this response saw plus what it wrote.
 */
contextTokens: number, contextWindow: number, };

export type AttentionParams = { sessionId: string, runId?: string | null, reason: AttentionReason, 
/**
 * One line for a notification: the answer's first line, or the error.
 */
message: string, };

export type SaveDocumentParams = { uri: string, };

export type SaveDocumentResult = { saved: boolean, };

export type ModelInfo = { provider: string, id: string, name: string, api: Api, baseUrl: string, reasoning: boolean, input: Array<string>, contextWindow: number, maxTokens: number, 
/**
 * US dollars per million tokens.
 */
cost: ModelCost, thinkingLevels: Array<ThinkingLevel>, };

export type QueueModeName = "one-at-a-time" | "all";

export type SessionState = { sessionId: string, sessionFile: string, sessionName?: string | null, 
/**
 * The file this session was forked from.
 */
parentSession?: string | null, model: ModelInfo, thinkingLevel: ThinkingLevel, 
/**
 * True while a run is active.
 */
isStreaming: boolean, 
/**
 * The active run, or the last one.
 */
runId?: string | null, steeringMode: QueueModeName, followUpMode: QueueModeName, autoRetryEnabled: boolean, 
/**
 * True while a failed request waits to be retried.
 */
isRetrying: boolean, 
/**
 * Automatic compaction (threshold and overflow) is on (Pi's `autoCompactionEnabled`).
 */
autoCompactionEnabled: boolean, 
/**
 * True while a compaction writes its summary (Pi's `isCompacting`).
 */
isCompacting: boolean, 
/**
 * True while a user-run shell command (`agent/bash`) runs.
 */
isBashRunning: boolean, 
/**
 * Messages in the model's context.
 */
messageCount: number, 
/**
 * Queued messages not yet delivered.
 */
pendingMessageCount: number, 
/**
 * Where the next entry attaches.
 */
leafId?: string | null, 
/**
 * The approval policy in force for this session (`ask`, `auto-edit`, `approve-all`).
 */
approvalPolicy?: ApprovalPolicy | null, 
/**
 * Present when the session is another project's (opened by its path): the folder its
 * header names as its `cwd` (`""` when it names none), for the client to show whose it
 * is ([`pi_core::session::Ownership`]).
 */
otherCwd?: string | null, };

export type ModelListResult = { models: Array<ModelInfo>, };

export type ModelSetParams = { sessionId: string, 
/**
 * `provider/id`.
 */
model: string, };

export type ModelSetResult = { model: ModelInfo, thinkingLevel: ThinkingLevel, };

export type ThinkingSetParams = { sessionId: string, level: ThinkingLevel, };

export type ThinkingResult = { level: ThinkingLevel, };

export type SessionNewParams = { 
/**
 * `provider/id`; default as for `agent/prompt`.
 */
model?: string | null, 
/**
 * Clamped to what the model supports.
 */
thinkingLevel?: ThinkingLevel | null, name?: string | null, };

export type SessionInfo = { sessionId: string, sessionFile: string, name?: string | null, firstPrompt?: string | null, parentSession?: string | null, entryCount: number, 
/**
 * Milliseconds since the Unix epoch.
 */
lastActivity: number, 
/**
 * True when this server has it open.
 */
open: boolean, };

export type SessionListResult = { sessions: Array<SessionInfo>, };

export type SessionOpenParams = { sessionId?: string | null, path?: string | null, };

export type SessionForkParams = { sessionId: string, 
/**
 * The entry to fork at. A user message is left out (the fork ends at its parent) and its
 * text is returned for editing, as Pi does; any other entry is kept as the new leaf.
 */
entryId: string, };

export type SessionForkResult = { session: SessionState, 
/**
 * The forked-at user message's text.
 */
text?: string | null, };

export type SessionBranchParams = { sessionId: string, 
/**
 * The entry to continue from; `null` for before the first entry. A user (or custom)
 * message target puts the leaf at its parent and returns its text, as Pi does. Required:
 * a request without it is refused (`missing field `entryId``) rather than read as `null`.
 */
entryId: string | null, 
/**
 * Have the model summarise the branch being left and store it as a `branch_summary`
 * entry at the new position.
 */
summarize?: boolean, 
/**
 * Extra focus for the summary.
 */
customInstructions?: string | null, 
/**
 * Pi 1.6's `replaceInstructions`: `customInstructions` replace the summary prompt
 * instead of adding a focus to it.
 */
replaceInstructions?: boolean, 
/**
 * Pi 1.6's `label`: a label put on the `branch_summary` entry, or on the target entry
 * when no summary is written (a `label` entry, which becomes the leaf).
 */
label?: string | null, };

export type RewindParams = { sessionId: string, 
/**
 * An entry of the active branch (the leaf goes before it), or of another branch such as
 * an earlier answer's `previousLeafId` (the leaf goes to it).
 */
entryId: string, };

export type TreeEntry = { id: string, parentId: string | null, 
/**
 * The entry's `type` (`message`, `model_change`, `branch_summary`, `label`, …).
 */
type: string, timestamp?: string | null, 
/**
 * For `message` entries: the message's role.
 */
role?: string | null, 
/**
 * The first 200 characters of the entry's text, if it has any.
 */
preview?: string | null, label?: string | null, };

export type SessionTreeResult = { sessionId: string, leafId: string | null, entries: Array<TreeEntry>, };

export type SessionLabelParams = { sessionId: string, entryId: string, 
/**
 * The label; `null` or `""` clears it. Required: a request without it is refused
 * rather than read as a clear.
 */
label: string | null, };

export type SessionLabelResult = { 
/**
 * The `label` entry written.
 */
labelEntryId: string, };

export type SessionNameParams = { sessionId: string, 
/**
 * Not empty (after trimming).
 */
name: string, };

export type SessionNameResult = { name: string, };

export type ContextUsage = { tokens: number | null, contextWindow: number, 
/**
 * 0–100, not rounded (Pi's `tokens / contextWindow * 100`).
 */
percent: number | null, };

export type StatsTokens = { input: number, output: number, cacheRead: number, cacheWrite: number, total: number, };

export type SessionStatsResult = { sessionId: string, sessionFile: string, userMessages: number, assistantMessages: number, toolCalls: number, toolResults: number, totalMessages: number, tokens: StatsTokens, 
/**
 * US dollars at the model's per-million-token prices.
 */
cost: number, 
/**
 * Every response in the session file (pi-lsp's; Pi has no such figure).
 */
sessionTokens: StatsTokens, 
/**
 * US dollars of every response in the session file (pi-lsp's).
 */
sessionCost: number, 
/**
 * Absent only for a model without a context window (as in Pi).
 */
contextUsage?: ContextUsage | null, };

export type ExportFormat = "markdown" | "html";

export type SessionExportParams = { sessionId: string, format: ExportFormat, 
/**
 * Write here (relative to the workspace root unless absolute) instead of answering with
 * the content.
 */
outputPath?: string | null, };

export type SessionExportResult = { format: ExportFormat, content?: string | null, path?: string | null, };

export type MessagesResult = { sessionId: string, messages: Array<unknown>, 
/**
 * `entryIds[i]` is the entry of `messages[i]`.
 */
entryIds: Array<string>, 
/**
 * The response being streamed, if any: built from exactly the `agent/event`s up to
 * [`MessagesResult::seq`].
 */
streamingMessage?: AssistantMessage | null, 
/**
 * The `seq` of the session's last `agent/event` this answer includes (0: none). A
 * client applies only the events numbered after it: the ones up to it are in the answer,
 * whichever it receives first.
 */
seq: number, };

export type HistoryParams = { sessionId: string, 
/**
 * The page ends just before this entry (an entry of the active branch); left out, it
 * ends at the leaf (included).
 */
beforeEntryId?: string | null, 
/**
 * Entries per page: 1 or more (default
 * [`HISTORY_DEFAULT_LIMIT`](pi_core::session::HISTORY_DEFAULT_LIMIT)); more than
 * [`HISTORY_MAX_LIMIT`](pi_core::session::HISTORY_MAX_LIMIT) reads as the maximum.
 */
limit?: number | null, };

export type HistoryResult = { sessionId: string, 
/**
 * The active branch's leaf (`null` before the first entry).
 */
leafId: string | null, 
/**
 * The page, oldest first: entries exactly as stored in the session file (Pi v3:
 * `{type, id, parentId, timestamp, …}`), every type in place.
 */
entries: Array<unknown>, 
/**
 * Older entries exist before `entries[0]`: ask again with its id as `beforeEntryId`.
 */
hasMore: boolean, };

export type QueueEditParams = { sessionId: string, queueId: string, 
/**
 * The new text (steering and follow-ups: expanded like a prompt, templates and skills;
 * images stay).
 */
text: string, };

export type QueueEditResult = { 
/**
 * False when the message is not queued (delivered already, dropped, or unknown).
 */
edited: boolean, };

export type QueueRemoveParams = { sessionId: string, queueId: string, };

export type QueueRemoveResult = { 
/**
 * False when the message is not queued (delivered already, dropped, or unknown).
 */
removed: boolean, };

export type CommandSource = "prompt" | "skill";

export type CommandLocation = "user" | "project" | "path";

export type CommandInfo = { 
/**
 * Invoke with `/<name>` at the start of a prompt.
 */
name: string, description: string, source: CommandSource, location: CommandLocation, 
/**
 * The template or `SKILL.md` file (absolute).
 */
path: string, 
/**
 * A template's `argument-hint` frontmatter, e.g. `<PR-URL>`.
 */
argumentHint?: string | null, };

export type CommandsParams = { sessionId?: string | null, };

export type CommandsResult = { commands: Array<CommandInfo>, };

export type ExtensionCommandsResult = { commands: Array<ExtensionCommandInfo>, };

export type ContinueResult = { sessionId: string, runId: string, };

export type PlanMode = "off" | "plan" | "executing";

export type TodoStatus = "pending" | "in_progress" | "completed";

export type TodoPriority = "high" | "medium" | "low";

export type TodoItem = { id: number, text: string, done: boolean, status: TodoStatus, priority: TodoPriority, };

export type PlanParams = { sessionId: string, available: boolean, mode: PlanMode, todos: Array<TodoItem>, nextId: number, completed: number, total: number, planModeAvailable: boolean, };

export type PlanSetParams = { sessionId: string, enabled: boolean, };
