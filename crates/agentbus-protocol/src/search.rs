//! Search, in one place for every front end (the gateway, this machine's store, a git share):
//! the query syntax, the terms a text is indexed under, the blind index that keeps those terms
//! out of the database in the clear, and the snippets made from a text once it is opened.
//!
//! Message `data` is sealed at rest under its tenant's key, so an index of its words must not
//! hold them either: a term is stored as a keyed hash under a key derived from the tenant's
//! ([`IndexKey`]). The database then reveals which documents share a term, and how often a term
//! occurs, never the term. Snippets are made at query time from the opened text, which also
//! drops a hash collision's false hit ([`Query::matches`]).

use std::fmt;
use std::ops::Range;

use unicode_normalization::UnicodeNormalization;

/// The most bytes a query may have.
pub const MAX_QUERY_BYTES: usize = 512;
/// The most words (terms and phrase words together) a query may have.
pub const MAX_QUERY_TERMS: usize = 16;
/// A term is cut to this many characters, in the index and in a query alike.
pub const MAX_TERM_CHARS: usize = 64;
/// The most distinct terms one text is indexed under; the rest are not searchable.
pub const MAX_DOC_TERMS: usize = 4096;

/// What a term was found in: the same word in a subject and in a sender's address are
/// different index entries, so `from:reviewer` never matches a body that says "reviewer".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// A message's text, a task's instructions or result summary.
    Text,
    /// A message's subject.
    Subject,
    /// An attachment's file name.
    Attachment,
    /// A failed task's failure code.
    Failure,
}

impl Field {
    fn tag(self) -> u8 {
        match self {
            Field::Text => b't',
            Field::Subject => b's',
            Field::Attachment => b'a',
            Field::Failure => b'f',
        }
    }
}

/// The words of `text` as the index and queries see them: NFKC-folded, lowercased, split at
/// everything but letters, digits and `_` (so `code.review` is `code` and `review`, and an id
/// like `msg_01J9…` stays one word), each cut to [`MAX_TERM_CHARS`], single characters dropped.
pub fn terms(text: &str) -> Vec<String> {
    let folded = fold(text);
    words(&folded).map(str::to_owned).collect()
}

/// The distinct terms of `text`, at most [`MAX_DOC_TERMS`], in first-seen order.
pub fn doc_terms(text: &str) -> Vec<String> {
    let folded = fold(text);
    distinct_words(&folded).map(str::to_owned).collect()
}

/// `text` NFKC-folded and lowercased. Indexing runs on every publish, so text that is already
/// in that form (ASCII with no capital is) is not copied, and ASCII skips normalisation, which
/// leaves it unchanged.
fn fold(text: &str) -> std::borrow::Cow<'_, str> {
    if text.is_ascii() {
        match text.bytes().any(|b| b.is_ascii_uppercase()) {
            true => text.to_ascii_lowercase().into(),
            false => text.into(),
        }
    } else {
        text.nfkc()
            .flat_map(char::to_lowercase)
            .collect::<String>()
            .into()
    }
}

/// The words of folded text ([`terms`] says which).
fn words(folded: &str) -> Words<'_> {
    Words {
        rest: folded,
        ascii: folded.is_ascii(),
    }
}

/// [`words`]: ASCII text (most of it) is cut byte by byte, where a byte is a character.
struct Words<'a> {
    rest: &'a str,
    ascii: bool,
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let word_char = |c: char| c.is_alphanumeric() || c == '_';
        loop {
            let start = match self.ascii {
                true => self
                    .rest
                    .bytes()
                    .position(|b| b.is_ascii_alphanumeric() || b == b'_')?,
                false => self.rest.find(word_char)?,
            };
            let rest = &self.rest[start..];
            let len = match self.ascii {
                true => rest
                    .bytes()
                    .position(|b| !(b.is_ascii_alphanumeric() || b == b'_')),
                false => rest.find(|c: char| !word_char(c)),
            }
            .unwrap_or(rest.len());
            let word = &rest[..len];
            self.rest = &rest[len..];
            let (second, cut) = match self.ascii {
                true => (word.len() > 1, word.len().min(MAX_TERM_CHARS)),
                false => (
                    word.chars().nth(1).is_some(),
                    word.char_indices()
                        .nth(MAX_TERM_CHARS)
                        .map_or(word.len(), |(i, _)| i),
                ),
            };
            if second {
                return Some(&word[..cut]);
            }
        }
    }
}

