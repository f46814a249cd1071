//! Blob content sealed in chunks (§9, `docs/security.md`): the form blob bytes have wherever they
//! rest, on the gateway's disk or in an S3 bucket.
//!
//! The plaintext is cut into [`CHUNK`]-byte pieces (the last may be shorter; empty content is one
//! empty piece), each sealed with XChaCha20-Poly1305 under the blob's own content key, with a
//! nonce made of the piece's index and a flag on the last one. The nonce can be deterministic
//! because a content key seals one blob only; the index stops pieces being reordered and the flag
//! stops a truncation at a piece boundary passing for the whole. So the sealed length follows from
//! the declared size alone ([`sealed_len`]), which lets a pre-signed PUT bind it in advance, and a
//! reader can start at any piece (a resumed download).

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

/// Plaintext bytes per sealed piece.
pub const CHUNK: usize = 1 << 20;
/// What sealing adds to each piece (the Poly1305 tag).
pub const TAG: usize = 16;
/// The scheme's name, as the gateway's answers give it.
pub const SCHEME: &str = "agentbus-chunked-v1";

/// Why sealed content does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// A piece does not open under the key: other bytes, another key, or pieces out of order.
    #[error("piece {0} does not open under the blob's content key")]
    Piece(u64),
    /// The sealed bytes are longer or shorter than the declared size makes them.
    #[error("sealed content is {got} bytes; the declared size makes it {want}")]
    Length {
        /// Sealed bytes seen.
        got: u64,
        /// Sealed bytes the declared size gives.
        want: u64,
    },
}

/// A blob's 256-bit content key.
#[derive(Clone)]
pub struct ContentKey(Key);

impl ContentKey {
    /// The key from its 32 bytes.
    pub fn from_bytes(b: [u8; 32]) -> ContentKey {
        ContentKey(Key::from(b))
    }

    /// Its 32 bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.into()
    }

    fn nonce(index: u64, last: bool) -> XNonce {
        let mut n = [0u8; 24];
        n[..8].copy_from_slice(&index.to_be_bytes());
        n[8] = u8::from(last);
        XNonce::from(n)
    }

    /// Seals piece `index` of the content (`last` for the final one).
    pub fn seal_piece(&self, index: u64, last: bool, plain: &[u8]) -> Vec<u8> {
        // Encryption of an in-memory piece of at most CHUNK bytes cannot fail.
        XChaCha20Poly1305::new(&self.0)
            .encrypt(&Self::nonce(index, last), plain)
            .unwrap_or_default()
    }

    /// Opens piece `index` (`last` for the final one).
    pub fn open_piece(&self, index: u64, last: bool, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        XChaCha20Poly1305::new(&self.0)
            .decrypt(&Self::nonce(index, last), sealed)
            .map_err(|_| SealError::Piece(index))
    }

    /// Seals all of `plain`.
    pub fn seal(&self, plain: &[u8]) -> Vec<u8> {
        let n = pieces(plain.len() as u64);
        let mut out = Vec::with_capacity(sealed_len(plain.len() as u64) as usize);
        for i in 0..n {
            let start = (i as usize) * CHUNK;
            let end = (start + CHUNK).min(plain.len());
            out.extend(self.seal_piece(i, i + 1 == n, &plain[start..end]));
        }
        out
    }

    /// Opens all of `sealed`, content of `size` bytes.
    pub fn open(&self, sealed: &[u8], size: u64) -> Result<Vec<u8>, SealError> {
        let mut o = Opener::new(self.clone(), size, 0);
        let mut out = o.push(sealed)?;
        out.extend(o.finish()?);
        Ok(out)
    }
}

/// Sealed pieces of content of `size` bytes.
pub fn pieces(size: u64) -> u64 {
    size.div_ceil(CHUNK as u64).max(1)
}

/// The sealed length of content of `size` bytes.
pub fn sealed_len(size: u64) -> u64 {
    size + TAG as u64 * pieces(size)
}

/// The content size whose sealed length is `sealed`, if there is one.
pub fn plain_len(sealed: u64) -> Option<u64> {
    let p = sealed.div_ceil((CHUNK + TAG) as u64).max(1);
    let n = sealed.checked_sub(TAG as u64 * p)?;
    (sealed_len(n) == sealed).then_some(n)
}

/// Where piece `index` starts in the sealed content.
pub fn sealed_offset(index: u64) -> u64 {
    index * (CHUNK + TAG) as u64
}

