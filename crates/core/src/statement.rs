//! An account's statement, a page at a time: the running balance shown on each entry.
//!
//! A posting is applied whole: the ledger's rules (the no-negative rule above all) hold
//! between postings, never between the legs of one. So each entry shows the account's
//! balance after its whole posting: a posting with several legs on the account shows the
//! same balance on each of them, and the balance never passes through a value the ledger did
//! not hold between postings.

use super::account::{Direction, NormalBalance};
use super::engine::balance_of;
use super::limits::MAX_LEGS;
use super::record::Entry;

/// Where a statement page starts: after leg `leg` of posting `sequence`, with the running
/// totals of the entries up to there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub sequence: i64,
    pub leg: i16,
    pub debits: i128,
    pub credits: i128,
}

impl Cursor {
    /// The start of a statement: before the first leg.
    pub fn start() -> Cursor {
        Cursor {
            sequence: 0,
            leg: -1,
            debits: 0,
            credits: 0,
        }
    }

    fn add(&mut self, e: &Entry, leg: i16) {
        match e.direction {
            Direction::Debit => self.debits += e.amount.minor(),
            Direction::Credit => self.credits += e.amount.minor(),
        }
        self.sequence = e.sequence as i64;
        self.leg = leg;
    }
}

/// Rows a page of `limit` entries reads: the page, and enough more to complete the balance
/// of its last posting (at most [`MAX_LEGS`] legs, so at most `MAX_LEGS - 1` after the page's
/// last) and to know whether another page follows.
pub fn rows_to_read(limit: usize) -> usize {
    limit + MAX_LEGS
}

/// Builds a page of at most `limit` entries from `rows` (the account's entries after `from`,
/// in journal order, as many as [`rows_to_read`] asks for or all there are), each with the
/// balance after its posting. Returns the entries and the cursor of the next page (`None`
/// on the last page). A posting with more than [`MAX_LEGS`] legs on the account cannot have
/// been written by the ledger: that is an error naming its sequence.
pub fn page(
    rows: &[(Entry, i16)],
    limit: usize,
    normal: NormalBalance,
    from: Cursor,
) -> Result<(Vec<Entry>, Option<Cursor>), i64> {
    let shown = rows.len().min(limit);
    let mut running = from;
    let mut next = from;
    let mut out: Vec<Entry> = Vec::with_capacity(shown);
    // Entries of the posting being summed wait in `out` for its balance.
    let mut open_from = 0;
    for (i, (e, leg)) in rows.iter().enumerate() {
        if i >= shown && out.last().is_none_or(|l| l.sequence != e.sequence) {
            break;
        }
        if out.last().is_some_and(|l| l.sequence != e.sequence) {
            close(&mut out[open_from..], normal, running);
            open_from = out.len();
        }
        running.add(e, *leg);
        if i < shown {
            next = running;
            out.push(e.clone());
        }
    }
    if rows.len() == rows_to_read(limit)
        && rows.last().map(|r| r.0.sequence) == out.last().map(|e| e.sequence)
    {
        return Err(out.last().map_or(0, |e| e.sequence as i64));
    }
    close(&mut out[open_from..], normal, running);
    let more = rows.len() > limit;
    Ok((out, more.then_some(next)))
}

/// Sets the balance after their posting on the entries of one posting.
fn close(entries: &mut [Entry], normal: NormalBalance, after: Cursor) {
    let balance = balance_of(normal, after.debits, after.credits);
    for e in entries {
        e.balance_after = balance;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amount::Amount;
    use time::OffsetDateTime;

    fn entry(sequence: u64, direction: Direction, minor: i128) -> Entry {
        Entry {
            posting_id: uuid::Uuid::nil(),
            sequence,
            recorded_at: OffsetDateTime::UNIX_EPOCH,
            effective_at: OffsetDateTime::UNIX_EPOCH,
            direction,
            amount: Amount::from_minor(minor, 2),
            balance_after: 0,
        }
    }

    /// (sequence, leg, direction, amount) rows of a debit-normal account.
    fn rows(spec: &[(u64, i16, Direction, i128)]) -> Vec<(Entry, i16)> {
        spec.iter()
            .map(|&(s, l, d, m)| (entry(s, d, m), l))
            .collect()
    }

    use Direction::{Credit as C, Debit as D};

    #[test]
    fn each_entry_shows_the_balance_after_its_whole_posting() {
        let r = rows(&[
            (1, 0, D, 3000),
            (2, 0, C, 5000),
            (2, 1, D, 5000),
            (3, 1, C, 100),
        ]);
        let (page, next) = page(&r, 10, NormalBalance::Debit, Cursor::start()).unwrap();
        let after: Vec<i128> = page.iter().map(|e| e.balance_after).collect();
        assert_eq!(after, [3000, 3000, 3000, 2900]);
        assert_eq!(next, None);
    }

    #[test]
    fn a_page_ending_inside_a_posting_shows_the_balance_after_all_its_legs() {
        let r = rows(&[
            (1, 0, D, 3000),
            (2, 0, C, 5000),
            (2, 1, D, 5000),
            (3, 0, C, 100),
        ]);
        let (first, next) = page(&r, 2, NormalBalance::Debit, Cursor::start()).unwrap();
        assert_eq!(
            first.iter().map(|e| e.balance_after).collect::<Vec<_>>(),
            [3000, 3000]
        );
        let next = next.expect("another page");
        assert_eq!(
            (next.sequence, next.leg, next.debits, next.credits),
            (2, 0, 3000, 5000)
        );
        let (second, last) = page(&r[2..], 2, NormalBalance::Debit, next).unwrap();
        assert_eq!(
            second.iter().map(|e| e.balance_after).collect::<Vec<_>>(),
            [3000, 2900]
        );
        assert_eq!(last, None);
    }

    #[test]
    fn a_posting_longer_than_the_leg_limit_on_one_account_is_reported_by_its_sequence() {
        let spec: Vec<(u64, i16, Direction, i128)> =
            (0..rows_to_read(1) as i16).map(|l| (7, l, D, 1)).collect();
        assert_eq!(
            page(&rows(&spec), 1, NormalBalance::Debit, Cursor::start()),
            Err(7)
        );
    }
}
