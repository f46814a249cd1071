//! agentshare frontmatter, as another implementation might write it: the lenient readers never
//! panic, whatever the bytes.
#![no_main]

use agentbus_share::frontmatter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = frontmatter::split(text);
    let _ = frontmatter::read_message(text);
    let _ = frontmatter::read_publication(text);
});
