//! Links from a trace id to the operator's trace viewer: a template such as
//! `https://jaeger.example/trace/{trace_id}` (`AGENTBUS_TRACE_URL` for the command line, the
//! gateway's `trace_url` setting for the console).

/// The placeholder a template must hold.
pub const PLACEHOLDER: &str = "{trace_id}";

/// Why a template is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// No `{trace_id}` in it: every trace would get the same link.
    #[error("the trace URL template has no {{trace_id}}")]
    NoPlaceholder,
    /// Not an http(s) URL: a link in a terminal or a page must not run anything else.
    #[error("the trace URL template is not an http:// or https:// URL")]
    NotHttp,
}

impl crate::errors::Catalogued for TemplateError {
    fn code(&self) -> crate::errors::Code {
        crate::errors::Code::SettingUnusable
    }
}

/// Checks a template once, where it is read.
pub fn check(template: &str) -> Result<(), TemplateError> {
    let lower = template.trim().to_ascii_lowercase();
    if !(lower.starts_with("https://") || lower.starts_with("http://")) {
        return Err(TemplateError::NotHttp);
    }
    if !template.contains(PLACEHOLDER) {
        return Err(TemplateError::NoPlaceholder);
    }
    Ok(())
}

/// The link for `trace_id` (32 lowercase hex digits, W3C Trace Context) under a template that
/// passed [`check`]; `None` for anything that is not a trace id, so nothing a peer wrote in a
/// `traceparent` lands in a URL.
pub fn link(template: &str, trace_id: &str) -> Option<String> {
    let hex = trace_id.len() == 32
        && trace_id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex && trace_id != "0".repeat(32) && check(template).is_ok())
        .then(|| template.trim().replace(PLACEHOLDER, trace_id))
}

/// The distinct trace ids of `traceparents` (W3C `00-<trace id>-<span id>-<flags>`), in the
/// order met; a value with no 32-hex trace id in its place is skipped.
pub fn trace_ids<'a>(traceparents: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in traceparents {
        let Some(id) = t
            .get(3..35)
            .filter(|id| id.bytes().all(|b| b.is_ascii_hexdigit()))
        else {
            continue;
        };
        if !out.iter().any(|o| o == id) {
            out.push(id.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn trace_ids_are_distinct_and_real() {
        let a = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let b = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01";
        assert_eq!(trace_ids([a, "junk", b, "00-xyz"]), [ID]);
    }

    #[test]
    fn a_template_gets_the_trace_id() {
        assert_eq!(
            link("https://jaeger.example/trace/{trace_id}", ID).as_deref(),
            Some("https://jaeger.example/trace/4bf92f3577b34da6a3ce929d0e0e4736")
        );
    }

    #[test]
    fn only_a_real_trace_id_under_a_checked_template_makes_a_link() {
        let t = "https://jaeger.example/trace/{trace_id}";
        for bad in [
            "",
            "4BF92F3577B34DA6A3CE929D0E0E4736",
            "x\" onclick=\"",
            &"0".repeat(32),
        ] {
            assert_eq!(link(t, bad), None, "{bad:?}");
        }
        assert_eq!(
            check("javascript:alert({trace_id})"),
            Err(TemplateError::NotHttp)
        );
        assert_eq!(
            check("https://jaeger.example/"),
            Err(TemplateError::NoPlaceholder)
        );
        assert_eq!(link("https://jaeger.example/", ID), None);
    }
}
