//! Names of MCP tools as the model sees them (Pi 1.6's `createMcpToolName`).

/// Provider tool names are at most 64 characters of `[A-Za-z0-9_-]`.
pub const MAX_TOOL_NAME_LENGTH: usize = 64;

/// What every MCP tool's name starts with.
pub const PREFIX: &str = "mcp__";

/// `text` with every character other than ASCII letters, digits and `_` replaced by `_`, one
/// `_` per character (Pi 1.6's `createMcpToolName`).
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `mcp__<server>__<tool>` with every character other than ASCII letters, digits and `_`
/// replaced by `_`; when longer than 64 characters or `taken` (another MCP tool has it), cut
/// to 55 characters and suffixed with `_` and the first 8 hex digits of SHA-256 of
/// `server\0tool`.
pub fn tool_name(server: &str, tool: &str, taken: impl Fn(&str) -> bool) -> String {
    let name = sanitize(&format!("mcp__{server}__{tool}"));
    if name.len() <= MAX_TOOL_NAME_LENGTH && !taken(&name) {
        return name;
    }
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{server}\0{tool}").as_bytes(),
    );
    let hash: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // Non-ASCII characters were replaced one `_` each (a UTF-16 unit in Pi; one char here).
    let head: String = name
        .chars()
        .take(MAX_TOOL_NAME_LENGTH - hash.len() - 1)
        .collect();
    format!("{head}_{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_pi() {
        assert_eq!(
            tool_name("everything", "echo", |_| false),
            "mcp__everything__echo"
        );
        assert_eq!(
            tool_name("dev-radius", "get.item", |_| false),
            "mcp__dev_radius__get_item"
        );
        let taken = tool_name("a", "x-y", |n| n == "mcp__a__x_y");
        assert!(
            taken.starts_with("mcp__a__x_y_") && taken.len() == "mcp__a__x_y_".len() + 8,
            "{taken}"
        );
        let long = tool_name("s", &"t".repeat(80), |_| false);
        assert_eq!(long.len(), 64);
        // sha256("s\0" + "t"*80)[..8] — a fixed value, the same in Pi.
        assert_eq!(&long[..55], &format!("mcp__s__{}", "t".repeat(47)));
    }
}
