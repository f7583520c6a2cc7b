//! What a lane remembers of its ledger's debit windows between batches, so that a batch
//! reads a limited account's window only when what it read before no longer covers it.
//!
//! A window of `W` seconds ending at a posting's recorded time `t` holds the account's debits
//! recorded in `(t − W, t]`: its total debits less those recorded by `t − W`. A batch needs,
//! per (account, window), the debits recorded by its earliest cut `lo − W` and the debit legs
//! between that and its latest cut `hi − W` (`ledger_core::terms::DebitWindow`). Both are
//! history and never change: what a read found stays true. A read also looks [`LOOKAHEAD`]
//! further (the legs about to reach the cut of the next batches) and notes when the account's
//! next entry after that was recorded. A later batch whose cuts fall before that entry is
//! answered from what was read: no read at all for an account whose debits do not reach its
//! cuts, and each leg read about once for one whose debits leave the window all the time.
//!
//! What a batch learnt counts only once it commits ([`WindowMemo::commit`]). It stays true
//! whoever writes the ledger next, this server's lanes or another server's: every entry
//! written later is recorded later (a ledger's recorded times only grow), after what was read.
//! Tests: the unit tests here, and
//! `a_debit_limit_stays_exact_while_two_servers_debit_the_account_and_debits_leave_its_window`.

use ledger_core::limits::{MAX_REMEMBERED_LEGS, MAX_REMEMBERED_WINDOWS};
use ledger_core::terms::DebitWindow;
use std::collections::BTreeMap;
use time::{Duration, OffsetDateTime};

/// One (account, window length in seconds).
pub(super) type Pair = (i64, u32);

/// How far past a batch's latest cut a read of a window looks (the debit legs it reads ahead
/// and keeps), at most up to the batch's earliest recorded time: an account whose debits leave
/// its window all the time has them read about once each, not on every batch.
pub(super) const LOOKAHEAD: Duration = Duration::seconds(1);

/// What is known of one pair's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Known {
    /// The account's debits recorded at or before `cut`.
    pub debits: i128,
    /// The earliest cut the knowledge answers.
    pub cut: OffsetDateTime,
    /// The account's debit legs recorded after `cut`, in order, as far as the read looked.
    pub legs: Vec<(OffsetDateTime, i128)>,
    /// When the account's first entry after what the read looked at was recorded; `None` (in a
    /// batch's draft only): it had none when the batch read it.
    pub next_at: Option<OffsetDateTime>,
}

impl Known {
    /// What a read of the pair tells: the debits by the batch's earliest cut, the legs after
    /// it as far as the read looked, and when the next entry after that was recorded.
    pub fn read(
        window: &DebitWindow,
        lo_cut: OffsetDateTime,
        next_at: Option<OffsetDateTime>,
    ) -> Known {
        Known {
            debits: window.debits_before,
            cut: lo_cut,
            legs: window.edge.clone(),
            next_at,
        }
    }

    /// The pair's window for cuts `lo_cut..=hi_cut`, if this covers them (no cut before the
    /// known one, none at or past the next entry not read), with the knowledge from `lo_cut` on.
    fn covers(
        &self,
        lo_cut: OffsetDateTime,
        hi_cut: OffsetDateTime,
    ) -> Option<(DebitWindow, Known)> {
        if lo_cut < self.cut || self.next_at.is_some_and(|next| hi_cut >= next) {
            return None;
        }
        let passed = self.legs.partition_point(|(at, _)| *at <= lo_cut);
        let debits = self.debits + self.legs[..passed].iter().map(|(_, m)| m).sum::<i128>();
        let legs = self.legs[passed..].to_vec();
        let within = legs.partition_point(|(at, _)| *at <= hi_cut);
        let window = DebitWindow {
            window_seconds: 0,
            debits_before: debits,
            edge: legs[..within].to_vec(),
        };
        Some((
            window,
            Known {
                debits,
                cut: lo_cut,
                legs,
                next_at: self.next_at,
            },
        ))
    }
}

/// The lanes' knowledge of one ledger's debit windows.
#[derive(Debug, Default)]
pub struct WindowMemo {
    known: BTreeMap<Pair, Known>,
    /// The legs `known` keeps, in all.
    legs: usize,
}

/// What one batch learnt of its ledger's debit windows: it counts once the batch commits
/// ([`WindowMemo::commit`]), and is dropped with a batch that does not.
#[derive(Debug, Default)]
pub struct WindowDraft {
    /// The batch's first recorded time (no entry it writes is earlier) and the accounts it may
    /// write entries of (sorted).
    begun: Option<(OffsetDateTime, Vec<i64>)>,
    learnt: Vec<(Pair, Known)>,
}

impl WindowDraft {
    /// A batch that records from `base` and writes entries only of `touched` accounts (sorted).
    pub(super) fn begin(&mut self, base: OffsetDateTime, touched: Vec<i64>) {
        self.begun = Some((base, touched));
        self.learnt.clear();
    }

    /// What a read of `pair` taught the batch.
    pub(super) fn learnt(&mut self, pair: Pair, known: Known) {
        self.learnt.push((pair, known));
    }
}

impl WindowMemo {
    fn forget(&mut self) {
        self.known.clear();
        self.legs = 0;
    }

    /// The window of `pair` for cuts `lo_cut..=hi_cut` without a read, if what is known covers
    /// the cuts (what it carries forward counts once `draft`'s batch commits).
    pub(super) fn window(
        &self,
        draft: &mut WindowDraft,
        pair: Pair,
        (lo_cut, hi_cut): (OffsetDateTime, OffsetDateTime),
    ) -> Option<DebitWindow> {
        let (window, next) = self.known.get(&pair)?.covers(lo_cut, hi_cut)?;
        draft.learnt(pair, next);
        Some(DebitWindow {
            window_seconds: pair.1,
            ..window
        })
    }

