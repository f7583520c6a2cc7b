//! The release of expired holds. Once a hold's `hold_expires_at` has passed, the ledger itself
//! records its release: a posting like any other, through the writer, with caller `ledger`
//! and key `expire:<hold posting id>` (so two servers, or a round and its retry, release a
//! hold once). A task polls every [`HOLD_EXPIRY_POLL`] (by default), so a release is recorded
//! within [`HOLD_EXPIRY_LAG_MAX`] of the expiry time under normal load; a capture or void that
//! reaches the writer after the expiry time is refused whether the release is recorded yet or
//! not (that rule is `decide`'s), and the hold holds nothing from its expiry time on, for reads
//! and for the funds rule alike. At start-up, before serving, the server releases every hold
//! that expired while it was stopped.
//!
//! How late each release was recorded (its recorded time minus the expiry time) is the
//! histogram `ledger_hold_release_lag_seconds`; releases later than [`HOLD_EXPIRY_LAG_MAX`]
//! count in `ledger_hold_releases_late_total` and make one warning per round, with counts
//! (after a restart, thousands of holds may be released late in one round).

use super::Ledger;
use crate::storage;
use ledger_core::hold::LEDGER_CALLER;
use ledger_core::ledger::LedgerId;
use ledger_core::limits::{HOLD_EXPIRY_LAG_MAX, MAX_EXPIRIES_PER_ROUND};
use ledger_core::record::Decided;
use ledger_core::write::{Command, ValidExpire};
use ledger_core::{LedgerError, Reason};
use std::collections::BTreeMap;
use std::time::Duration;
use time::OffsetDateTime;

/// How often the expiry task looks for holds whose expiry time has passed, by default (knob
/// `--hold-expiry-poll`).
pub const HOLD_EXPIRY_POLL: Duration = Duration::from_millis(250);

// By default, releases are asked well within the lag bound.
const _: () = assert!(HOLD_EXPIRY_POLL.as_millis() * 2 <= HOLD_EXPIRY_LAG_MAX.as_millis());

/// What one round did.
#[derive(Debug, Default)]
pub struct Round {
    /// Releases recorded now (or found recorded by an earlier attempt).
    pub released: usize,
    /// Of the releases recorded now, those recorded later than [`HOLD_EXPIRY_LAG_MAX`] after
    /// the expiry, and the latest lag.
    pub late: usize,
    pub max_lag: Duration,
    /// Holds the round found closed by a capture or void first.
    pub closed_first: usize,
    /// Releases the writer could not record now (retried next round).
    pub failed: usize,
    /// Whether every due hold in the window was asked for (none left beyond the round's limit).
    pub complete: bool,
    /// The database's clock when the round looked.
    pub now: Option<OffsetDateTime>,
}

impl Ledger {
    /// Asks the writer to release every open hold expiring after `from` (none: any) whose
    /// expiry time has passed, at most [`MAX_EXPIRIES_PER_ROUND`], as one writer job (decided
    /// in one batch, whatever else is queued).
    pub async fn release_expired(
        &self,
        cluster: &str,
        from: Option<OffsetDateTime>,
    ) -> Result<Round, LedgerError> {
        let pool = self.clusters.named(cluster).ok_or_else(|| {
            LedgerError::unavailable(format!("no cluster {cluster:?} on this server"))
        })?;
        let client = pool.get().await.map_err(LedgerError::unavailable)?;
        let (due, now) = storage::holds::due(&client, from, MAX_EXPIRIES_PER_ROUND)
            .await
            .map_err(storage::StorageError::into_ledger_error)?;
        drop(client);
        let outcomes = self.release(&due).await?;
        let due: Vec<uuid::Uuid> = due.into_iter().map(|(_, id)| id).collect();
        let mut round = Round {
            complete: due.len() < MAX_EXPIRIES_PER_ROUND,
            now: Some(now),
            ..Round::default()
        };
        let mut first_failure: Option<(uuid::Uuid, LedgerError)> = None;
        for (id, outcome) in due.iter().zip(outcomes) {
            match outcome {
                Ok(w) => round.count(&w.posted()),
                Err(e) if e.reason == Reason::HoldNotPending => round.closed_first += 1,
                Err(e) => {
                    round.failed += 1;
                    first_failure.get_or_insert((*id, e));
                }
            }
        }
        round.log(first_failure);
        Ok(round)
    }
}

