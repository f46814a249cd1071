//! AWS Signature Version 4 pre-signing of one S3 request in its query string ("Authenticating
//! Requests: Using Query Parameters", S3 API reference), with request headers bound to the
//! signature. The upload URL of §9 binds `content-length` this way, which object_store's signer
//! refuses to sign; the store then answers any other length with `SignatureDoesNotMatch`.
//!
//! The payload is `UNSIGNED-PAYLOAD`: the holder of the URL sends the body, and what it must be is
//! bound through headers (and checked again by `POST /v1/blobs/{id}/complete`).

use ring::hmac;
use sha2::Digest as _;

/// The credentials and scope a URL is signed under.
pub struct Credentials<'a> {
    /// The access key id (it appears in the URL).
    pub access_key_id: &'a str,
    /// The secret access key (it never does).
    pub secret_access_key: &'a str,
    /// The bucket's region.
    pub region: &'a str,
}

/// Why a URL cannot be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The URL is not `scheme://host[:port]/path` without a query.
    #[error("cannot pre-sign {0:?}: not an absolute URL without a query")]
    Url(String),
    /// The date is not `YYYYMMDDTHHMMSSZ`.
    #[error("cannot pre-sign at {0:?}: not a SigV4 date (YYYYMMDDTHHMMSSZ)")]
    Date(String),
}

/// `url` (an object's URL, its path already percent-encoded as S3 expects, without a query)
/// pre-signed for `method` at `date` (`YYYYMMDDTHHMMSSZ`, UTC), valid `expires_s` seconds,
/// binding `headers` (names in any case) besides `host`.
pub fn presign(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    date: &str,
    expires_s: u64,
    key: &Credentials<'_>,
) -> Result<String, SignError> {
    let bad_url = || SignError::Url(url.to_owned());
    let (_, rest) = url.split_once("://").ok_or_else(bad_url)?;
    if url.contains(['?', '#']) {
        return Err(bad_url());
    }
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(bad_url());
    }
    let day = date
        .get(..8)
        .filter(|_| date.len() == 16 && date.as_bytes()[8] == b'T' && date.ends_with('Z'))
        .ok_or_else(|| SignError::Date(date.to_owned()))?;
    let scope = format!("{day}/{}/s3/aws4_request", key.region);

    let mut bound: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
        .chain([("host".to_owned(), host.to_owned())])
        .collect();
    bound.sort();
    let signed_headers = bound
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_headers: String = bound.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();

    // Already in the order SigV4 sorts them (by name, byte-wise).
    let query = [
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA256".to_owned()),
        ("X-Amz-Credential", format!("{}/{scope}", key.access_key_id)),
        ("X-Amz-Date", date.to_owned()),
        ("X-Amz-Expires", expires_s.to_string()),
        ("X-Amz-SignedHeaders", signed_headers.clone()),
    ]
    .iter()
    .map(|(k, v)| format!("{k}={}", uri_encode(v)))
    .collect::<Vec<_>>()
    .join("&");

    let canonical_request = format!(
        "{method}\n{path}\n{query}\n{canonical_headers}\n{signed_headers}\nUNSIGNED-PAYLOAD"
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex::encode(sha2::Sha256::digest(canonical_request.as_bytes()))
    );
    let mut signing = format!("AWS4{}", key.secret_access_key).into_bytes();
    for part in [day, key.region, "s3", "aws4_request"] {
        signing = mac(&signing, part.as_bytes());
    }
    let signature = hex::encode(mac(&signing, string_to_sign.as_bytes()));
    Ok(format!("{url}?{query}&X-Amz-Signature={signature}"))
}

/// The SigV4 date of Unix milliseconds `ms`: `YYYYMMDDTHHMMSSZ`.
pub fn date_of(ms: i64) -> String {
    agentbus_protocol::timestamp::Timestamp(ms)
        .to_string()
        .chars()
        .take(19)
        .filter(|c| !matches!(c, '-' | ':'))
        .chain(['Z'])
        .collect()
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

/// RFC 3986 percent-encoding of everything but the unreserved characters, as SigV4 wants for
/// query names and values.
fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The S3 settings give URLs or dates a request cannot be signed with: the object store is not
/// usable as configured.
impl agentbus_protocol::errors::Catalogued for SignError {
    fn code(&self) -> agentbus_protocol::Code {
        agentbus_protocol::Code::BlobStoreUnusable
    }

    fn fix_values(&self) -> Vec<(&'static str, String)> {
        let fix = "check the s3_endpoint, s3_bucket and s3_prefix settings (`agentbus gateway --print-config`)";
        vec![("fix", fix.to_owned())]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The vectors of tests/data/sigv4/presign.json: AWS's published example, and PUTs binding
    /// `content-length` as botocore signs them (tests/s3/sigv4_vectors.py made the file).
    #[test]
    fn presigned_urls_match_aws_example_and_botocore() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../tests/data/sigv4/presign.json")).unwrap();
        let cases = doc["cases"].as_array().unwrap();
        assert!(cases.len() >= 3);
        for c in cases {
            let s = |k: &str| c[k].as_str().unwrap();
            let headers: Vec<(&str, &str)> = c["signed_headers"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
                .collect();
            let key = Credentials {
                access_key_id: s("access_key_id"),
                secret_access_key: s("secret_access_key"),
                region: s("region"),
            };
            let got = presign(
                s("method"),
                s("url"),
                &headers,
                s("date"),
                c["expires_s"].as_u64().unwrap(),
                &key,
            )
            .unwrap();
            assert_eq!(got, s("presigned"), "{}", s("name"));
        }
    }

    #[test]
    fn dates_and_urls_that_cannot_be_signed_are_refused() {
        let key = Credentials {
            access_key_id: "a",
            secret_access_key: "b",
            region: "us-east-1",
        };
        for url in ["no-scheme/x", "http:///x", "http://h/x?y=1"] {
            assert!(matches!(
                presign("PUT", url, &[], "20130524T000000Z", 1, &key),
                Err(SignError::Url(_))
            ));
        }
        assert!(matches!(
            presign("PUT", "http://h/x", &[], "2013-05-24", 1, &key),
            Err(SignError::Date(_))
        ));
        assert_eq!(date_of(1_369_353_600_000), "20130524T000000Z");
        assert_eq!(date_of(1_796_166_309_123), "20261201T230509Z");
    }
}
