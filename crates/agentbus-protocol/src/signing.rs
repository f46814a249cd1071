//! Ed25519 signing of envelopes (§3.1) with strict verification.
//!
//! The signed bytes are the RFC 8785 form of the envelope without `sig` and without every
//! gateway-set attribute ([`crate::envelope::GATEWAY_SET`], which adds `to_id` to §3.1's list:
//! checklist G-WP-2, decision 2). `sig` is `ed25519:<key_id>:<base64url signature, no padding>`.
//!
//! Verification is strict (ed25519-dalek's `verify_strict`): a signature whose `S` is not reduced,
//! a small-order public key and a small-order `R` are all refused, so no signature is malleable and
//! no weak key can make an arbitrary message verify. `docs/protocol.md` records the policy for each
//! of the ed25519-speccheck edge cases.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{Signature, Signer as _};
use serde_json::{Map, Value};

use crate::envelope::GATEWAY_SET;
use crate::ids::{Id, IdKind};
use crate::jcs::{self, JcsError};

/// The algorithm label in `sig`.
pub const SIG_ALGORITHM: &str = "ed25519";

/// A private Ed25519 key.
#[derive(Clone)]
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print private material.
        f.debug_tuple("SigningKey")
            .field(&self.public().to_base64url())
            .finish()
    }
}

/// A public Ed25519 key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PublicKey")
            .field(&self.to_base64url())
            .finish()
    }
}

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key file is neither a base64url seed nor PKCS#8 PEM.
    #[error(
        "a key file holds the 32-byte Ed25519 seed as base64url on one line, or a PKCS#8 PEM private key"
    )]
    PrivateFormat,
    /// The public key is not 32 bytes of base64url.
    #[error("a public key is 32 bytes of base64url without padding")]
    PublicFormat,
    /// The bytes are not a point on the curve.
    #[error("the public key is not a valid Ed25519 point")]
    NotAPoint,
    /// The point has small order: any signature could verify under it.
    #[error("the public key is a small-order point; it is refused")]
    Weak,
}

impl KeyError {
    /// The catalogue code for a refused public key.
    pub fn code(&self) -> crate::Code {
        crate::Code::WeakKey
    }
}

impl SigningKey {
    /// The key for a 32-byte seed (RFC 8032 §5.1.5's private key).
    pub fn from_seed(seed: [u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// The 32-byte seed.
    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Signs raw bytes (pure Ed25519, no pre-hash).
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }

    /// Reads a key file: the seed as base64url on one line, or a PKCS#8 PEM private key.
    pub fn from_key_file(text: &str) -> Result<SigningKey, KeyError> {
        let trimmed = text.trim();
        if trimmed.starts_with("-----BEGIN") {
            return ed25519_dalek::SigningKey::from_pkcs8_pem(trimmed)
                .map(SigningKey)
                .map_err(|_| KeyError::PrivateFormat);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(trimmed)
            .map_err(|_| KeyError::PrivateFormat)?;
        let seed: [u8; 32] = bytes.try_into().map_err(|_| KeyError::PrivateFormat)?;
        Ok(SigningKey::from_seed(seed))
    }

    /// The key file form: the seed as base64url and a newline.
    pub fn to_key_file(&self) -> String {
        format!("{}\n", URL_SAFE_NO_PAD.encode(self.seed()))
    }

    /// The key as PKCS#8 PEM, for tools that want it.
    pub fn to_pkcs8_pem(&self) -> String {
        self.0
            .to_pkcs8_pem(Default::default())
            .map(|s| s.to_string())
            .unwrap_or_default()
    }
}

impl PublicKey {
    /// Reads a base64url public key, refusing points that are not on the curve or have small order.
    pub fn from_base64url(s: &str) -> Result<PublicKey, KeyError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(s.trim())
            .map_err(|_| KeyError::PublicFormat)?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| KeyError::PublicFormat)?;
        PublicKey::from_bytes(&bytes)
    }

    /// Builds a public key from its 32 bytes, refusing non-points and small-order points.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<PublicKey, KeyError> {
        let vk = ed25519_dalek::VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::NotAPoint)?;
        if vk.is_weak() {
            return Err(KeyError::Weak);
        }
        Ok(PublicKey(vk))
    }

    /// The 32 bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The base64url form without padding.
    pub fn to_base64url(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.to_bytes())
    }

    /// Strictly verifies `signature` over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        self.0
            .verify_strict(message, &Signature::from_bytes(signature))
            .is_ok()
    }
}

/// Verifies a signature under raw public-key bytes with AgentBus's policy: the key must decode to
/// a point that is not of small order, and the signature must pass `verify_strict`. This is the one
/// function the RFC 8032, Wycheproof and speccheck vectors exercise.
pub fn verify_raw(public: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> bool {
    PublicKey::from_bytes(public).is_ok_and(|pk| pk.verify(message, signature))
}

/// The parsed `sig` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sig {
    /// The `key_` id of the signing key.
    pub key_id: Id,
    /// The 64-byte signature.
    pub signature: [u8; 64],
}

