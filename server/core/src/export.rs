//! Session export: the active branch of a session as Markdown or as one self-contained HTML
//! page (Pi's `export_html`; no scripts, fonts or links to fetch, images inlined as `data:`
//! URIs, so the file opens offline and can be attached to an issue).
//!
//! Both walk the root-to-leaf path of a [`SessionTree`] and render every entry a reader cares
//! about: user, assistant (text, thinking, tool calls), tool results, `bashExecution`, custom
//! messages, branch and compaction summaries, model and thinking-level changes. Labels are
//! shown next to the entry they name. Text is rendered as written (no Markdown parsing in
//! HTML: `white-space: pre-wrap` keeps it exact).

use serde_json::Value;

use crate::session::SessionTree;

/// One rendered block of the transcript.
struct Block {
    /// `user`, `assistant`, `thinking`, `tool-call`, `tool-result`, `tool-error`, `bash`,
    /// `custom`, `summary`, `meta`.
    class: &'static str,
    title: String,
    body: String,
    /// `(mimeType, base64)` images attached to the block.
    images: Vec<(String, String)>,
}

fn text_of(content: &Value) -> (String, Vec<(String, String)>) {
    match content {
        Value::String(s) => (s.clone(), Vec::new()),
        Value::Array(blocks) => {
            let mut text = Vec::new();
            let mut images = Vec::new();
            for b in blocks {
                match b["type"].as_str() {
                    Some("text") => text.push(b["text"].as_str().unwrap_or("").to_string()),
                    Some("image") => images.push((
                        b["mimeType"].as_str().unwrap_or("image/png").to_string(),
                        b["data"].as_str().unwrap_or("").to_string(),
                    )),
                    _ => {}
                }
            }
            (text.join("\n"), images)
        }
        _ => (String::new(), Vec::new()),
    }
}