impl Ledger {
    /// Releases the due holds: one writer job per ledger (each queued whole and decided in
    /// one batch of its ledger, or refused whole: then the round fails and the next one asks
    /// again), the ledgers' jobs at once; the outcomes in the order of `due`.
    async fn release(
        &self,
        due: &[(LedgerId, uuid::Uuid)],
    ) -> Result<Vec<ledger_core::write::Outcome>, LedgerError> {
        let mut by_ledger: BTreeMap<LedgerId, Vec<usize>> = BTreeMap::new();
        for (i, (ledger, _)) in due.iter().enumerate() {
            by_ledger.entry(*ledger).or_default().push(i);
        }
        let jobs = by_ledger.iter().map(|(&ledger, places)| {
            let commands = places
                .iter()
                .map(|&i| Command::Expire(ValidExpire::of(due[i].1)))
                .collect();
            self.writer.submit_all(ledger, LEDGER_CALLER, commands)
        });
        let answers = futures_util::future::try_join_all(jobs).await?;
        let mut outcomes: Vec<Option<ledger_core::write::Outcome>> = vec![None; due.len()];
        for (places, answer) in by_ledger.values().zip(answers) {
            for (&i, outcome) in places.iter().zip(answer) {
                outcomes[i] = Some(outcome);
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("an outcome per due hold"))
            .collect())
    }
}

impl Round {
    /// Counts a release (a new one's lag in the metrics too).
    fn count(&mut self, d: &Decided) {
        self.released += 1;
        if d.replayed {
            return;
        }
        let lag = d.posting.recorded_at - d.posting.effective_at;
        let lag = Duration::try_from(lag).unwrap_or(Duration::ZERO);
        let late = lag > HOLD_EXPIRY_LAG_MAX;
        crate::metrics::hold_released(lag, late);
        if late {
            self.late += 1;
            self.max_lag = self.max_lag.max(lag);
        }
    }

    /// One warning for the round's late releases and one for those it could not record,
    /// with counts (never one line per hold).
    fn log(&self, first_failure: Option<(uuid::Uuid, LedgerError)>) {
        if self.late > 0 {
            tracing::warn!(
                late = self.late,
                released = self.released,
                max_lag_ms = self.max_lag.as_millis() as u64,
                "releases of expired holds recorded later than HOLD_EXPIRY_LAG_MAX ({HOLD_EXPIRY_LAG_MAX:?}) after their expiry: {} of {} this round, the latest {:?} late",
                self.late,
                self.released,
                self.max_lag
            );
        }
        if let Some((hold, e)) = first_failure {
            tracing::warn!(
                failed = self.failed,
                first_hold = %hold,
                error = %e,
                "{} releases of expired holds were not recorded this round (the first error shown); retrying next round",
                self.failed
            );
        }
    }
}

/// Releases every hold already expired on `cluster`, round after round until none is left or
/// a round cannot record one: what the server does at start-up, before serving.
pub async fn release_all_due(ledger: &Ledger, cluster: &str) -> Result<usize, LedgerError> {
    let mut released = 0;
    loop {
        let round = ledger.release_expired(cluster, None).await?;
        released += round.released;
        if round.failed > 0 {
            return Err(LedgerError::unavailable(format!(
                "{} releases of expired holds could not be recorded at start-up",
                round.failed
            )));
        }
        if round.complete {
            return Ok(released);
        }
    }
}

/// The expiry task of one cluster (one task per cluster, so a cluster that is down delays
/// only its own): a round every `poll` ([`HOLD_EXPIRY_POLL`] by default; at once again when
/// a round hit its limit). Each round looks back `overlap` before the last complete round's clock, so a hold
/// decided before that clock but committed after it (a batch takes at most the writer's
/// timeout) is still found; holds released already are skipped by the query.
pub async fn run(
    ledger: std::sync::Arc<Ledger>,
    cluster: String,
    poll: Duration,
    overlap: Duration,
) {
    let mut from: Option<OffsetDateTime> = None;
    loop {
        match ledger.release_expired(&cluster, from).await {
            Ok(round) => {
                if round.released > 0 {
                    tracing::info!(released = round.released, "released expired holds");
                }
                if round.complete && round.failed == 0 {
                    from = round.now.map(|now| now - overlap);
                }
                if !round.complete && round.failed == 0 {
                    continue;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, cluster, "cannot look for expired holds; retrying")
            }
        }
        tokio::time::sleep(poll).await;
    }
}