/// The distinct words of folded text, at most [`MAX_DOC_TERMS`], in first-seen order.
fn distinct_words(folded: &str) -> impl Iterator<Item = &str> {
    let mut seen = std::collections::HashSet::new();
    words(folded)
        .filter(move |w| seen.insert(*w))
        .take(MAX_DOC_TERMS)
}

/// A tenant's search key: terms are stored as keyed hashes under it (a blind index).
#[derive(Clone)]
pub struct IndexKey([u8; 16]);

impl fmt::Debug for IndexKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IndexKey(..)")
    }
}

impl IndexKey {
    /// The search key of a tenant whose data key is `tenant_key`: derived, never the data key
    /// itself, so the index's hashes open nothing.
    pub fn derive(tenant_key: &[u8]) -> IndexKey {
        let derived = blake3::derive_key("agentbus 2026-12 search index terms v1", tenant_key);
        let mut key = [0; 16];
        key.copy_from_slice(&derived[..16]);
        IndexKey(key)
    }

    /// The stored form of `term` in `field`: 40 bits of its keyed hash, as 8 base-32 digits (one
    /// word to a full-text engine, short because the engine's work and the bytes a publish
    /// writes grow with it). A collision only costs a candidate the opened text drops.
    pub fn tag(&self, field: Field, term: &str) -> String {
        String::from_utf8_lossy(&base32_40(self.tag_value(field, term))).into_owned()
    }

    /// SipHash-2-4, a keyed hash (a PRF) made for short inputs: a publish hashes every distinct
    /// word it has, and BLAKE3's setup cost several times the hash for words this short.
    /// Answers the hash's top 40 bits, the part a tag keeps.
    fn tag_value(&self, field: Field, term: &str) -> u64 {
        use std::hash::Hasher as _;
        let mut h = siphasher::sip::SipHasher24::new_with_key(&self.0);
        h.write(&[field.tag()]);
        h.write(term.as_bytes());
        h.finish() >> 24
    }

