//! Text from the server (or the user) made safe to print: [`Escaped`] for human output,
//! [`json_line`] for `--json`. Neither lets a terminal act on a control or bidirectional
//! formatting character ([`is_control_or_bidi`]).

use std::fmt;

use crate::lease::limits::is_control_or_bidi;

/// Server-provided (or user-provided) text in human output: every character a terminal would act
/// on instead of showing ([`is_control_or_bidi`]) is written as its Rust escape (`\u{1b}`,
/// `\n`, `\u{202e}`); all other text as it is.
pub(super) struct Escaped<'a>(pub(super) &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for_each_run(self.0, |plain, hidden| {
            f.write_str(plain)?;
            hidden.map_or(Ok(()), |c| write!(f, "{}", c.escape_debug()))
        })
    }
}

/// Calls `write` with each run of `text` up to an [`is_control_or_bidi`] character and that
/// character, in order; the last run comes with `None`.
fn for_each_run<E>(
    text: &str,
    mut write: impl FnMut(&str, Option<char>) -> Result<(), E>,
) -> Result<(), E> {
    let mut rest = text;
    while let Some((at, hidden)) = rest.char_indices().find(|(_, c)| is_control_or_bidi(*c)) {
        write(&rest[..at], Some(hidden))?;
        rest = &rest[at + hidden.len_utf8()..];
    }
    write(rest, None)
}

/// `value` as one line of JSON. serde_json escapes only C0 controls, `"` and `\\`; DEL, the C1
/// controls (U+009B is CSI to some terminals) and the bidirectional formatting characters are
/// escaped here as `\uXXXX` as well, so that `--json` output printed to a terminal is safe too.
/// A JSON parser reads the same strings back.
pub(super) fn json_line(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, TerminalSafeJson);
    serde::Serialize::serialize(value, &mut serializer).expect("a JSON value always serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// serde_json's compact format, with [`is_control_or_bidi`] characters escaped in strings.
struct TerminalSafeJson;

impl serde_json::ser::Formatter for TerminalSafeJson {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        // Every such character is in the Basic Multilingual Plane: one \uXXXX escape each.
        for_each_run(fragment, |plain, hidden| {
            writer.write_all(plain.as_bytes())?;
            hidden.map_or(Ok(()), |c| write!(writer, "\\u{:04x}", c as u32))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character the server refuses in a holder (none is above U+2069).
    fn hidden_characters() -> impl Iterator<Item = char> {
        ('\0'..='\u{2069}').filter(|c| is_control_or_bidi(*c))
    }

    #[test]
    fn escaped_text_has_no_control_or_bidi_characters() {
        assert_eq!(
            Escaped("a\u{1b}[2Jb\nc\0d\u{9b}e\u{202e}f").to_string(),
            "a\\u{1b}[2Jb\\nc\\0d\\u{9b}e\\u{202e}f"
        );
        assert_eq!(
            Escaped("host-a/pid-42 ünï 🦀").to_string(),
            "host-a/pid-42 ünï 🦀"
        );
        let all: String = hidden_characters().collect();
        assert_eq!(
            all.chars().count(),
            65 + 12,
            "Cc is 65 characters, the bidi set 12"
        );
        assert!(!Escaped(&all).to_string().chars().any(is_control_or_bidi));
    }

    /// `format_holder` relies on `{:?}` escaping these; this fails if the standard library's
    /// `Debug` for `str` ever stops doing so.
    #[test]
    fn debug_quoting_escapes_every_control_and_bidi_character() {
        for c in hidden_characters() {
            let quoted = format!("{:?}", format!("x{c}y"));
            assert!(!quoted.chars().any(is_control_or_bidi), "{:?}", c);
        }
    }

    #[test]
    fn json_lines_escape_control_and_bidi_characters_and_parse_back() {
        let holder: String = hidden_characters().chain("ünï \"\\ 🦀".chars()).collect();
        let line = json_line(&serde_json::json!({ "holder": holder }));
        assert!(!line.chars().any(is_control_or_bidi), "{line}");
        assert!(line.contains(r"\u001b") && line.contains(r"\u009b") && line.contains(r"\u202e"));
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["holder"], holder.as_str());
        assert_eq!(
            json_line(&serde_json::json!({ "name": "a", "held": false })),
            r#"{"held":false,"name":"a"}"#
        );
    }
}