/// Opens sealed content as it arrives, from piece `first` on: bytes in, plaintext out, with the
/// length checked at [`Opener::finish`].
pub struct Opener {
    key: ContentKey,
    size: u64,
    index: u64,
    seen: u64,
    buf: Vec<u8>,
}

impl Opener {
    /// An opener for content of `size` bytes, fed from the start of piece `first`.
    pub fn new(key: ContentKey, size: u64, first: u64) -> Opener {
        Opener {
            key,
            size,
            index: first,
            seen: sealed_offset(first),
            buf: Vec::new(),
        }
    }

    /// Takes the next sealed bytes; returns the plaintext of every piece they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<u8>, SealError> {
        self.seen += bytes.len() as u64;
        let want = sealed_len(self.size);
        if self.seen > want {
            return Err(SealError::Length {
                got: self.seen,
                want,
            });
        }
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let last = pieces(self.size) - 1;
        // Every piece but the last is exactly CHUNK + TAG; the last is opened by `finish`.
        while self.index < last && self.buf.len() >= CHUNK + TAG {
            let rest = self.buf.split_off(CHUNK + TAG);
            out.extend(self.key.open_piece(self.index, false, &self.buf)?);
            self.buf = rest;
            self.index += 1;
        }
        Ok(out)
    }

    /// Opens the last piece, once every byte was pushed.
    pub fn finish(mut self) -> Result<Vec<u8>, SealError> {
        let want = sealed_len(self.size);
        if self.seen != want || self.index + 1 != pieces(self.size) {
            return Err(SealError::Length {
                got: self.seen,
                want,
            });
        }
        let buf = std::mem::take(&mut self.buf);
        self.key.open_piece(self.index, true, &buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ContentKey {
        ContentKey::from_bytes([7; 32])
    }

    #[test]
    fn round_trips_at_piece_boundaries() {
        for size in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 2 * CHUNK + 5] {
            let plain: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let sealed = key().seal(&plain);
            assert_eq!(sealed.len() as u64, sealed_len(size as u64), "{size}");
            assert_eq!(key().open(&sealed, size as u64).unwrap(), plain, "{size}");
            // Fed in odd slices, the opener gives the same.
            let mut o = Opener::new(key(), size as u64, 0);
            let mut out = Vec::new();
            for part in sealed.chunks(65_537) {
                out.extend(o.push(part).unwrap());
            }
            out.extend(o.finish().unwrap());
            assert_eq!(out, plain, "{size}");
        }
    }

    #[test]
    fn truncation_reordering_and_other_keys_are_refused() {
        let plain = vec![1u8; 2 * CHUNK + 3];
        let sealed = key().seal(&plain);
        let size = plain.len() as u64;
        // Cut at a piece boundary: the length no longer matches.
        let cut = &sealed[..sealed_offset(2) as usize];
        assert!(matches!(
            key().open(cut, size),
            Err(SealError::Length { .. })
        ));
        // Claiming fewer bytes makes a middle piece the last: it does not open as one.
        assert!(key().open(cut, 2 * CHUNK as u64 - 32).is_err());
        let mut swapped = sealed.clone();
        let (a, b) = (CHUNK + TAG, 2 * (CHUNK + TAG));
        swapped[..a].copy_from_slice(&sealed[a..b]);
        swapped[a..b].copy_from_slice(&sealed[..a]);
        assert_eq!(key().open(&swapped, size), Err(SealError::Piece(0)));
        let other = ContentKey::from_bytes([8; 32]);
        assert!(other.open(&sealed, size).is_err());
    }

    #[test]
    fn plain_len_inverts_sealed_len() {
        for n in [
            0,
            1,
            15,
            16,
            CHUNK as u64 - 1,
            CHUNK as u64,
            CHUNK as u64 + 1,
            5 * CHUNK as u64 + 3,
        ] {
            assert_eq!(plain_len(sealed_len(n)), Some(n), "{n}");
        }
        assert_eq!(plain_len(3), None);
        assert_eq!(plain_len((CHUNK + TAG) as u64 + 5), None);
    }

    #[test]
    fn opening_from_a_later_piece() {
        let plain: Vec<u8> = (0..3 * CHUNK + 9).map(|i| (i % 13) as u8).collect();
        let sealed = key().seal(&plain);
        let mut o = Opener::new(key(), plain.len() as u64, 2);
        let mut out = o.push(&sealed[sealed_offset(2) as usize..]).unwrap();
        out.extend(o.finish().unwrap());
        assert_eq!(out, &plain[2 * CHUNK..]);
    }
}