fn blocks(tree: &SessionTree, leaf: Option<&str>) -> Vec<Block> {
    let Some(leaf) = leaf.or(tree.last_id()) else {
        return Vec::new();
    };
    let labels = tree.labels();
    let mut out = Vec::new();
    for e in tree.path(leaf) {
        let label = labels
            .get(e.id.as_str())
            .map(|l| format!(" [{l}]"))
            .unwrap_or_default();
        let raw = &e.raw();
        match e.kind.as_str() {
            "message" => {
                let m = &raw["message"];
                match m["role"].as_str().unwrap_or("") {
                    "user" => {
                        let (body, images) = text_of(&m["content"]);
                        out.push(Block {
                            class: "user",
                            title: format!("User{label}"),
                            body,
                            images,
                        });
                    }
                    "assistant" => {
                        let model = m["model"].as_str().unwrap_or("");
                        for b in m["content"].as_array().into_iter().flatten() {
                            match b["type"].as_str() {
                                Some("text") => out.push(Block {
                                    class: "assistant",
                                    title: format!("Assistant ({model}){label}"),
                                    body: b["text"].as_str().unwrap_or("").to_string(),
                                    images: Vec::new(),
                                }),
                                Some("thinking") => out.push(Block {
                                    class: "thinking",
                                    title: "Thinking".into(),
                                    body: b["thinking"].as_str().unwrap_or("").to_string(),
                                    images: Vec::new(),
                                }),
                                Some("toolCall") => out.push(Block {
                                    class: "tool-call",
                                    title: format!(
                                        "Tool call: {} ({})",
                                        b["name"].as_str().unwrap_or(""),
                                        b["id"].as_str().unwrap_or("")
                                    ),
                                    body: serde_json::to_string_pretty(&b["arguments"])
                                        .unwrap_or_default(),
                                    images: Vec::new(),
                                }),
                                _ => {}
                            }
                        }
                        if let Some(err) = m["errorMessage"].as_str() {
                            out.push(Block {
                                class: "tool-error",
                                title: format!(
                                    "Response ended: {}",
                                    m["stopReason"].as_str().unwrap_or("error")
                                ),
                                body: err.to_string(),
                                images: Vec::new(),
                            });
                        }
                    }
                    "toolResult" => {
                        let (body, images) = text_of(&m["content"]);
                        let error = m["isError"].as_bool() == Some(true);
                        out.push(Block {
                            class: if error { "tool-error" } else { "tool-result" },
                            title: format!(
                                "Tool result: {}{}",
                                m["toolName"].as_str().unwrap_or(""),
                                if error { " (error)" } else { "" }
                            ),
                            body,
                            images,
                        });
                    }
                    "bashExecution" => out.push(Block {
                        class: "bash",
                        title: format!(
                            "User ran `{}`{}",
                            m["command"].as_str().unwrap_or(""),
                            if m["excludeFromContext"].as_bool() == Some(true) {
                                " (not sent to the model)"
                            } else {
                                ""
                            }
                        ),
                        body: crate::session::bash_execution_text(m),
                        images: Vec::new(),
                    }),
                    "custom" | "hookMessage" => {
                        let (body, images) = text_of(&m["content"]);
                        out.push(Block {
                            class: "custom",
                            title: format!("Message ({})", m["customType"].as_str().unwrap_or("")),
                            body,
                            images,
                        });
                    }
                    "branchSummary" | "compactionSummary" => out.push(Block {
                        class: "summary",
                        title: "Summary".into(),
                        body: m["summary"].as_str().unwrap_or("").to_string(),
                        images: Vec::new(),
                    }),
                    _ => {}
                }
            }
            "custom_message" if raw["display"].as_bool() != Some(false) => {
                let (body, images) = text_of(&raw["content"]);
                out.push(Block {
                    class: "custom",
                    title: format!("Message ({})", raw["customType"].as_str().unwrap_or("")),
                    body,
                    images,
                });
            }
            "branch_summary" => out.push(Block {
                class: "summary",
                title: "Branch summary".into(),
                body: raw["summary"].as_str().unwrap_or("").to_string(),
                images: Vec::new(),
            }),
            "compaction" => out.push(Block {
                class: "summary",
                title: "Compaction summary".into(),
                body: raw["summary"].as_str().unwrap_or("").to_string(),
                images: Vec::new(),
            }),
            "model_change" => out.push(Block {
                class: "meta",
                title: format!(
                    "Model: {}/{}",
                    raw["provider"].as_str().unwrap_or(""),
                    raw["modelId"].as_str().unwrap_or("")
                ),
                body: String::new(),
                images: Vec::new(),
            }),
            "thinking_level_change" => out.push(Block {
                class: "meta",
                title: format!(
                    "Thinking level: {}",
                    raw["thinkingLevel"].as_str().unwrap_or("")
                ),
                body: String::new(),
                images: Vec::new(),
            }),
            _ => {}
        }
    }
    out
}

fn title(tree: &SessionTree) -> String {
    tree.name().unwrap_or_else(|| {
        format!(
            "Session {}",
            tree.header["id"].as_str().unwrap_or("(no id)")
        )
    })
}

/// A fence longer than any run of backticks in `body`.
fn fence(body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat(longest.max(2) + 1)
}

/// The active branch ending at `leaf` (default: the last entry) as Markdown: a `#` title,
/// then one `##` section per message part. Tool calls, tool output and thinking are fenced
/// blocks (fences grow to stay longer than any backtick run inside); images are noted, not
/// embedded.
pub fn to_markdown(tree: &SessionTree, leaf: Option<&str>) -> String {
    let mut out = format!("# {}\n\n", title(tree));
    if let Some(cwd) = tree.header["cwd"].as_str() {
        out.push_str(&format!("Working directory: `{cwd}`\n\n"));
    }
    for b in blocks(tree, leaf) {
        out.push_str(&format!("## {}\n\n", b.title));
        if !b.body.is_empty() {
            match b.class {
                "user" | "assistant" | "custom" | "summary" => {
                    out.push_str(&b.body);
                    out.push_str("\n\n");
                }
                _ => {
                    let f = fence(&b.body);
                    out.push_str(&format!("{f}\n{}\n{f}\n\n", b.body));
                }
            }
        }
        for (mime, _) in &b.images {
            out.push_str(&format!("*(image, {mime})*\n\n"));
        }
    }
    out
}

