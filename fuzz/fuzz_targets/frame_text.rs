//! Foreign text on its way to a model or a terminal: a body never closes or opens a frame, and
//! terminal text never carries an escape or a control character but newline and tab.
#![no_main]

use agentbus_protocol::{frame, text};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let body = frame::neutralize_body(s);
    assert!(
        !body.to_ascii_lowercase().contains("</agentbus"),
        "{body:?}"
    );
    assert!(!body.to_ascii_lowercase().contains("<agentbus"), "{body:?}");
    let shown = text::for_terminal(s);
    assert!(
        !shown
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "{shown:?}"
    );
    let quoted = text::shell_quote(s);
    assert!(!quoted.is_empty());
});
