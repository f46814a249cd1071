//! The store's conformance suite: every test body is written once over a generic [`Store`] and
//! runs against SQLite and PostgreSQL (a fresh database each), so both backends keep one
//! contract; with the `memory` feature, against the strict in-memory store as well. The
//! PostgreSQL cases run when asked (`AGENTBUS_TEST_PG=1`, or in CI: see `agentbus_testkit::pg`).

// Tests fail by panicking.
#![allow(clippy::unwrap_used, missing_docs)]

mod conformance;
mod fixtures;
mod plans;
mod postgres_only;
mod search_index;

use agentbus_testkit::pg;

use agentbus_store::{PgOptions, PgStore, SqliteStore};

/// A fresh SQLite store, with the directory that holds it.
pub fn sqlite_store() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(&dir.path().join("agentbus.db")).expect("open SQLite");
    (store, dir)
}

/// A fresh PostgreSQL store on its own database of the shared test cluster.
pub async fn pg_store() -> PgStore {
    let url = pg::Cluster::shared().database().await;
    PgStore::open_with(&url, PgOptions::default())
        .await
        .expect("open PostgreSQL")
}

/// Declares, for each named body in [`conformance`], one test per backend.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let (store, _dir) = crate::sqlite_store();
                crate::conformance::$name(store).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                if crate::pg::skip() {
                    return;
                }
                let store = crate::pg_store().await;
                crate::conformance::$name(store).await;
            }

            // The third backend: `cargo test -p agentbus-store --features memory`.
            #[cfg(feature = "memory")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn memory() {
                crate::conformance::$name(agentbus_store::MemoryStore::new()).await;
            }
        }
    )* };
}

conformance!(
    store_identity_rows,
    store_provision_is_all_or_nothing,
    store_agents_aliases_and_keys,
    store_delete_and_suspend_agents,
    store_topics,
    wp_2_1_24_concurrent_publishers_get_gap_free_sequences,
    wp_4_2_3_topic_fan_out_takes_each_inbox_next_sequence,
    wp_3_2_6_concurrent_duplicate_ids_store_one_copy,
    wp_8_3_concurrent_idempotent_publishes_store_one_copy,
    wp_8_2_replay_windows_are_decided_by_the_store,
    store_inbox_depth_is_checked_inside_the_transaction,
    store_a_lease_is_never_handed_out_twice,
    store_acks_with_stale_tokens,
    store_release_returns_leases,
    store_a_lease_lost_below_the_cursor_is_leased_again,
    store_reaper_settles_each_entry_once,
    store_reaper_owes_notices_until_one_is_stored,
    store_tasks_due_and_version_check,
    store_blobs,
    store_receipts_and_delivery_states,
    wp_5_8_a_lease_shows_in_delivery_states_at_once,
    store_console_sessions,
    store_console_reads_and_usage,
    store_sent_messages_page_newest_first,
    store_users_and_tokens_are_listed_revoked_and_removed,
    store_search_finds_what_the_viewer_may_read,
);
