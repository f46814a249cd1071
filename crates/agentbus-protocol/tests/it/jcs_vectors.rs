//! RFC 8785 §3 through the author's reference vectors (WP-3.1-2).

use agentbus_protocol::{jcs, json};

use crate::{data_dir, read};

#[test]
fn wp_3_1_2_reference_vectors_canonicalise_byte_for_byte() {
    let dir = data_dir().join("vectors/jcs/input");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let input = read(&format!("vectors/jcs/input/{name}"));
        let expected = read(&format!("vectors/jcs/output/{name}"));
        let value = json::parse(&input).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = jcs::canonicalize(&value).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected),
            "{name}"
        );
        // Canonical output is a fixed point.
        let again = jcs::canonicalize(&json::parse(&got).unwrap()).unwrap();
        assert_eq!(again, got, "{name} is not idempotent");
        seen += 1;
    }
    assert_eq!(seen, 6, "every vector file ran");
}
