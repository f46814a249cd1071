//! Redaction of credentials before a text is stored or hashed (LM-18, G-LM-13).
//!
//! The store is a plain file every session on the machine reads, and its lines reach prompts and
//! terminals, so a token pasted into a tell must not land there. The rules are data,
//! `data/redaction-rules.json`: one regular expression per credential family (cloud, payment, VCS
//! and model-provider keys, private key blocks, JWTs, URL passwords, authorization headers, and
//! values after secret-sounding names), each naming the maintained gitleaks rule it corresponds to.
//! They are applied in order, each replacing the secret with `[REDACTED:<rule id>]`; a value an
//! earlier rule already replaced is left alone. `docs/local.md` lists them; the positive and
//! negative cases are `tests/data/redaction.json`.

use std::sync::OnceLock;

use regex::{Captures, Regex};

/// The rule file, compiled in.
const RULES_JSON: &str = include_str!("../data/redaction-rules.json");

/// What replaces a secret starts with this.
pub const MARK: &str = "[REDACTED";

/// One redaction rule.
#[derive(Debug)]
pub struct Rule {
    /// The id a replacement names: `[REDACTED:<id>]`.
    pub id: String,
    /// What it finds.
    pub description: String,
    /// The capture group holding the secret (0: the whole match).
    secret: usize,
    /// Only a secret holding a digit or `=` counts (for rules whose words also occur in prose).
    needs_digit: bool,
    /// What a text must contain (lower case) for the rule to run.
    keywords: Vec<String>,
    pattern: String,
    /// Compiled on first need: most texts need no rule at all.
    regex: OnceLock<Option<Regex>>,
}

impl Rule {
    /// The compiled regex; `None` when it does not compile, or names a group it lacks (a test
    /// checks that no rule does).
    pub fn regex(&self) -> Option<&Regex> {
        self.regex
            .get_or_init(|| {
                Regex::new(&self.pattern)
                    .ok()
                    .filter(|r| self.secret < r.captures_len())
            })
            .as_ref()
    }

    fn may_match(&self, lower: &str) -> bool {
        self.keywords.iter().any(|k| lower.contains(k.as_str()))
    }
}

#[derive(serde::Deserialize)]
struct RuleText {
    id: String,
    description: String,
    secret: usize,
    #[serde(default)]
    needs_digit: bool,
    keywords: Vec<String>,
    regex: String,
}

#[derive(serde::Deserialize)]
struct RuleFile {
    rules: Vec<RuleText>,
}

/// The rules in the order they apply.
pub fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        let file: RuleFile = serde_json::from_str(RULES_JSON).unwrap_or(RuleFile { rules: vec![] });
        file.rules
            .into_iter()
            .map(|r| Rule {
                id: r.id,
                description: r.description,
                secret: r.secret,
                needs_digit: r.needs_digit,
                keywords: r.keywords.iter().map(|k| k.to_lowercase()).collect(),
                pattern: r.regex,
                regex: OnceLock::new(),
            })
            .collect()
    })
}

/// How many rules the rule file declares (to check that every one loaded).
pub fn declared_rules() -> usize {
    serde_json::from_str::<RuleFile>(RULES_JSON).map_or(0, |f| f.rules.len())
}

/// Returns `text` with every credential the rules find replaced. A rule runs only when the text
/// holds one of its keywords; a rule whose regex does not compile is skipped, so a bad edit can
/// never stop a message from being stored.
pub fn redact(text: &str) -> String {
    let lower = text.to_lowercase();
    let mut out = text.to_owned();
    for rule in rules().iter().filter(|r| r.may_match(&lower)) {
        let Some(regex) = rule.regex() else { continue };
        if !regex.is_match(&out) {
            continue;
        }
        out = regex
            .replace_all(&out, |caps: &Captures<'_>| replace(rule, caps))
            .into_owned();
    }
    out
}

/// The match with its secret replaced, or unchanged when an earlier rule already replaced it.
fn replace(rule: &Rule, caps: &Captures<'_>) -> String {
    let (Some(whole), Some(secret)) = (caps.get(0), caps.get(rule.secret)) else {
        return caps.get(0).map_or(String::new(), |m| m.as_str().to_owned());
    };
    let prose = rule.needs_digit
        && !secret
            .as_str()
            .bytes()
            .any(|b| b.is_ascii_digit() || b == b'=');
    if prose || secret.as_str().starts_with(MARK) {
        return whole.as_str().to_owned();
    }
    let w = whole.as_str();
    let (from, to) = (secret.start() - whole.start(), secret.end() - whole.start());
    format!("{}{MARK}:{}]{}", &w[..from], rule.id, &w[to..])
}