/// Escapes text for HTML element content and attribute values.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f;background:#fff}\
h1{font-size:1.4rem}.cwd{color:#666}section{border-left:4px solid #ccc;margin:1rem 0;padding:.25rem .75rem}\
section h2{font-size:.9rem;margin:.25rem 0;color:#444}.body{white-space:pre-wrap;overflow-wrap:anywhere}\
.user{border-color:#2f6fdb}.assistant{border-color:#1a7f37}.thinking{border-color:#aaa;color:#555;font-style:italic}\
.tool-call,.tool-result,.bash{border-color:#8250df}.tool-call .body,.tool-result .body,.bash .body,.tool-error .body{font-family:ui-monospace,monospace;font-size:.85rem}\
.tool-error{border-color:#cf222e}.summary,.custom{border-color:#bf8700}.meta{border-color:#eee;color:#888}img{max-width:100%}";

/// The active branch ending at `leaf` as one self-contained HTML page: inline CSS, no
/// scripts, images as `data:` URIs, every text escaped.
pub fn to_html(tree: &SessionTree, leaf: Option<&str>) -> String {
    let t = html_escape(&title(tree));
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n"
    );
    if let Some(cwd) = tree.header["cwd"].as_str() {
        out.push_str(&format!("<p class=\"cwd\">{}</p>\n", html_escape(cwd)));
    }
    for b in blocks(tree, leaf) {
        out.push_str(&format!(
            "<section class=\"{}\"><h2>{}</h2>",
            b.class,
            html_escape(&b.title)
        ));
        if !b.body.is_empty() {
            out.push_str(&format!(
                "<div class=\"body\">{}</div>",
                html_escape(&b.body)
            ));
        }
        for (mime, data) in &b.images {
            // Only base64 characters reach the attribute.
            let clean: String = data
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))
                .collect();
            out.push_str(&format!(
                "<img alt=\"image\" src=\"data:{};base64,{clean}\">",
                html_escape(mime)
            ));
        }
        out.push_str("</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tree() -> SessionTree {
        let v = vec![
            json!({"type":"model_change","id":"m","parentId":null,"provider":"mock","modelId":"m1"}),
            json!({"type":"message","id":"u","parentId":"m","message":{"role":"user","content":[{"type":"text","text":"fix <b> & \"q\""},{"type":"image","mimeType":"image/png","data":"iVBOR\"><script>"}]}}),
            json!({"type":"message","id":"a","parentId":"u","message":{"role":"assistant","model":"m1","content":[{"type":"text","text":"ok"},{"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"echo ```"}}],"stopReason":"toolUse"}}),
            json!({"type":"message","id":"r","parentId":"a","message":{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{"type":"text","text":"```"}],"isError":false}}),
            json!({"type":"label","id":"l","parentId":"r","targetId":"u","label":"start"}),
            json!({"type":"message","id":"b","parentId":"l","message":{"role":"bashExecution","command":"ls","output":"a.txt","exitCode":0,"cancelled":false,"truncated":false,"excludeFromContext":true}}),
        ];
        SessionTree::from_values(
            json!({"type":"session","version":3,"id":"s1","cwd":"/ws"}),
            v,
            Vec::new(),
        )
    }

    #[test]
    fn markdown_of_the_active_branch() {
        assert_eq!(
            to_markdown(&tree(), None),
            "# Session s1\n\nWorking directory: `/ws`\n\n## Model: mock/m1\n\n\
## User [start]\n\nfix <b> & \"q\"\n\n*(image, image/png)*\n\n\
## Assistant (m1)\n\nok\n\n## Tool call: bash (c1)\n\n````\n{\n  \"command\": \"echo ```\"\n}\n````\n\n\
## Tool result: bash\n\n````\n```\n````\n\n\
## User ran `ls` (not sent to the model)\n\n````\nRan `ls`\n```\na.txt\n```\n````\n\n"
        );
    }

    #[test]
    fn html_is_escaped_and_self_contained() {
        let h = to_html(&tree(), None);
        assert!(h.starts_with("<!DOCTYPE html>\n"));
        assert!(h.contains("<section class=\"user\"><h2>User [start]</h2><div class=\"body\">fix &lt;b&gt; &amp; &quot;q&quot;</div><img alt=\"image\" src=\"data:image/png;base64,iVBORscript\"></section>\n"), "{h}");
        assert!(!h.contains("<script"));
        assert!(!h.contains("http://") && !h.contains("https://"));
        assert_eq!(h.matches("<section").count(), 6);
    }
}
