//! Data at rest: `data` of every envelope is sealed under its tenant's data key (WP-13.4-2), and
//! each tenant key is wrapped under the gateway's master key (`<data>/master.key`, mode 0600).
//! XChaCha20-Poly1305 with a random 24-byte nonce per seal; the nonce prefixes the ciphertext.

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

use agentbus_protocol::search::IndexKey;
use agentbus_runtime::random_bytes;

/// A 256-bit key, with the search key derived from it once (every publish indexes under it).
#[derive(Clone)]
pub struct DataKey(Key, IndexKey);

impl DataKey {
    /// The tenant's search key (`agentbus_protocol::search`), derived from this key: the
    /// search index's hashes never open data.
    pub(crate) fn search_key(&self) -> &IndexKey {
        &self.1
    }

    /// A fresh random key.
    pub fn generate() -> DataKey {
        DataKey::from_bytes(random_bytes::<32>())
    }

    /// The key from its 32 bytes.
    pub fn from_bytes(b: [u8; 32]) -> DataKey {
        DataKey(Key::from(b), IndexKey::derive(&b))
    }

    /// Its 32 bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.into()
    }

    /// Seals `plain`: nonce ‖ ciphertext.
    pub fn seal(&self, plain: &[u8]) -> Vec<u8> {
        let nonce: [u8; 24] = random_bytes();
        let cipher = XChaCha20Poly1305::new(&self.0);
        let mut out = nonce.to_vec();
        // Encryption cannot fail for in-memory buffers of this size.
        out.extend(
            cipher
                .encrypt(XNonce::from_slice(&nonce), plain)
                .unwrap_or_default(),
        );
        out
    }

    /// Opens what [`DataKey::seal`] produced; `None` when it was not sealed under this key.
    pub fn open(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < 24 {
            return None;
        }
        let (nonce, ct) = sealed.split_at(24);
        XChaCha20Poly1305::new(&self.0)
            .decrypt(XNonce::from_slice(nonce), ct)
            .ok()
    }
}
