//! RFC 3339 instants as Unix milliseconds.
//!
//! Every time in the protocol (`time`, `expires_at`, `received_at`, timers) is an instant; we keep
//! it as milliseconds since the Unix epoch, which orders, subtracts and stores simply. Parsing
//! accepts any RFC 3339 offset and compares instants (checklist G-WP-36); formatting always writes
//! UTC with a `Z`, as senders should.

use std::fmt;
use std::str::FromStr;

use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// An instant, in milliseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(pub i64);

/// A string that is not an RFC 3339 date-time with a zone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an RFC 3339 date-time with a zone, such as 2026-10-10T14:00:00Z")]
pub struct TimestampError(pub String);

impl Timestamp {
    /// Milliseconds since the epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// This instant plus `ms` milliseconds (saturating).
    pub fn plus_ms(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// This instant plus `s` seconds (saturating).
    pub fn plus_secs(self, s: i64) -> Timestamp {
        self.plus_ms(s.saturating_mul(1000))
    }

    /// `self - other` in milliseconds.
    pub fn since(self, other: Timestamp) -> i64 {
        self.0.saturating_sub(other.0)
    }

    /// The UTC form with milliseconds: `2026-10-10T14:00:00.213Z`.
    pub fn to_rfc3339(self) -> String {
        self.to_string()
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(s: &str) -> Result<Timestamp, TimestampError> {
        let t = OffsetDateTime::parse(s, &Rfc3339).map_err(|_| TimestampError(s.to_owned()))?;
        let ms = t.unix_timestamp_nanos().div_euclid(1_000_000);
        i64::try_from(ms)
            .map(Timestamp)
            .map_err(|_| TimestampError(s.to_owned()))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
            .to_offset(UtcOffset::UTC);
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        )
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_offsets_as_instants() {
        let z: Timestamp = "2026-10-10T14:00:00Z".parse().unwrap();
        let plus: Timestamp = "2026-10-10T16:00:00+02:00".parse().unwrap();
        assert_eq!(z, plus);
        assert_eq!(z.to_string(), "2026-10-10T14:00:00.000Z");
        let ms: Timestamp = "2026-10-10T14:00:00.213Z".parse().unwrap();
        assert_eq!(ms.since(z), 213);
    }

    #[test]
    fn refuses_times_without_a_zone() {
        for bad in [
            "2026-10-10T14:00:00",
            "2026-10-10",
            "yesterday",
            "2026-13-10T14:00:00Z",
        ] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad}");
        }
    }
}
