//! The `sig` attribute: what parses renders back to the same value.
#![no_main]

use agentbus_protocol::signing::Sig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sig) = Sig::parse(text) else { return };
    assert_eq!(Sig::parse(&sig.render()).as_ref(), Ok(&sig));
});
