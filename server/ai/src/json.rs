//! JSON helpers for provider streams: tolerant parsing of streamed tool arguments and of
//! chunks that carry lone UTF-16 surrogate escapes.
//!
//! Rules from Pi 0.73.1 `pi-ai/dist/utils/json-parse.js` (`repairJson`, `parseStreamingJson`)
//! and case STRM-07 (b). No maintained Rust crate does best-effort partial JSON (the ones found
//! are young single-purpose crates), so the prefix completion here is the harness's own: it
//! only shapes what a UI shows while arguments stream; the final arguments are parsed strictly.

use std::borrow::Cow;

use serde_json::Value;

/// Escapes raw control characters inside strings and doubles backslashes before invalid
/// escape characters (Pi's `repairJson`). Text outside strings is unchanged.
pub fn repair_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 8);
    let mut in_string = false;
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        if !in_string {
            out.push(c);
            if c == '"' {
                in_string = true;
            }
            continue;
        }
        match c {
            '"' => {
                out.push(c);
                in_string = false;
            }
            '\\' => match chars.peek().copied() {
                Some(n @ ('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' | 'u')) => {
                    out.push('\\');
                    out.push(n);
                    chars.next();
                }
                _ => out.push_str("\\\\"),
            },
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Parses complete tool-argument text: as is, else after [`repair_json`]. Only a JSON object
/// counts as arguments; anything else (including a cut-off text) gives `None`.
pub fn parse_arguments(text: &str) -> Option<Value> {
    let parsed = serde_json::from_str::<Value>(text)
        .ok()
        .or_else(|| serde_json::from_str::<Value>(&repair_json(text)).ok())
        .or_else(|| parse_lossy(text).ok())?;
    parsed.is_object().then_some(parsed)
}

/// Best-effort parse of a prefix of a JSON object, for the partial message while arguments
/// stream: complete text parses as is; otherwise an open string is closed and open containers
/// are closed, and failing that the text is cut back to its last complete member. Returns `{}`
/// when nothing usable is there.
pub fn parse_partial_arguments(text: &str) -> Value {
    if let Some(v) = parse_arguments(text) {
        return v;
    }
    let repaired = repair_json(text);
    for candidate in completions(text).into_iter().chain(completions(&repaired)) {
        if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&candidate) {
            return v;
        }
    }
    Value::Object(Default::default())
}

/// Candidate completions of a JSON prefix: closed as is, then cut at the last `,` of the
/// innermost open container, then cut just after that container's opening bracket.
fn completions(prefix: &str) -> Vec<String> {
    let mut stack: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    // (byte offset, stack depth snapshot) of cut points.
    let mut last_comma: Option<(usize, Vec<char>)> = None;
    let mut last_open: Option<(usize, Vec<char>)> = None;
    for (i, c) in prefix.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => {
                stack.push(if c == '{' { '}' } else { ']' });
                last_open = Some((i + 1, stack.clone()));
                last_comma = None;
            }
            '}' | ']' => {
                stack.pop();
                last_comma = None;
            }
            ',' => last_comma = Some((i, stack.clone())),
            _ => {}
        }
    }
    let close = |body: &str, stack: &[char], open_string: bool| {
        let mut s = body.to_string();
        if open_string {
            // Drop a dangling escape, then close the string.
            let trailing = s.len() - s.trim_end_matches('\\').len();
            if trailing % 2 == 1 {
                s.pop();
            }
            if let Some(u) = s.rfind("\\u") {
                if s.len() - u < 6 && s[u + 2..].chars().all(|c| c.is_ascii_hexdigit()) {
                    s.truncate(u);
                }
            }
            s.push('"');
        }
        let trimmed = s.trim_end();
        let mut s = trimmed
            .strip_suffix(',')
            .or_else(|| trimmed.strip_suffix(':'))
            .unwrap_or(trimmed)
            .to_string();
        for c in stack.iter().rev() {
            s.push(*c);
        }
        s
    };
    let mut out = vec![close(prefix, &stack, in_string)];
    if let Some((at, st)) = last_comma {
        out.push(close(&prefix[..at], &st, false));
    }
    if let Some((at, st)) = last_open {
        out.push(close(&prefix[..at], &st, false));
    }
    out
}

