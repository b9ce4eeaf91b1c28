//! The few bits of JSON output the crate needs (trace records), without a serializer dependency.

use std::fmt::Write;

/// Append `s` to `out` as a JSON string literal (quotes included), escaping `"`, `\` and every
/// control character (RFC 8259 §7).
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `s` as a JSON string literal.
#[cfg(test)]
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_str(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_round_trip_through_a_real_parser() {
        for s in [
            "plain",
            "quote \" and \\ slash",
            "line\nbreak\ttab\r",
            "\u{1}\u{1f}\u{7f}",
            "ünï ✓",
        ] {
            let j = string(s);
            let back: String = serde_json::from_str(&j).unwrap();
            assert_eq!(back, s);
        }
    }
}