    /// The stored words of a document, separated by single spaces: each distinct term of each
    /// field (at most [`MAX_DOC_TERMS`] a field), tagged, in the order of their hashes, so that
    /// where the words stand in the text is not stored either.
    pub fn tags<'a>(&self, fields: impl IntoIterator<Item = (Field, &'a str)>) -> String {
        // The tags are already keyed hashes: a set of them needs no hashing of its own.
        let mut seen = std::collections::HashSet::with_capacity_and_hasher(256, Unhashed(0));
        for (field, text) in fields {
            let folded = fold(text);
            let before = seen.len();
            for t in words(&folded) {
                seen.insert(self.tag_value(field, t));
                if seen.len() - before == MAX_DOC_TERMS {
                    break;
                }
            }
        }
        let mut tags: Vec<u64> = seen.into_iter().collect();
        tags.sort_unstable();
        let mut out = Vec::with_capacity(tags.len() * 9);
        for tag in tags {
            if !out.is_empty() {
                out.push(b' ');
            }
            out.extend_from_slice(&base32_40(tag));
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The low 40 bits of `v` as 8 digits of `0-9a-v`: lower case and alphanumeric, so one word
/// to FTS5's `ascii` tokenizer and to PostgreSQL alike (a publish writes a hundred).
fn base32_40(v: u64) -> [u8; 8] {
    const DIGITS: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let mut out = [0; 8];
    for (i, d) in out.iter_mut().enumerate() {
        *d = DIGITS[((v >> (35 - 5 * i)) & 0x1f) as usize];
    }
    out
}

/// A hasher for keys that are already uniformly distributed: it passes a `u64` through.
#[derive(Default)]
struct Unhashed(u64);

impl std::hash::Hasher for Unhashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    // A tag's 40 bits spread over the whole word: the table picks a bucket by the low bits and
    // tells entries apart by the top ones.
    fn write_u64(&mut self, n: u64) {
        self.0 = n ^ (n << 24);
    }
}

impl std::hash::BuildHasher for Unhashed {
    type Hasher = Unhashed;

    fn build_hasher(&self) -> Unhashed {
        Unhashed(0)
    }
}

/// Why a query is refused (AB-3070), before any work is done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// More than [`MAX_QUERY_BYTES`].
    #[error("the query is {0} bytes; at most {MAX_QUERY_BYTES}")]
    TooLong(usize),
    /// More than [`MAX_QUERY_TERMS`] words.
    #[error("the query has {0} words; at most {MAX_QUERY_TERMS}")]
    TooManyTerms(usize),
    /// Neither a word nor a filter.
    #[error("the query has no word and no filter to search by")]
    Empty,
    /// A `"` never closed.
    #[error("a quoted phrase is not closed")]
    UnclosedQuote,
    /// `name:` that is not a filter.
    #[error("unknown filter `{0}:`; the filters: {FILTERS}")]
    UnknownFilter(String),
    /// A filter's value it cannot take.
    #[error("`{filter}:{value}`: {why}")]
    BadValue {
        /// The filter.
        filter: &'static str,
        /// Its value, as written.
        value: String,
        /// What it takes.
        why: &'static str,
    },
}

impl crate::errors::Catalogued for QueryError {
    fn code(&self) -> crate::errors::Code {
        crate::errors::Code::InvalidSearch
    }
}

/// The filters a query may hold, as `name:value`.
pub const FILTERS: &str =
    "from, to, type, conversation, capability, state, failure, attachment, since, until";

/// A point in time a filter names: absolute, or relative to the time the query runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Milliseconds since the epoch.
    At(i64),
    /// This many milliseconds before now.
    Ago(i64),
}

impl When {
    /// The instant, given the time now (ms).
    pub fn resolve(self, now_ms: i64) -> i64 {
        match self {
            When::At(t) => t,
            When::Ago(d) => now_ms.saturating_sub(d),
        }
    }

    fn parse(filter: &'static str, v: &str) -> Result<When, QueryError> {
        let bad = || QueryError::BadValue {
            filter,
            value: v.to_owned(),
            why: "a date (2026-12-01), an RFC 3339 time, or an age (30m, 24h, 7d)",
        };
        if let Some((n, unit)) = v.split_at_checked(v.len().saturating_sub(1))
            && let Ok(n) = n.parse::<i64>()
        {
            let ms = match unit {
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => return Err(bad()),
            };
            return n
                .checked_mul(ms)
                .filter(|ms| *ms >= 0)
                .map(When::Ago)
                .ok_or_else(bad);
        }
        let rfc3339 = if v.len() == 10 {
            format!("{v}T00:00:00Z")
        } else {
            v.to_owned()
        };
        rfc3339
            .parse::<crate::timestamp::Timestamp>()
            .map(|t| When::At(t.0))
            .map_err(|_| bad())
    }
}

/// A parsed query: words all of which must occur (phrases in order), and filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Words, each of which must occur.
    pub terms: Vec<String>,
    /// Phrases, each of whose words must occur in this order, next to each other.
    pub phrases: Vec<Vec<String>>,
    /// `from:` an address, or a bare name matched against the last path segment.
    pub from: Option<String>,
    /// `to:` likewise.
    pub to: Option<String>,
    /// `type:` `message`, `task` or a full envelope type.
    pub kind: Option<String>,
    /// `conversation:` a `cnv_` id.
    pub conversation: Option<String>,
    /// `capability:` a task's capability.
    pub capability: Option<String>,
    /// `state:` a task's state.
    pub state: Option<String>,
    /// `failure:` a failed task's failure code.
    pub failure: Option<String>,
    /// `attachment:` words of an attachment's name.
    pub attachment: Vec<String>,
    /// `since:` not before.
    pub since: Option<When>,
    /// `until:` before.
    pub until: Option<When>,
}