/// Parses `text`, replacing lone UTF-16 surrogate escapes (`\ud83e` not followed by a low
/// surrogate, or a low one alone) with U+FFFD first when the strict parse fails (STRM-07 b:
/// serde_json rejects them, JavaScript accepts them).
pub fn parse_lossy(text: &str) -> Result<Value, serde_json::Error> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(e) => match replace_lone_surrogates(text) {
            Cow::Owned(fixed) => serde_json::from_str(&fixed),
            Cow::Borrowed(_) => Err(e),
        },
    }
}

fn hex4(b: &[u8]) -> Option<u16> {
    let s = std::str::from_utf8(b.get(..4)?).ok()?;
    u16::from_str_radix(s, 16).ok()
}

/// Rewrites lone surrogate `\uXXXX` escapes as `\ufffd`; borrowed when there are none.
pub fn replace_lone_surrogates(text: &str) -> Cow<'_, str> {
    let b = text.as_bytes();
    let mut out: Option<String> = None;
    let mut last = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        if b.get(i + 1) != Some(&b'u') {
            i += 2; // any other escape, including `\\`
            continue;
        }
        let Some(unit) = hex4(&b[i + 2..]) else {
            i += 2;
            continue;
        };
        let is_high = (0xD800..0xDC00).contains(&unit);
        let is_low = (0xDC00..0xE000).contains(&unit);
        if is_high
            && b.get(i + 6) == Some(&b'\\')
            && b.get(i + 7) == Some(&b'u')
            && hex4(b.get(i + 8..).unwrap_or(&[])).is_some_and(|u| (0xDC00..0xE000).contains(&u))
        {
            i += 12; // a valid pair
            continue;
        }
        if is_high || is_low {
            let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
            o.push_str(&text[last..i]);
            o.push_str("\\ufffd");
            last = i + 6;
        }
        i += 6;
    }
    match out {
        Some(mut o) => {
            o.push_str(&text[last..]);
            Cow::Owned(o)
        }
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strict_then_repaired_then_none() {
        assert_eq!(parse_arguments(r#"{"a":1}"#), Some(json!({"a":1})));
        assert_eq!(
            parse_arguments("{\"a\":\"x\ny\"}"),
            Some(json!({"a":"x\ny"}))
        );
        assert_eq!(
            parse_arguments(r#"{"p":"C:\dir"}"#),
            Some(json!({"p":"C:\\dir"}))
        );
        assert_eq!(
            parse_arguments(r#"{"path":"big.txt","content":"line1\nline2"#),
            None
        );
        assert_eq!(parse_arguments("[1]"), None);
    }

    #[test]
    fn partial_prefixes() {
        let cases = [
            (
                r#"{"path":"big.txt","content":"line1\nline2"#,
                json!({"path":"big.txt","content":"line1\nline2"}),
            ),
            (r#"{"pa"#, json!({})),
            (r#"{"path":"#, json!({})),
            (r#"{"path":"a","n":tr"#, json!({"path":"a"})),
            (r#"{"a":[1,2"#, json!({"a":[1,2]})),
            (r#"{"a":{"b":"c","d"#, json!({"a":{"b":"c"}})),
            (r#"{"a":"x\"#, json!({"a":"x"})),
            (r#"{"a":"x\u00"#, json!({"a":"x"})),
            ("", json!({})),
        ];
        for (text, want) in cases {
            assert_eq!(parse_partial_arguments(text), want, "{text}");
        }
    }

    #[test]
    fn strm07_lone_surrogates_become_replacement_characters() {
        let chunk = r#"{"choices":[{"delta":{"content":"x\ud83e"}}]}"#;
        assert!(serde_json::from_str::<Value>(chunk).is_err());
        let v = parse_lossy(chunk).unwrap();
        assert_eq!(v["choices"][0]["delta"]["content"], "x\u{fffd}");
        // Pairs and escaped backslashes are untouched.
        let ok = r#"{"a":"\ud83e\udd8a \\ud83e \udc00"}"#;
        assert_eq!(parse_lossy(ok).unwrap(), json!({"a":"🦊 \\ud83e \u{fffd}"}));
    }
}
