//! The writer's batch transaction, in the two steps around the pure decision
//! ([`ledger_core::write::decide`]):
//!
//! - [`load`] opens the transaction, claims every idempotency key of the batch with one
//!   `INSERT … ON CONFLICT DO NOTHING` (the UNIQUE constraint decides which requests are new),
//!   takes the ledger's advisory lock, and reads what the decision needs: the ledger's clock,
//!   the stored decisions of keys decided earlier, the accounts' rules (from the shared
//!   [`AccountCache`] where it has them) and totals, the void targets. It returns facts
//!   ([`Snapshot`]); rows that break an invariant are facts too.
//! - [`write`] asserts the plan is sound, writes postings, legs, rejections, outbox rows,
//!   totals and the ledger's state with one statement per table, and commits: nothing is
//!   answered before the commit.
//!
//! Plans: every statement here that reads a growing table is planned for each execution, for
//! the tables as they are then (the pool's connections run with
//! `plan_cache_mode=force_custom_plan`, see [`super::pool_as`]). A generic plan cached while a
//! table was small keeps its sequential scan after the table has grown: measured, the claim's
//! cached plan (when it still read earlier decisions) scanned all 99,171 keys on every batch,
//! and throughput fell from 10,000 to 4,300 postings/s within 20 s of a fresh start. The
//! statements that read no growing table run on generic plans (see [`GENERIC_PLANS`]). The
//! statements join their array arguments through `unnest`, so planning stays cheap, and the
//! lookup of keys decided earlier runs only for the keys the claim did not take.
//!
//! [`AccountCache`]: ledger_core::account::AccountCache
//! [`Snapshot`]: ledger_core::write::Snapshot

mod closes;
mod decided;
mod hashes;
mod load;
mod memo;
mod terms;
mod write;

pub use load::load;
pub use memo::{WindowDraft, WindowMemo};
pub use write::write;

use super::BATCH_IDLE_TIMEOUT;
use std::sync::LazyLock;

/// Ends the batch's transaction without writing (after a failure, or a plan that refused
/// requests unbound), so the connection is clean for the next batch.
pub async fn rollback(client: &deadpool_postgres::Client) {
    let _ = client.batch_execute("ROLLBACK").await;
}

/// Opens the batch transaction. If the writer's connection goes silent mid-batch (a network
/// black hole), the server ends the transaction by itself after
/// `idle_in_transaction_session_timeout` ([`BATCH_IDLE_TIMEOUT`], 15 s), releasing the
/// ledger's write lock for the next batch on a fresh connection.
///
/// It also switches the transaction to generic plans ([`GENERIC_PLANS`]) for the claim, the
/// lock and the state row that follow; [`CUSTOM_PLANS`] switches back before any statement
/// that reads a growing table.
static BEGIN_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "BEGIN; SET LOCAL idle_in_transaction_session_timeout = '{}ms'; SET LOCAL plan_cache_mode = force_generic_plan",
        BATCH_IDLE_TIMEOUT.as_millis()
    )
});

/// Plans: statements that read no growing table (the claim, whose only reads are its own
/// arguments and rows; the legs, rejections and outbox inserts from `unnest`, which no foreign
/// key checks; the one-row `ledger_state`) run on a plan made once per connection, as nothing
/// in it can go stale. Each statement that reads a growing table (totals, accounts, earlier
/// decisions, the totals update, and the postings insert, whose void foreign key reads
/// `postings`) runs after [`CUSTOM_PLANS`], planned for the tables as they are. Measured at
/// `ledger bench --rate 1000`: planning the claim and the inserts on every batch cost about
/// 0.3 ms of a 1.9 ms batch.
const GENERIC_PLANS: &str = "SET LOCAL plan_cache_mode = force_generic_plan";
/// Back to the connection's default: a plan for each execution (see [`super::pool_as`]).
const CUSTOM_PLANS: &str = "SET LOCAL plan_cache_mode = force_custom_plan";