    /// `draft`'s batch committed: what it learnt holds. A read that found no entry after what
    /// it looked at knew the account only up to the ledger as the batch found it, under the
    /// lock; the batch then wrote its entries, none earlier than its first recorded time, so
    /// that time is the account's next entry at the latest. Every entry after is later still,
    /// whoever writes it (a ledger's recorded times only grow), so what is kept stays true.
    pub fn commit(&mut self, draft: WindowDraft) {
        let Some((base, touched)) = draft.begun else {
            return;
        };
        for (pair, mut k) in draft.learnt {
            if k.next_at.is_none() {
                if touched.binary_search(&pair.0).is_err() {
                    continue;
                }
                k.next_at = Some(base);
            }
            self.legs += k.legs.len();
            if let Some(old) = self.known.insert(pair, k) {
                self.legs -= old.legs.len();
            }
        }
        if self.known.len() > MAX_REMEMBERED_WINDOWS || self.legs > MAX_REMEMBERED_LEGS {
            self.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn s(n: i64) -> Duration {
        Duration::seconds(n)
    }

    const T: OffsetDateTime = datetime!(2026-12-04 10:00 UTC);

    fn draft(base: OffsetDateTime, touched: Vec<i64>) -> WindowDraft {
        let mut d = WindowDraft::default();
        d.begin(base, touched);
        d
    }

    fn window(debits_before: i128, edge: Vec<(OffsetDateTime, i128)>) -> DebitWindow {
        DebitWindow {
            window_seconds: 60,
            debits_before,
            edge,
        }
    }

    /// Knows account 1's 60 s window: 100 debited by T − 60 s, then 5 at T − 59.5 s and 7 at
    /// T − 59 s, read ahead to before `next_at` (no entry after: the batch that read it wrote
    /// the account at T).
    fn memo_knowing(next_at: Option<OffsetDateTime>) -> WindowMemo {
        let mut m = WindowMemo::default();
        let mut d = draft(T, vec![1]);
        let edge = vec![(T - s(60) + Duration::milliseconds(500), 5), (T - s(59), 7)];
        d.learnt((1, 60), Known::read(&window(100, edge), T - s(60), next_at));
        m.commit(d);
        m
    }

    /// The window's debits by each of its cuts, as the memory answers it.
    fn answer(
        m: &WindowMemo,
        pair: Pair,
        cuts: (OffsetDateTime, OffsetDateTime),
    ) -> Option<(i128, i128)> {
        let w = m.window(&mut draft(T, vec![]), pair, cuts)?;
        Some((w.debits_until(cuts.0), w.debits_until(cuts.1)))
    }

    #[test]
    fn a_window_is_answered_from_memory_only_for_cuts_the_read_covered() {
        let next = Some(T - s(50));
        let cases = [
            // (next entry at, batch's cuts from, to, debits by each cut)
            (None, T - s(60), T - s(59), Some((100, 112))),
            (None, T - s(59), T - s(58), Some((112, 112))),
            // No entry read past T − 50 s, or past T when none was found (then written at T).
            (None, T - s(59), T, None),
            (
                next,
                T - s(60) + Duration::milliseconds(600),
                T - s(51),
                Some((105, 112)),
            ),
            (next, T - s(59), T - s(50), None),
            (next, T - s(40), T - s(39), None),
            // A cut before the one known: its debits are not known.
            (None, T - s(61), T - s(58), None),
        ];
        for (next_at, lo, hi, want) in cases {
            let m = memo_knowing(next_at);
            assert_eq!(
                answer(&m, (1, 60), (lo, hi)),
                want,
                "next {next_at:?}, cuts {lo}..{hi}"
            );
            assert_eq!(answer(&m, (2, 60), (lo, hi)), None, "another account");
            assert_eq!(answer(&m, (1, 61), (lo, hi)), None, "another window");
        }
    }

    #[test]
    fn what_a_batch_carries_forward_answers_the_next_batch_from_its_cut_on() {
        let mut m = memo_knowing(None);
        let mut d = draft(T + s(1), vec![]);
        m.window(
            &mut d,
            (1, 60),
            (T - s(60) + Duration::milliseconds(700), T - s(59)),
        )
        .unwrap();
        m.commit(d);
        assert_eq!(
            answer(&m, (1, 60), (T - s(59), T - s(58))),
            Some((112, 112))
        );
        assert_eq!(
            answer(&m, (1, 60), (T - s(60), T - s(59))),
            None,
            "a cut it passed"
        );
    }

    #[test]
    fn a_window_read_with_no_entry_after_it_is_kept_only_for_an_account_its_batch_wrote() {
        let mut m = WindowMemo::default();
        let mut d = draft(T, vec![1]);
        d.learnt((1, 60), Known::read(&window(3, vec![]), T - s(60), None));
        d.learnt((2, 60), Known::read(&window(4, vec![]), T - s(60), None));
        m.commit(d);
        assert_eq!(answer(&m, (1, 60), (T - s(59), T - s(58))), Some((3, 3)));
        assert_eq!(answer(&m, (2, 60), (T - s(59), T - s(58))), None);
    }

    #[test]
    fn what_a_batch_learnt_counts_only_once_it_commits() {
        let m = WindowMemo::default();
        let mut d = draft(T, vec![1]);
        d.learnt((1, 60), Known::read(&window(3, vec![]), T - s(60), None));
        drop(d);
        assert_eq!(answer(&m, (1, 60), (T - s(59), T - s(58))), None);
    }
}
