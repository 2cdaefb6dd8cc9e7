//! Text from outside made safe where it is shown. A row's message may hold what a tool wrote on
//! its stderr, control characters included: a terminal's colour escapes, NUL, BEL, a carriage
//! return. Raw, they made the `--junit` file invalid XML (XML 1.0 has no NUL or ESC, even as a
//! character reference) and drove the terminal that shows the table. Every control character
//! is therefore written as Rust escapes it (`\u{1b}`, `\0`, `\r`): visible, inert, and the
//! same text in the JUnit file, the HTML report and the console. The row's files (CSV, JSON,
//! Parquet) keep the message as it was: their formats quote any character.

use std::borrow::Cow;

/// `s` with every control character (Unicode's `Cc`: U+0000 to U+001F and U+007F to U+009F)
/// but those in `keep` written escaped, as `char::escape_debug` writes it.
pub fn escape_controls<'a>(s: &'a str, keep: &[char]) -> Cow<'a, str> {
    if !s.chars().any(|c| c.is_control() && !keep.contains(&c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() && !keep.contains(&c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Text for an XML attribute value or element: `&`, `<`, `>` and `"` as entities, tab,
/// newline and carriage return as character references (an attribute value keeps them so),
/// other control characters and the non-characters U+FFFE and U+FFFF (none of them allowed in
/// XML 1.0) escaped as [`escape_controls`] escapes them.
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\u{fffe}' | '\u{ffff}' => out.extend(c.escape_unicode()),
            c if c.is_control() => out.extend(c.escape_debug()),
            c => out.push(c),
        }
    }
    out
}

/// Text for HTML: `&`, `<`, `>` and `"` as entities, control characters but tab and newline
/// escaped as [`escape_controls`] escapes them.
pub fn html(s: &str) -> String {
    escape_controls(s, &['\t', '\n'])
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A character XML 1.0 allows (its `Char` production).
    fn xml_char(c: char) -> bool {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
    }

    const NASTY: &str = "tool said \u{1b}[31mred\u{1b}[0m nul\0 bel\u{7} cr\r\nnext\tline <&\"> \u{9b}2J \u{ffff}";

    #[test]
    fn xml_text_has_only_characters_xml_allows_and_no_markup() {
        let x = xml(NASTY);
        assert!(x.chars().all(xml_char), "{x:?}");
        assert!(!x.contains('<') && !x.contains('>') && !x.contains('"'), "{x}");
        // Every & starts an entity or character reference.
        for (i, _) in x.match_indices('&') {
            let rest = &x[i..];
            let end = rest.find(';').expect("a reference ends with ;");
            let name = &rest[1..end];
            assert!(
                ["amp", "lt", "gt", "quot"].contains(&name)
                    || name.strip_prefix('#').is_some_and(|n| n.parse::<u32>().is_ok()),
                "{name}"
            );
        }
        assert!(x.contains(r"\u{1b}[31mred") && x.contains(r"nul\0 bel\u{7}") && x.contains("cr&#13;&#10;next&#9;"));
        assert!(x.contains(r"\u{9b}2J") && x.contains(r"\u{ffff}"), "{x}");
    }

    #[test]
    fn html_and_console_text_keep_newlines_and_tabs_and_no_other_control() {
        let h = html(NASTY);
        assert!(h.chars().all(|c| !c.is_control() || c == '\n' || c == '\t'), "{h:?}");
        assert!(h.contains(r"\u{1b}[31mred") && h.contains("&lt;&amp;&quot;&gt;") && h.contains("\nnext\tline"));
        let line = escape_controls(NASTY, &['\n', '\t']);
        assert!(!line.contains('\u{1b}') && !line.contains('\r') && !line.contains('\0'), "{line:?}");
        assert!(line.contains(r"cr\r") && line.contains("\nnext\tline"), "{line:?}");
        assert!(matches!(escape_controls("plain text\n", &['\n']), Cow::Borrowed(_)));
    }
}