impl Query {
    /// Parses `text`: words, `"quoted phrases"`, and `filter:value` (a value may be quoted).
    /// Bounded before anything else is done: [`MAX_QUERY_BYTES`], [`MAX_QUERY_TERMS`].
    pub fn parse(text: &str) -> Result<Query, QueryError> {
        if text.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong(text.len()));
        }
        let mut q = Query::default();
        let mut rest = text.trim_start();
        while !rest.is_empty() {
            let (token, quoted, after) = next_token(rest)?;
            rest = after.trim_start();
            let filter = (!quoted).then(|| token.split_once(':')).flatten();
            match filter {
                // `agent://…` is an address to search for, not a filter.
                Some((name, value)) if !name.is_empty() && !value.starts_with("//") => {
                    q.filter(name, value.to_owned())?;
                }
                _ if quoted => {
                    let words = terms(&token);
                    match words.len() {
                        0 => {}
                        1 => q.terms.extend(words),
                        _ => q.phrases.push(words),
                    }
                }
                _ => q.terms.extend(terms(&token)),
            }
        }
        let words =
            q.terms.len() + q.phrases.iter().map(Vec::len).sum::<usize>() + q.attachment.len();
        if words > MAX_QUERY_TERMS {
            return Err(QueryError::TooManyTerms(words));
        }
        if q == Query::default() {
            return Err(QueryError::Empty);
        }
        Ok(q)
    }

    fn filter(&mut self, name: &str, value: String) -> Result<(), QueryError> {
        let one = |filter: &'static str, v: &str| {
            if v.is_empty() || v.chars().any(char::is_control) {
                Err(QueryError::BadValue {
                    filter,
                    value: v.to_owned(),
                    why: "a value without control characters",
                })
            } else {
                Ok(Some(v.to_owned()))
            }
        };
        match name.to_ascii_lowercase().as_str() {
            "from" => self.from = one("from", &value)?,
            "to" => self.to = one("to", &value)?,
            "type" => self.kind = one("type", &value)?,
            "conversation" => self.conversation = one("conversation", &value)?,
            "capability" => self.capability = one("capability", &value)?,
            "state" => self.state = one("state", &value)?,
            "failure" => self.failure = one("failure", &value)?,
            "attachment" => self.attachment.extend(terms(&value)),
            "since" => self.since = Some(When::parse("since", &value)?),
            "until" => self.until = Some(When::parse("until", &value)?),
            other => return Err(QueryError::UnknownFilter(other.to_owned())),
        }
        Ok(())
    }

    /// Every word the query needs in the text, phrases' words included.
    pub fn text_words(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.terms.iter().map(String::as_str).collect();
        for p in &self.phrases {
            out.extend(p.iter().map(String::as_str));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether the opened `text` (with `subject`) holds every word, and every phrase in order:
    /// what a candidate from the blind index must pass before it is a hit.
    pub fn matches(&self, subject: &str, text: &str) -> bool {
        let mut words = terms(subject);
        words.push(String::new()); // a phrase never runs from the subject into the text
        words.extend(terms(text));
        self.text_words()
            .iter()
            .all(|w| words.iter().any(|t| t == w))
            && self
                .phrases
                .iter()
                .all(|p| words.windows(p.len()).any(|win| win == p.as_slice()))
    }

    /// How well the opened document matches: occurrences of each word (a subject's count
    /// thrice), so rank is the same whichever store found the candidates.
    pub fn score(&self, subject: &str, text: &str) -> u32 {
        let (s, t) = (terms(subject), terms(text));
        self.text_words()
            .iter()
            .map(|w| {
                let n = |v: &[String]| v.iter().filter(|t| t == w).count().min(20) as u32;
                3 * n(&s) + n(&t)
            })
            .sum()
    }
}

/// A document a front end searches itself (this machine's messages, a git share's files), in
/// one shape, so every front end reads a query the same way ([`Query::find`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Doc {
    /// Its id.
    pub id: String,
    /// Its type, as its transport names it (`agentbus.message.v1`, `message`, `request` …).
    pub kind: String,
    /// Its sender, as an address or a transport's name.
    pub from: String,
    /// Its recipient, likewise.
    pub to: String,
    /// Its subject (empty without one).
    pub subject: String,
    /// Its text.
    pub text: String,
    /// When it was written or received (ms).
    pub at_ms: i64,
    /// Its conversation or thread.
    pub conversation: String,
    /// Its attachments' file names.
    pub attachments: Vec<String>,
}

