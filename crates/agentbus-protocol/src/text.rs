//! Foreign text on its way to a person: a terminal or a shell command line.
//!
//! Whatever a peer wrote (a message, a name, an id from another implementation's file) is data. On a
//! terminal it must not move the cursor, retitle the window or hide text ([`for_terminal`]); inside a
//! command line printed for a person to paste it must stay one word ([`shell_quote`]). Every printer
//! path goes through these two functions, so there is one reading of "safe" for each place.

use std::borrow::Cow;

use crate::frame::{hidden_marked, is_hidden_after};

/// Quotes `word` for a POSIX shell, so that pasting the result passes exactly `word` as one argument.
///
/// Words made only of characters no shell treats specially are returned as they are; anything else
/// is wrapped in single quotes, with each `'` written as `'\''`. Control and hidden characters are
/// quoted too (they cannot run anything inside single quotes), but a caller printing the command on
/// a terminal also passes the whole line through [`for_terminal`]. Quoting keeps a word whole, not
/// from being read as an option: a foreign value that may start with `-` goes after `--` as a
/// positional argument ([`positional`]) or attached to its option ([`shell_option`]).
pub fn shell_quote(word: &str) -> Cow<'_, str> {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@,=%".contains(&b))
        // A leading `-` is quoted so it stands out to a reader; `=` first is read by some shells as
        // an assignment only when followed by a name, which the allowed set cannot form on its own.
        && !word.starts_with('-');
    if plain {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

/// `word` quoted as a positional argument of a command line: after `--` when it starts with `-`,
/// which the command's parser would otherwise take for an option (a foreign message id such as
/// `--body-file=~/.ssh/id_rsa`). Every option of the command must come before it.
pub fn positional(word: &str) -> String {
    let quoted = shell_quote(word);
    if word.starts_with('-') {
        format!("-- {quoted}")
    } else {
        quoted.into_owned()
    }
}

/// `--name value` for a command line, `value` quoted; attached as `--name=value` when the value
/// starts with `-`, which the parser would otherwise take for an option of its own.
pub fn shell_option(name: &str, value: &str) -> String {
    if value.starts_with('-') {
        shell_quote(&format!("--{name}={value}")).into_owned()
    } else {
        format!("--{name} {}", shell_quote(value))
    }
}

/// Makes `text` safe to write to a terminal: escape sequences (CSI, OSC, DCS and the rest of ECMA-48)
/// are removed whole, and every other control character, carriage returns included, is shown as a
/// visible `\u{…}` escape. Newlines and tabs are kept; invisible or reordering characters (bidi
/// controls, zero-width and tag characters) are shown as escapes too, so what a person reads is what
/// the sender wrote.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !hidden_marked(text).any(|(c, hidden)| needs_care(c, hidden)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    // The character before this one, as written: a presentation selector is hidden or not by it.
    let mut prev = None;
    while let Some(c) = chars.next() {
        let hidden = is_hidden_after(prev, c);
        prev = Some(c);
        match c {
            '\n' | '\t' => out.push(c),
            '\u{1b}' => skip_escape(&mut chars),
            // C1 introducers that open a string or a control sequence on their own.
            '\u{9b}' => skip_csi(&mut chars),
            '\u{90}' | '\u{9d}' | '\u{9e}' | '\u{9f}' | '\u{98}' => skip_string(&mut chars),
            c if needs_care(c, hidden) => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{{{:04X}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Like [`for_terminal`], on one line: newlines and tabs become spaces too.
pub fn for_terminal_line(text: &str) -> Cow<'_, str> {
    let cleaned = for_terminal(text);
    if cleaned.contains(['\n', '\t']) {
        Cow::Owned(cleaned.replace(['\n', '\t'], " "))
    } else {
        cleaned
    }
}

fn needs_care(c: char, hidden: bool) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || hidden
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// After ESC: drops the sequence it opens (ECMA-48 §5.3, and the string commands of §8.3).
fn skip_escape(chars: &mut Chars<'_>) {
    match chars.peek().copied() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']' | 'P' | 'X' | '^' | '_') => {
            chars.next();
            skip_string(chars);
        }
        // nF sequences: intermediate bytes, then one final byte.
        Some(c) if ('\u{20}'..='\u{2f}').contains(&c) => {
            while chars
                .next_if(|c| ('\u{20}'..='\u{2f}').contains(c))
                .is_some()
            {}
            chars.next_if(|c| ('\u{30}'..='\u{7e}').contains(c));
        }
        // Fp, Fe and Fs sequences: one final byte.
        Some(c) if ('\u{30}'..='\u{7e}').contains(&c) => {
            chars.next();
        }
        _ => {}
    }
}

/// A control sequence: parameter bytes, intermediate bytes, one final byte.
fn skip_csi(chars: &mut Chars<'_>) {
    while chars
        .next_if(|c| ('\u{30}'..='\u{3f}').contains(c))
        .is_some()
    {}
    while chars
        .next_if(|c| ('\u{20}'..='\u{2f}').contains(c))
        .is_some()
    {}
    chars.next_if(|c| ('\u{40}'..='\u{7e}').contains(c));
}

/// A control string (OSC, DCS, SOS, PM, APC): everything up to BEL, ST (`ESC \` or U+009C), or the
/// end of the text. Terminals end these at BEL too, so a string ended by BEL is dropped whole.
fn skip_string(chars: &mut Chars<'_>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' if chars.peek() == Some(&'\\') => {
                chars.next();
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_as_they_are() {
        for w in [
            "msg_01J9ZK",
            "agent://acme/backend/bot",
            "a-b_c.d",
            "x=1",
            "user@host",
        ] {
            assert_eq!(shell_quote(w), w);
        }
    }

    #[test]
    fn hostile_words_become_one_quoted_word() {
        let cases = [
            ("x$(touch PWNED); echo", "'x$(touch PWNED); echo'"),
            ("it's", r"'it'\''s'"),
            ("", "''"),
            ("-rf", "'-rf'"),
            ("a b", "'a b'"),
            ("`id`", "'`id`'"),
            ("a\nb", "'a\nb'"),
            // Ids and threads from the git share's hostile test files.
            ("it's `touch PWNED2` time", r"'it'\''s `touch PWNED2` time'"),
            ("t; touch PWNED3", "'t; touch PWNED3'"),
        ];
        for (word, quoted) in cases {
            assert_eq!(shell_quote(word), quoted, "{word:?}");
        }
    }

    /// Quoting keeps a word whole; a word that starts with `-` is also kept from being read as an
    /// option, by `--` before a positional one and `=` for an option's value.
    #[test]
    fn a_leading_dash_is_never_read_as_an_option() {
        assert_eq!(positional("msg_1"), "msg_1");
        assert_eq!(
            positional("--body-file=/home/u/.ssh/id_rsa"),
            "-- '--body-file=/home/u/.ssh/id_rsa'"
        );
        assert_eq!(shell_option("thread", "t; x"), "--thread 't; x'");
        assert_eq!(shell_option("thread", "-rf"), "'--thread=-rf'");
    }

    #[test]
    fn escape_sequences_are_removed_whole() {
        let cases = [
            ("\u{1b}]0;owned\u{7}title", "title"),
            ("\u{1b}[31mred\u{1b}[0m", "red"),
            ("\u{1b}]8;;http://x\u{1b}\\link\u{1b}]8;;\u{1b}\\", "link"),
            ("\u{1b}[2J\u{1b}[Hclear", "clear"),
            ("\u{9b}31mc1", "c1"),
            ("\u{1b}(Bcharset", "charset"),
            ("\u{1b}Pdcs\u{1b}\\after", "after"),
            ("unterminated \u{1b}]0;title", "unterminated "),
        ];
        for (text, shown) in cases {
            assert_eq!(for_terminal(text), shown, "{text:?}");
        }
    }

    #[test]
    fn other_controls_become_visible() {
        assert_eq!(for_terminal("a\rb"), "a\\u{000D}b");
        assert_eq!(for_terminal("nul\0bel\u{7}"), "nul\\u{0000}bel\\u{0007}");
        assert_eq!(for_terminal("rtl\u{202E}txt"), "rtl\\u{202E}txt");
        assert_eq!(
            for_terminal("keep\nlines\tand tabs"),
            "keep\nlines\tand tabs"
        );
        assert_eq!(for_terminal_line("two\nlines"), "two lines");
    }

    /// Variation selectors can carry bytes after a character; one presentation selector after a
    /// character (an emoji's) is how it is drawn and stays.
    #[test]
    fn variation_selectors_that_draw_nothing_become_visible() {
        assert_eq!(for_terminal("A\u{FE06}\u{FE08}"), "A\\u{FE06}\\u{FE08}");
        assert_eq!(for_terminal("B\u{FE0F}\u{FE0F}"), "B\u{FE0F}\\u{FE0F}");
        assert_eq!(for_terminal("\u{FE0F}x"), "\\u{FE0F}x");
        assert!(matches!(
            for_terminal("ok \u{2764}\u{FE0F}"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn clean_text_is_not_copied() {
        assert!(matches!(for_terminal("plain text"), Cow::Borrowed(_)));
    }
}
