//! The module's numbers (checklist G-LM-1). The spec gives only the TTL; every other value is ours,
//! chosen here with its reason and documented in `docs/local.md`. Derived values are computed from
//! the ones they derive from, so changing one moves the others (LM-86).

/// A message is conversation for a week: shown and kept that long (LM: TTL_MS, LM-70).
pub const TTL_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// How far ahead of this clock a line may be stamped and still count (LM: SKEW_MS, LM-17). One
/// minute covers NTP-synced machines with room; a line further ahead is from a broken clock or a
/// forger who wants it to outlive the TTL.
pub const SKEW_MS: i64 = 60_000;

/// How long past the TTL a write keeps a line (LM: bound, G-LM-12). Derived from [`SKEW_MS`], so
/// a line one node still counts is never cut by a node whose clock runs ahead.
pub const SLACK_MS: i64 = SKEW_MS;

/// The longest text a line keeps whole, in characters (LM: WIRE_TEXT, LM-19): about 4,000 tokens,
/// a page of findings or a plan. Longer texts are cut with an ellipsis; what one event shows is
/// then the delivery budget's choice, not the format's.
pub const WIRE_TEXT: usize = 16_000;

/// The bytes of one member's lines of one class the log keeps, newest first (LM: MEMBER_BYTES,
/// LM-72, LM-77). A week of ordinary traffic (lines of 0.3–1.5 KB, about a hundred a day) fits,
/// with room for long texts; a flood stops here instead of growing the file every hook reads.
pub const MEMBER_BYTES: usize = 1024 * 1024;

/// The doubling window's ceiling (LM: WINDOW_CAP, LM-61): as many full texts as one member's share
/// holds at a byte per character. Derived; it promises no room.
pub const WINDOW_CAP: u32 = (MEMBER_BYTES / WIRE_TEXT) as u32;

/// The most ids one Seen line lists (LM: SEEN_IDS, LM-42): 100 ids of 23 bytes keep a line under
/// 4 KB, and a forged line cannot list millions.
pub const SEEN_IDS: usize = 100;

/// The longest display name a sender may give (LM: NAME, LM-16).
pub const NAME: usize = 64;

/// The longest sender or recipient identity a line holds (a session id, `engineer:<email>`, or an
/// imported sender's address such as `agent://tenant/workspace/name`).
pub const BY_CHARS: usize = 256;

/// The longest session id accepted. Session ids become directory names, so they are also limited
/// to `[A-Za-z0-9._-]` (see [`crate::address::is_session_id`]).
pub const SESSION_ID_CHARS: usize = 128;

/// The characters of a node id a label shows (LM: NODE_CHARS, LM-23): enough to tell a team's
/// machines apart.
pub const NODE_CHARS: usize = 8;

/// The characters of a session id a label shows for a sender that gave no name (LM: SESSION_CHARS).
pub const SESSION_CHARS: usize = 8;

/// The fixed pace for recipients that may never acknowledge (a broadcast, the engineer) and for a
/// session of another node until it acknowledges one (LM: V1_RATE_MS, LM-63, LM-64): one tell or
/// ask per sender and recipient this often. Ten seconds lets a conversation flow and stops a loop.
pub const V1_RATE_MS: i64 = 10_000;

/// The longest head shown for a message longer than the budget (LM: Shown, G-LM-17).
pub const HEAD_CHARS: usize = 2_000;

/// The line format version this build writes and reads (G-LM-3). A line with a greater `v` is
/// skipped on read and kept byte for byte on write.
pub const LINE_VERSION: u64 = 1;

/// The longest line read; a longer one is skipped (a text of [`WIRE_TEXT`] characters at four
/// bytes each, escaped, plus its fields, fits).
pub const MAX_LINE_BYTES: usize = 160_000;

/// The most times in a row the end of a turn is kept going by messages without a prompt of the
/// session's user in between (see `Store::hook`, "End of turn" in `docs/local.md`). Three lets a
/// short exchange finish (a question, its answer, a follow-up) while two sessions that answer
/// each other stop after three rounds each and wait for a person.
pub const STOP_CONTINUES: u32 = 3;