/// A document that matched, with its rank and snippet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The document.
    pub doc: Doc,
    /// [`Query::score`].
    pub score: u32,
    /// The piece of its text around the first match.
    pub snippet: Snippet,
}

/// The characters of a snippet every front end cuts.
pub const SNIPPET_CHARS: usize = 160;

/// Whether `party` is the one a `from:`/`to:` filter names: the same address, or a bare name
/// equal to its last segment (`reviewer` for `agent://acme/backend/reviewer`, `share:acme/reviewer`).
pub fn party_matches(filter: &str, party: &str) -> bool {
    if filter.eq_ignore_ascii_case(party) {
        return true;
    }
    !filter.contains(['/', ':'])
        && party
            .rsplit(['/', ':'])
            .next()
            .is_some_and(|last| last.eq_ignore_ascii_case(filter))
}

/// Whether a document's `kind` is the one a `type:` filter names: the same, or the family
/// (`message` for `agentbus.message.v1`, `task` for every `agentbus.task.*`).
pub fn kind_matches(filter: &str, kind: &str) -> bool {
    kind == filter
        || kind.starts_with(&format!("agentbus.{filter}."))
        || (filter == "task" && kind.starts_with("task"))
}

impl Query {
    /// Whether `d` passes every filter (not the words): `from`, `to`, `type`, `conversation`,
    /// `attachment`, `since`, `until`. Task filters (`capability`, `state`, `failure`) hold only
    /// for documents that carry them, which these do not: they match nothing.
    pub fn admits(&self, d: &Doc, now_ms: i64) -> bool {
        let names = terms(&d.attachments.join("\n"));
        self.from
            .as_deref()
            .is_none_or(|f| party_matches(f, &d.from))
            && self.to.as_deref().is_none_or(|t| party_matches(t, &d.to))
            && self
                .kind
                .as_deref()
                .is_none_or(|k| kind_matches(k, &d.kind))
            && self
                .conversation
                .as_deref()
                .is_none_or(|c| c == d.conversation)
            && self.attachment.iter().all(|w| names.contains(w))
            && self.since.is_none_or(|w| d.at_ms >= w.resolve(now_ms))
            && self.until.is_none_or(|w| d.at_ms < w.resolve(now_ms))
            && self.capability.is_none()
            && self.state.is_none()
            && self.failure.is_none()
    }

    /// The documents of `docs` that match, best first (score, then newest), at most `limit`.
    pub fn find(
        &self,
        docs: impl IntoIterator<Item = Doc>,
        now_ms: i64,
        limit: usize,
    ) -> Vec<Found> {
        let words = self.text_words();
        let mut found: Vec<Found> = docs
            .into_iter()
            .filter(|d| self.admits(d, now_ms) && self.matches(&d.subject, &d.text))
            .map(|d| {
                let body = if d.text.is_empty() {
                    &d.subject
                } else {
                    &d.text
                };
                Found {
                    score: self.score(&d.subject, &d.text),
                    snippet: snippet(body, &words, SNIPPET_CHARS),
                    doc: d,
                }
            })
            .collect();
        found.sort_by(|a, b| {
            (b.score, b.doc.at_ms, &b.doc.id).cmp(&(a.score, a.doc.at_ms, &a.doc.id))
        });
        found.truncate(limit);
        found
    }
}

