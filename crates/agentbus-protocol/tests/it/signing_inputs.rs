//! §3.1 signing inputs shared with the Python and TypeScript libraries: each case under
//! `tests/data/signing/` is a seed, a key id and an envelope; `<case>.input` holds the exact bytes
//! signed (RFC 8785, without `sig` and the gateway-set attributes) and `<case>.sig` the `sig`
//! attribute. Ed25519 is deterministic, so every implementation must write both byte for byte.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

use agentbus_protocol::ids::{Id, IdKind};
use agentbus_protocol::signing::{self, SigningKey};

use crate::{data_dir, expect_file};

#[derive(Deserialize)]
struct Case {
    seed: String,
    key_id: String,
    envelope: serde_json::Map<String, serde_json::Value>,
}

#[test]
fn wp_3_1_signing_inputs_and_signatures_match_the_shared_files() {
    let mut names: Vec<_> = std::fs::read_dir(data_dir().join("signing"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    names.sort();
    assert!(names.len() >= 4);
    for path in names {
        let case: Case = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let seed: [u8; 32] = URL_SAFE_NO_PAD
            .decode(&case.seed)
            .unwrap()
            .try_into()
            .unwrap();
        let key = SigningKey::from_seed(seed);
        let bytes = signing::signing_bytes(&case.envelope).unwrap();
        expect_file(
            &format!("signing/{stem}.input"),
            std::str::from_utf8(&bytes).unwrap(),
        );
        let mut env = case.envelope.clone();
        let key_id = Id::parse_kind(&case.key_id, IdKind::Key).unwrap();
        signing::sign_envelope(&mut env, &key, key_id).unwrap();
        let sig = env["sig"].as_str().unwrap().to_owned();
        expect_file(&format!("signing/{stem}.sig"), &format!("{sig}\n"));
        signing::verify_envelope(&env, &key.public()).unwrap();
        // The public key, so a verifier needs no Ed25519 key derivation of its own.
        expect_file(
            &format!("signing/{stem}.pub"),
            &format!("{}\n", key.public().to_base64url()),
        );
    }
}
