//! Ed25519 (RFC 8032) with strict verification, against published vectors (WP-3.1-3).

use serde_json::Value;

use agentbus_protocol::signing::{SigningKey, verify_raw};

use crate::read;

fn unhex<const N: usize>(s: &str) -> [u8; N] {
    hex::decode(s).unwrap().try_into().unwrap()
}

#[test]
fn wp_3_1_3_rfc8032_and_cryptography_vectors_sign_and_verify() {
    let text = String::from_utf8(read("vectors/ed25519/rfc8032-and-more-sign.input")).unwrap();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(':').collect();
        let seed: [u8; 32] = unhex(&fields[0][..64]);
        let public: [u8; 32] = unhex(fields[1]);
        let msg = hex::decode(fields[2]).unwrap();
        let sig: [u8; 64] = unhex(&fields[3][..128]);
        let key = SigningKey::from_seed(seed);
        assert_eq!(key.public().to_bytes(), public, "line {n}: public key");
        assert_eq!(key.sign(&msg), sig, "line {n}: deterministic signature");
        assert!(verify_raw(&public, &msg, &sig), "line {n}: verifies");
        n += 1;
    }
    assert_eq!(n, 1024);
}

#[test]
fn wp_3_1_3_rfc8032_section_7_1_test_1() {
    // RFC 8032 §7.1 TEST 1: the empty message.
    let key = SigningKey::from_seed(unhex(
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    ));
    assert_eq!(
        hex::encode(key.public().to_bytes()),
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    );
    assert_eq!(
        hex::encode(key.sign(b"")),
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    );
}

#[test]
fn wp_3_1_3_wycheproof_all_151_cases_agree() {
    let doc: Value =
        serde_json::from_slice(&read("vectors/ed25519/wycheproof-ed25519_test.json")).unwrap();
    let mut n = 0;
    for group in doc["testGroups"].as_array().unwrap() {
        let pk_hex = group["publicKey"]["pk"].as_str().unwrap();
        for case in group["tests"].as_array().unwrap() {
            let msg = hex::decode(case["msg"].as_str().unwrap()).unwrap();
            let sig_bytes = hex::decode(case["sig"].as_str().unwrap()).unwrap();
            let pk: Option<[u8; 32]> = hex::decode(pk_hex).ok().and_then(|b| b.try_into().ok());
            let got = match (pk, <[u8; 64]>::try_from(sig_bytes)) {
                (Some(pk), Ok(sig)) => verify_raw(&pk, &msg, &sig),
                _ => false,
            };
            let want = case["result"].as_str().unwrap() == "valid";
            assert_eq!(got, want, "tcId {} ({})", case["tcId"], case["comment"]);
            n += 1;
        }
    }
    assert_eq!(n, 151);
}

/// Our policy on the ed25519-speccheck edge cases is the "Dalek strict" row of
/// `speccheck-results.md`: only case 3 (mixed-order A and R, valid under both the cofactored and
/// the cofactorless equation) is accepted. Small-order keys or R, non-canonical S, R or A, and
/// signatures valid only under the cofactored equation are refused. `docs/protocol.md` explains it.
#[test]
fn wp_3_1_3_speccheck_policy_is_strict() {
    let cases: Value =
        serde_json::from_slice(&read("vectors/ed25519/speccheck-cases.json")).unwrap();
    let got: Vec<bool> = cases
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let msg = hex::decode(c["message"].as_str().unwrap()).unwrap();
            let pk: [u8; 32] = unhex(c["pub_key"].as_str().unwrap());
            let sig: [u8; 64] = unhex(c["signature"].as_str().unwrap());
            verify_raw(&pk, &msg, &sig)
        })
        .collect();
    let mut expected = [false; 12];
    expected[3] = true;
    assert_eq!(got, expected);
    // The published table's row for this policy.
    let table = String::from_utf8(read("vectors/ed25519/speccheck-results.md")).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("|Dalek strict"))
        .unwrap();
    let marks: Vec<bool> = row
        .split('|')
        .skip(2)
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim() == "V")
        .collect();
    assert_eq!(marks, expected);
}