/// One token of a query: a quoted run, or a run up to the next space (a `name:"…"` value's
/// quotes are read by the caller).
fn next_token(s: &str) -> Result<(String, bool, &str), QueryError> {
    if let Some(inner) = s.strip_prefix('"') {
        let end = inner.find('"').ok_or(QueryError::UnclosedQuote)?;
        return Ok((inner[..end].to_owned(), true, &inner[end + 1..]));
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    let token = &s[..end];
    // `name:"a b"`: the value runs to its closing quote.
    if let Some(at) = token.find(":\"") {
        let start = at + 2;
        let close = s[start..].find('"').ok_or(QueryError::UnclosedQuote)?;
        let value = &s[start..start + close];
        return Ok((
            format!("{}:{value}", &token[..at]),
            false,
            &s[start + close + 1..],
        ));
    }
    Ok((token.to_owned(), false, &s[end..]))
}

/// A piece of an opened text around its first hit, with where the query's words are in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// The text, `…` where it was cut.
    pub text: String,
    /// Byte ranges of `text` to highlight; the front end escapes and marks them.
    pub highlights: Vec<Range<usize>>,
}

/// A snippet of at most about `max_chars` characters of `text` around the first of `words`,
/// cut at word boundaries; the start of `text` when none occurs.
pub fn snippet(text: &str, words: &[&str], max_chars: usize) -> Snippet {
    // Word spans in the original text, with their folded form.
    let mut spans: Vec<(Range<usize>, String)> = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
        let inside = c.is_alphanumeric() || c == '_';
        match (inside && i < text.len(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let word = &text[s..i];
                let folded: String = word.nfkc().flat_map(char::to_lowercase).collect();
                spans.push((s..i, folded.chars().take(MAX_TERM_CHARS).collect()));
                start = None;
            }
            _ => {}
        }
    }
    let hit = |w: &String| words.iter().any(|q| q == w);
    let first = spans.iter().position(|(_, w)| hit(w));
    let centre = first.map(|i| spans[i].0.start).unwrap_or(0);
    // Back up about a third of the window, to a word's start.
    let lead = max_chars / 3;
    let mut from = spans
        .iter()
        .map(|(r, _)| r.start)
        .filter(|s| *s <= centre)
        .rev()
        .find(|s| text[*s..centre].chars().count() >= lead)
        .unwrap_or(0);
    if text[..centre].chars().count() <= lead {
        from = 0;
    }
    // The hit itself always fits: a window too small for the lead starts at the hit.
    if let Some(i) = first
        && text[from..spans[i].0.end].chars().count() > max_chars
    {
        from = centre;
    }
    let mut to = text.len();
    if let Some((i, _)) = text[from..].char_indices().nth(max_chars) {
        // End at the last word boundary before the limit.
        let cut = from + i;
        to = spans
            .iter()
            .map(|(r, _)| r.end)
            .rfind(|e| *e <= cut && *e > from)
            .unwrap_or(cut);
    }
    let mut out = String::new();
    let offset: isize = if from > 0 {
        out.push('…');
        '…'.len_utf8() as isize - from as isize
    } else {
        0
    };
    out.push_str(&text[from..to]);
    if to < text.len() {
        out.push('…');
    }
    let highlights = spans
        .iter()
        .filter(|(r, w)| r.start >= from && r.end <= to && hit(w))
        .map(|(r, _)| ((r.start as isize + offset) as usize)..((r.end as isize + offset) as usize))
        .collect();
    Snippet {
        text: out,
        highlights,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_fold_case_and_width_and_split_at_punctuation() {
        assert_eq!(
            terms("The v2 SCHEMA, code.review: ＡＢ msg_01J9ZK!"),
            ["the", "v2", "schema", "code", "review", "ab", "msg_01j9zk"]
        );
        assert_eq!(terms("a I ü"), Vec::<String>::new());
        assert_eq!(terms(&"x".repeat(100))[0].len(), MAX_TERM_CHARS);
    }

    #[test]
    fn ascii_text_folds_as_normalisation_would() {
        // The fast path for ASCII must index exactly what the general one would.
        let all: String = (0u8..128).map(char::from).collect();
        for text in [all.as_str(), "Mixed CASE code.review_V2", "plain lower", ""] {
            let general: String = text.nfkc().flat_map(char::to_lowercase).collect();
            assert_eq!(fold(text), general);
        }
        assert!(matches!(
            fold("already folded"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn words_are_cut_the_same_in_ascii_and_in_any_text() {
        // The byte-wise path for ASCII and the character-wise one agree with the definition.
        let reference = |folded: &str| -> Vec<String> {
            folded
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| w.chars().count() > 1)
                .map(|w| w.chars().take(MAX_TERM_CHARS).collect())
                .collect()
        };
        let long = "y".repeat(100);
        for text in [
            "code.review: v2 a b_c __ x9 ok!",
            "naïve café, ünïcode — ab ﬁ x",
            long.as_str(),
            "  ",
            "é",
            "日本語 テキスト a1",
        ] {
            let folded = fold(text);
            let got: Vec<String> = words(&folded).map(str::to_owned).collect();
            assert_eq!(got, reference(&folded), "{text}");
        }
    }

    #[test]
    fn tags_are_keyed_by_tenant_and_field() {
        let (a, b) = (IndexKey::derive(&[1; 32]), IndexKey::derive(&[2; 32]));
        assert_eq!(a.tag(Field::Text, "schema"), a.tag(Field::Text, "schema"));
        assert_ne!(a.tag(Field::Text, "schema"), b.tag(Field::Text, "schema"));
        assert_ne!(
            a.tag(Field::Text, "schema"),
            a.tag(Field::Subject, "schema")
        );
        let tag = a.tag(Field::Text, "schema");
        assert!(tag.len() == 8 && tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'v')));
        assert_eq!(&base32_40(0xff_ffff_ffff), b"vvvvvvvv");
        assert_eq!(&base32_40(1 << 35 | 33), b"10000011");
        assert!(!tag.contains("schema"));
        // Duplicates are stored once.
        let mut tags = [tag.clone(), a.tag(Field::Text, "v2")];
        tags.sort();
        assert_eq!(
            a.tags([(Field::Text, "schema schema v2")]),
            tags.join(" "),
            "each once, in hash order, space-separated"
        );
        assert_eq!(format!("{a:?}"), "IndexKey(..)", "the key never prints");
    }

    #[test]
    fn a_query_has_words_phrases_and_filters() {
        let q = Query::parse(
            r#"v2 "the schema" from:reviewer type:message since:7d attachment:"lint report.txt" capability:code.review"#,
        )
        .unwrap();
        assert_eq!(q.terms, ["v2"]);
        assert_eq!(q.phrases, [vec!["the".to_owned(), "schema".to_owned()]]);
        assert_eq!(q.from.as_deref(), Some("reviewer"));
        assert_eq!(q.kind.as_deref(), Some("message"));
        assert_eq!(q.capability.as_deref(), Some("code.review"));
        assert_eq!(q.attachment, ["lint", "report", "txt"]);
        assert_eq!(q.since, Some(When::Ago(7 * 86_400_000)));
        assert_eq!(
            Query::parse("until:2026-12-01").unwrap().until,
            Some(When::At(1_796_083_200_000))
        );
        // An address is a word, not a filter.
        assert_eq!(
            Query::parse("agent://acme/backend/reviewer").unwrap().terms,
            ["agent", "acme", "backend", "reviewer"]
        );
    }

    #[test]
    fn hostile_queries_are_refused_before_any_work() {
        for (q, want) in [
            (
                &"a".repeat(MAX_QUERY_BYTES + 1)[..],
                QueryError::TooLong(513),
            ),
            ("", QueryError::Empty),
            ("  !!! ", QueryError::Empty),
            ("\"open", QueryError::UnclosedQuote),
            ("color:red", QueryError::UnknownFilter("color".into())),
        ] {
            assert_eq!(Query::parse(q), Err(want), "{q:?}");
        }
        let many = (0..17)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(Query::parse(&many), Err(QueryError::TooManyTerms(17)));
        for bad in [
            "since:yesterday",
            "since:99999999999999999d",
            "until:2026-13-40",
        ] {
            assert!(
                matches!(Query::parse(bad), Err(QueryError::BadValue { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_opened_text_decides_a_hit_and_its_rank() {
        let q = Query::parse(r#"schema "v2 draft""#).unwrap();
        assert!(q.matches("", "The v2 draft of the schema is ready"));
        assert!(!q.matches("", "The draft v2 of the schema"), "phrase order");
        assert!(
            !q.matches("v2", "draft schema"),
            "no phrase across subject and text"
        );
        assert!(q.score("schema", "v2 draft schema") > q.score("", "v2 draft schema"));
    }

    #[test]
    fn documents_are_filtered_ranked_and_cut_alike() {
        let doc = |id: &str, from: &str, subject: &str, text: &str, at_ms: i64| Doc {
            id: id.into(),
            kind: "agentbus.message.v1".into(),
            from: from.into(),
            to: "share:acme/ops".into(),
            subject: subject.into(),
            text: text.into(),
            at_ms,
            ..Doc::default()
        };
        let docs = vec![
            doc(
                "a",
                "agent://acme/backend/reviewer",
                "",
                "the schema is fine",
                10,
            ),
            doc("b", "share:acme/reviewer", "schema", "see subject", 5),
            doc("c", "agent://acme/backend/bot", "", "schema too", 20),
        ];
        let q = Query::parse("schema from:reviewer type:message since:1m").unwrap();
        let found = q.find(docs.clone(), 30, 10);
        let ids: Vec<&str> = found.iter().map(|f| f.doc.id.as_str()).collect();
        assert_eq!(
            ids,
            ["b", "a"],
            "the subject ranks first; bot is not the reviewer"
        );
        assert_eq!(found[1].snippet.highlights.len(), 1);
        assert!(
            Query::parse("schema state:failed")
                .unwrap()
                .find(docs, 30, 10)
                .is_empty()
        );
        assert!(party_matches("reviewer", "agent://acme/backend/reviewer"));
        assert!(!party_matches("view", "agent://acme/backend/reviewer"));
        assert!(kind_matches("task", "agentbus.task.result.v1"));
    }

    #[test]
    fn snippets_cut_at_words_and_mark_hits() {
        let text = "Alpha beta gamma delta. The reviewer said the V2 schema needs a version field \
                    before release, and nothing else.";
        let s = snippet(text, &["schema"], 40);
        assert!(s.text.starts_with('…') && s.text.ends_with('…'), "{s:?}");
        assert!(!s.text.contains("Alpha"), "{s:?}");
        let marked: Vec<&str> = s.highlights.iter().map(|r| &s.text[r.clone()]).collect();
        assert_eq!(marked, ["schema"]);
        // No hit: the start.
        let s = snippet("short text", &["absent"], 40);
        assert_eq!((s.text.as_str(), s.highlights.len()), ("short text", 0));
        // Multibyte text stays on character boundaries.
        let s = snippet("ééé schéma ü", &["schéma"], 8);
        let marked: Vec<&str> = s.highlights.iter().map(|r| &s.text[r.clone()]).collect();
        assert_eq!(marked, ["schéma"], "{s:?}");
    }
}