/// Why a `sig` value is malformed, or a signature fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// `sig` does not have the form `ed25519:<key_id>:<base64url>`.
    #[error("sig must be ed25519:<key_id>:<base64url signature without padding>: {0}")]
    Malformed(&'static str),
    /// The signature does not verify over the canonical bytes.
    #[error("the signature does not verify over the canonical envelope bytes")]
    Invalid,
    /// `sig` is absent.
    #[error("the envelope has no sig attribute")]
    Missing,
    /// The envelope cannot be canonicalised without changing it.
    #[error(transparent)]
    Canonical(#[from] JcsError),
}

impl SignatureError {
    /// The catalogue code of this failure.
    pub fn code(&self) -> crate::Code {
        match self {
            SignatureError::Malformed(_) => crate::Code::MalformedSignature,
            SignatureError::Invalid => crate::Code::BadSignature,
            SignatureError::Missing => crate::Code::MissingAttribute,
            SignatureError::Canonical(_) => crate::Code::MalformedJson,
        }
    }
}

impl Sig {
    /// Parses `ed25519:<key_id>:<base64url>`.
    pub fn parse(s: &str) -> Result<Sig, SignatureError> {
        let mut parts = s.splitn(3, ':');
        let (Some(alg), Some(key), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(SignatureError::Malformed(
                "three ':'-separated parts are needed",
            ));
        };
        if alg != SIG_ALGORITHM {
            return Err(SignatureError::Malformed("the algorithm must be ed25519"));
        }
        let key_id = Id::parse_kind(key, IdKind::Key)
            .map_err(|_| SignatureError::Malformed("the key id must be a key_ id"))?;
        // The no-padding engine refuses '=' and non-canonical trailing bits, so each signature
        // has exactly one textual form.
        let bytes = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| SignatureError::Malformed("the signature is not unpadded base64url"))?;
        let signature: [u8; 64] = bytes
            .try_into()
            .map_err(|_| SignatureError::Malformed("an Ed25519 signature is 64 bytes"))?;
        Ok(Sig { key_id, signature })
    }

    /// The attribute's text.
    pub fn render(&self) -> String {
        format!(
            "{SIG_ALGORITHM}:{}:{}",
            self.key_id,
            URL_SAFE_NO_PAD.encode(self.signature)
        )
    }
}

/// The bytes §3.1 signs: the canonical form of `envelope` without `sig` and without the
/// gateway-set attributes.
pub fn signing_bytes(envelope: &Map<String, Value>) -> Result<Vec<u8>, JcsError> {
    jcs::canonicalize_object_without(envelope, |k| k == "sig" || GATEWAY_SET.contains(&k))
}

/// Signs `envelope` in place, setting `sig`.
pub fn sign_envelope(
    envelope: &mut Map<String, Value>,
    key: &SigningKey,
    key_id: Id,
) -> Result<(), JcsError> {
    let bytes = signing_bytes(envelope)?;
    let sig = Sig {
        key_id,
        signature: key.sign(&bytes),
    };
    envelope.insert("sig".to_owned(), Value::String(sig.render()));
    Ok(())
}

/// Reads and parses the envelope's `sig`.
pub fn envelope_sig(envelope: &Map<String, Value>) -> Result<Sig, SignatureError> {
    match envelope.get("sig") {
        None => Err(SignatureError::Missing),
        Some(Value::String(s)) => Sig::parse(s),
        Some(_) => Err(SignatureError::Malformed("sig must be a string")),
    }
}

/// Verifies `envelope`'s signature under `public`. The caller resolves `sig`'s key id to `public`.
pub fn verify_envelope(
    envelope: &Map<String, Value>,
    public: &PublicKey,
) -> Result<(), SignatureError> {
    let sig = envelope_sig(envelope)?;
    let bytes = signing_bytes(envelope)?;
    if public.verify(&bytes, &sig.signature) {
        Ok(())
    } else {
        Err(SignatureError::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sig_attribute_forms() {
        let good = format!(
            "ed25519:key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V:{}",
            URL_SAFE_NO_PAD.encode([7u8; 64])
        );
        let sig = Sig::parse(&good).unwrap();
        assert_eq!(sig.render(), good);
        for bad in [
            "rsa:key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V:AAAA".to_owned(),
            "ed25519:key_01J9ZK...:MEUCIQ...".to_owned(),
            format!("{good}="),
            format!("{}==", &good[..good.len() - 2]),
            "ed25519:key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".to_owned(),
            // 19 bytes, like the spec's example "signature".
            "ed25519:key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V:dGhpcyBpcyBhIHNpZ25hdHVyZQ".to_owned(),
            // '+' and '/' are base64, not base64url.
            good.replace('B', "+"),
        ] {
            assert!(Sig::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_file_forms() {
        let key = SigningKey::from_seed([9; 32]);
        let back = SigningKey::from_key_file(&key.to_key_file()).unwrap();
        assert_eq!(back.seed(), key.seed());
        let pem = key.to_pkcs8_pem();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_eq!(SigningKey::from_key_file(&pem).unwrap().seed(), key.seed());
        assert!(SigningKey::from_key_file("not a key").is_err());
    }

    #[test]
    fn refuses_small_order_public_keys() {
        // The identity point (0, 1).
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(PublicKey::from_bytes(&identity), Err(KeyError::Weak));
    }
}
