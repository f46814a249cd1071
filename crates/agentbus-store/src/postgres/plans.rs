//! The statements on every publish's and delivery's path whose generic plans must read by index,
//! with sample arguments, for the store's integration tests (`tests/it/plans.rs`), which check
//! each generic plan on empty tables and on a filled queue.
//!
//! Pooled connections let PostgreSQL cache a prepared statement's generic plan, which is safe only
//! while no generic plan reads a queue table whole (the check's documentation says why).

use super::batch::{BUMP_COUNTERS, INSERT_ALL, RECENT_ALL};
use super::ops::{
    ACK, ACK_HELD, CREATE_COUNTERS, DEPTH, IDEMPOTENT_IN, LEASE, LOCK_COUNTERS, NEXT_VISIBLE,
    READ_COUNTERS, SETTLED,
};

/// Each hot statement: its name, its SQL and the arguments of an `EXECUTE` of it.
pub fn hot_statements() -> Vec<(&'static str, &'static str, String)> {
    let text = |n: usize| format!("ARRAY[{}]::text[]", vec!["'x'"; n].join(","));
    let nums = |n: usize| format!("ARRAY[{}]::bigint[]", vec!["1"; n].join(","));
    let insert_args = {
        let mut a: Vec<String> = (0..10).map(|_| text(1)).collect();
        a.extend([
            "ARRAY['\\x00'::bytea]".to_owned(),
            "ARRAY['\\x00'::bytea]".to_owned(),
            text(1),
            text(1),
            nums(1),
            nums(1),
            text(1),
            text(1),
            text(1),
            nums(1),
            nums(1),
            nums(1),
            nums(1),
        ]);
        a.join(", ")
    };
    vec![
        (
            "lease",
            LEASE,
            "'agt_1', 5000, 5, 100, 32, 65000, -25000".into(),
        ),
        (
            "lease, a large inbox",
            LEASE,
            "'agt_big', 5000, 5, 59990, 32, 65000, -25000".into(),
        ),
        ("next visible", NEXT_VISIBLE, "'agt_1'".into()),
        (
            "ack",
            ACK,
            format!("'agt_1', {}, {}, 7, 1, 3", nums(3), text(3)),
        ),
        ("ack read", ACK_HELD, format!("'agt_1', {}", nums(3))),
        ("settled", SETTLED, "'agt_1', 3".into()),
        ("depth", DEPTH, "'agt_1'".into()),
        ("counters", LOCK_COUNTERS, text(2)),
        ("counters read", READ_COUNTERS, text(2)),
        ("counters created", CREATE_COUNTERS, text(2)),
        (
            "counters bumped",
            BUMP_COUNTERS,
            format!("{}, {}, {}", text(2), nums(2), nums(2)),
        ),
        (
            "replays",
            RECENT_ALL.as_str(),
            format!("{}, {}, {}, {}", text(4), text(4), text(4), nums(4)),
        ),
        (
            "idempotency",
            IDEMPOTENT_IN.as_str(),
            "'a', 'b', 'c', 'd', 1".into(),
        ),
        ("insert", INSERT_ALL.as_str(), insert_args),
    ]
}
