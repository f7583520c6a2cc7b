//! Matching a statement's lines to the book's, purely (no I/O): by reference first, then by
//! amount and date. Amounts are minor units at the account's scale, signed in one convention
//! on both sides (positive raises the account's balance); days are UTC days.
//!
//! The passes, each over the lines the passes before left:
//! 1. **reference**: a statement line and a book line with the same non-empty reference and the
//!    same amount;
//! 2. **mismatch**: a statement line and a book line with the same non-empty reference and
//!    different amounts (reported, not matched);
//! 3. **amount and date**: the same amount, dates at most `tolerance` days apart;
//! 4. **reversed**: a book line and the line of its void, both left, cancel each other.
//!
//! Each line is in at most one pair. Passes 1 and 2 pair the lines of one reference closest
//! in date first (whatever the distance). Pass 3 makes, for each amount, as many pairs within
//! the tolerance as there can be: the closest first when that makes as many (almost always),
//! else the most there can be (book lines in date order, each with the earliest statement line
//! in reach), re-paired in date order. Among pairs as close: the statement line earlier by
//! date, then by line; the earlier book day (a bank books on or after the ledger's day), then
//! the lower sequence and leg.
//!
//! Each pass groups the lines by its key in a hash map and keeps each group's book lines by day
//! in a sorted map: n statement lines against m book lines take O((n + m) log m) per distance
//! in days a round pairs at (at most `tolerance` + 1 in pass 3; in passes 1 and 2, per group,
//! at most its pairs).

use ledger_client::PostingKind;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::SystemTime;
use time::Date;

/// A line of the statement, as the matching sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatementLine {
    /// Its line in the file (the header is line 1).
    pub line: u64,
    pub day: Date,
    /// Minor units at the account's scale, positive raising its balance.
    pub amount: i128,
    /// Empty: none.
    pub reference: String,
}

/// A leg on the account of a posting that moves money, as the matching sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BookLine {
    pub posting_id: String,
    pub sequence: u64,
    /// Its index among the posting's legs.
    pub leg: usize,
    /// The posting's effective day (UTC).
    pub day: Date,
    /// The posting's effective time (shown; the matching uses `day`).
    pub effective_at: SystemTime,
    /// Minor units at the account's scale, positive raising its balance.
    pub amount: i128,
    /// Empty: none.
    pub reference: String,
    /// What the posting is (shown).
    pub kind: PostingKind,
    /// On a void: the posting it compensates.
    pub voids: Option<String>,
}

/// How a pair was matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    Reference,
    AmountAndDate,
}

impl How {
    /// Its name in every output format.
    pub fn name(self) -> &'static str {
        match self {
            How::Reference => "reference",
            How::AmountAndDate => "amount-and-date",
        }
    }
}

/// What the matching found: indices into the statement's and the book's lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// (statement, book, how), by statement line.
    pub matched: Vec<(usize, usize, How)>,
    /// (statement, book) with the same reference and different amounts, by statement line.
    pub mismatched: Vec<(usize, usize)>,
    pub unmatched_statement: Vec<usize>,
    /// By sequence and leg.
    pub unmatched_book: Vec<usize>,
    /// (book line, the line of its void), both unmatched: they cancel each other.
    pub reversed: Vec<(usize, usize)>,
    /// The sum of every statement line.
    pub statement_sum: i128,
    /// The sum of every book line.
    pub book_sum: i128,
}

impl Outcome {
    /// Statement sum less book sum.
    pub fn difference(&self) -> i128 {
        self.statement_sum - self.book_sum
    }

    /// Every line matched (or reversed) and the sums equal.
    pub fn reconciled(&self) -> bool {
        self.mismatched.is_empty()
            && self.unmatched_statement.is_empty()
            && self.unmatched_book.is_empty()
            && self.difference() == 0
    }
}

/// Matches `statement` to `book` (whose lines are in sequence and leg order), dates at most
/// `tolerance` days apart in the amount-and-date pass. Sums are exact: callers keep each
/// amount under 10^30 and the lines under 10^6, far inside `i128`.
pub fn reconcile(statement: &[StatementLine], book: &[BookLine], tolerance: u32) -> Outcome {
    let mut s_free = vec![true; statement.len()];
    let mut b_free = vec![true; book.len()];
    let mut out = Outcome {
        statement_sum: statement.iter().map(|s| s.amount).sum(),
        book_sum: book.iter().map(|b| b.amount).sum(),
        ..Outcome::default()
    };
    let mut sides = Sides {
        statement,
        book,
        s_free: &mut s_free,
        b_free: &mut b_free,
    };
    let named = |r: &str| !r.is_empty();
    let by_reference = sides.pair(
        |s| named(&s.reference).then_some((s.reference.as_str(), s.amount)),
        |b| named(&b.reference).then_some((b.reference.as_str(), b.amount)),
        Pairing::Nearest(None),
    );
    out.mismatched = sides.pair(
        |s| named(&s.reference).then_some(s.reference.as_str()),
        |b| named(&b.reference).then_some(b.reference.as_str()),
        Pairing::Nearest(None),
    );
    let amount = |s: &StatementLine| Some(s.amount);
    let by_amount = sides.pair(amount, |b| Some(b.amount), Pairing::Within(tolerance));
    out.reversed = reversals(book, sides.b_free);
    let how = |h: How| move |(s, b)| (s, b, h);
    out.matched = by_reference.into_iter().map(how(How::Reference)).collect();
    out.matched
        .extend(by_amount.into_iter().map(how(How::AmountAndDate)));
    out.matched.sort_unstable_by_key(|&(s, _, _)| s);
    out.mismatched.sort_unstable_by_key(|&(s, _)| s);
    out.unmatched_statement = (0..statement.len()).filter(|&i| s_free[i]).collect();
    out.unmatched_book = (0..book.len()).filter(|&i| b_free[i]).collect();
    out
}

/// Both sides' lines and which of them are still free.
struct Sides<'a, 'f> {
    statement: &'a [StatementLine],
    book: &'a [BookLine],
    s_free: &'f mut [bool],
    b_free: &'f mut [bool],
}

/// One group's free book lines: by day (its Julian day number), each day's in book order.
type Days = BTreeMap<i32, VecDeque<usize>>;

impl<'a> Sides<'a, '_> {
    /// Pairs the free lines of equal keys (a line without a key takes no part) as `pairing`
    /// says; marks them taken.
    fn pair<K: Hash + Eq>(
        &mut self,
        s_key: impl Fn(&'a StatementLine) -> Option<K>,
        b_key: impl Fn(&'a BookLine) -> Option<K>,
        pairing: Pairing,
    ) -> Vec<(usize, usize)> {
        let (statement, book) = (self.statement, self.book);
        let mut groups: HashMap<K, (Vec<usize>, Days)> = HashMap::new();
        for (i, b) in book.iter().enumerate().filter(|(i, _)| self.b_free[*i]) {
            if let Some(k) = b_key(b) {
                let days = &mut groups.entry(k).or_default().1;
                days.entry(b.day.to_julian_day()).or_default().push_back(i);
            }
        }
        for (i, s) in statement
            .iter()
            .enumerate()
            .filter(|(i, _)| self.s_free[*i])
        {
            if let Some(g) = s_key(s).and_then(|k| groups.get_mut(&k)) {
                g.0.push(i);
            }
        }
        let mut pairs = Vec::new();
        for (mut lines, mut days) in groups.into_values() {
            lines.sort_unstable_by_key(|&s| (statement[s].day, s));
            match pairing {
                Pairing::Nearest(max_gap) => {
                    pair_nearest_days(statement, lines, &mut days, max_gap, &mut pairs)
                }
                Pairing::Within(t) => pairs.extend(most_within(statement, book, lines, days, t)),
            }
        }
        for &(s, b) in &pairs {
            self.s_free[s] = false;
            self.b_free[b] = false;
        }
        pairs
    }
}

/// How a group's lines are paired.
#[derive(Clone, Copy)]
enum Pairing {
    /// The closest first, at most so many days apart (`None`: any).
    Nearest(Option<u32>),
    /// As many pairs as can be at most so many days apart.
    Within(u32),
}

/// One group's pairs at most `tolerance` days apart: the closest first when they are as many
/// as there can be, else as many as there can be, paired in date order (the k-th earliest
/// statement line with the k-th earliest book line: the closest pairing of those lines).
fn most_within(
    statement: &[StatementLine],
    book: &[BookLine],
    lines: Vec<usize>,
    mut days: Days,
    tolerance: u32,
) -> Vec<(usize, usize)> {
    let mut most = Vec::new();
    pair_within(statement, lines.clone(), &days, tolerance, &mut most);
    let mut closest = Vec::new();
    pair_nearest_days(statement, lines, &mut days, Some(tolerance), &mut closest);
    if closest.len() == most.len() {
        return closest;
    }
    let (mut s, mut b): (Vec<usize>, Vec<usize>) = most.into_iter().unzip();
    s.sort_unstable_by_key(|&i| (statement[i].day, i));
    b.sort_unstable_by_key(|&i| (book[i].day, i));
    s.into_iter().zip(b).collect()
}

/// The most pairs at most `tolerance` days apart there can be: the book lines in date order,
/// each with the earliest free statement line in reach (the classic greedy for points and
/// windows of one width, which no other pairing beats).
fn pair_within(
    statement: &[StatementLine],
    lines: Vec<usize>,
    days: &Days,
    tolerance: u32,
    pairs: &mut Vec<(usize, usize)>,
) {
    let mut waiting: VecDeque<usize> = lines.into();
    let t = i64::from(tolerance);
    for (&day, books) in days {
        for &b in books {
            let gap = |s: usize| i64::from(statement[s].day.to_julian_day()) - i64::from(day);
            while waiting.front().is_some_and(|&s| gap(s) < -t) {
                waiting.pop_front();
            }
            match waiting.front() {
                Some(&s) if gap(s) <= t => {
                    pairs.push((s, b));
                    waiting.pop_front();
                }
                _ => {}
            }
        }
    }
}

/// One group: its statement lines (by date) against its book lines by day, in rounds of one
/// distance each, from the smallest any free pair has.
fn pair_nearest_days(
    statement: &[StatementLine],
    mut lines: Vec<usize>,
    days: &mut Days,
    max_gap: Option<u32>,
    pairs: &mut Vec<(usize, usize)>,
) {
    loop {
        let Some(gap) = lines
            .iter()
            .filter_map(|&s| nearest(days, statement[s].day.to_julian_day()))
            .min()
        else {
            return;
        };
        if max_gap.is_some_and(|m| gap > i64::from(m)) {
            return;
        }
        lines.retain(
            |&s| match take(days, statement[s].day.to_julian_day(), gap) {
                Some(b) => {
                    pairs.push((s, b));
                    false
                }
                None => true,
            },
        );
    }
}

/// The distance in days from `day` to the nearest day with a free book line.
fn nearest(days: &Days, day: i32) -> Option<i64> {
    let before = days.range(..=day).next_back().map(|(d, _)| *d);
    let after = days.range(day..).next().map(|(d, _)| *d);
    let gap = |d: i32| (i64::from(day) - i64::from(d)).abs();
    match (before.map(gap), after.map(gap)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Takes the first free book line (in book order) exactly `gap` days from `day`, if any: of
/// the day before, else of the day after.
fn take(days: &mut Days, day: i32, gap: i64) -> Option<usize> {
    let at = |offset: i64| i32::try_from(i64::from(day) + offset).ok();
    let front = |d: Option<i32>| d.and_then(|d| days.get(&d)?.front().map(|&b| (b, d)));
    let (b, d) = front(at(-gap)).or_else(|| front(at(gap)))?;
    let queue = days.get_mut(&d).expect("the day just read");
    queue.pop_front();
    if queue.is_empty() {
        days.remove(&d);
    }
    Some(b)
}

/// The free book lines that a free line of their void cancels (the same leg, the opposite
/// amount): (the line, its void's), by the void's book order. Marks them taken.
fn reversals(book: &[BookLine], b_free: &mut [bool]) -> Vec<(usize, usize)> {
    let mut originals: HashMap<(&str, i128), VecDeque<usize>> = HashMap::new();
    for (i, b) in book.iter().enumerate().filter(|(i, _)| b_free[*i]) {
        originals
            .entry((b.posting_id.as_str(), b.amount))
            .or_default()
            .push_back(i);
    }
    let mut pairs = Vec::new();
    for (v, line) in book.iter().enumerate() {
        let Some(voids) = line.voids.as_deref().filter(|_| b_free[v]) else {
            continue;
        };
        let Some(o) = originals
            .get_mut(&(voids, -line.amount))
            .and_then(VecDeque::pop_front)
        else {
            continue;
        };
        b_free[o] = false;
        b_free[v] = false;
        pairs.push((o, v));
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use How::{AmountAndDate as Amt, Reference as Ref};

    fn day(n: i32) -> Date {
        Date::from_julian_day(2_461_000 + n).unwrap()
    }

    /// A statement line `line` on day `d`.
    fn s(line: u64, d: i32, amount: i128, reference: &str) -> StatementLine {
        StatementLine {
            line,
            day: day(d),
            amount,
            reference: reference.into(),
        }
    }

    /// A book line: posting `p<seq>`'s leg 0 on day `d`.
    fn b(seq: u64, d: i32, amount: i128, reference: &str) -> BookLine {
        BookLine {
            posting_id: format!("p{seq}"),
            sequence: seq,
            leg: 0,
            day: day(d),
            effective_at: SystemTime::UNIX_EPOCH,
            amount,
            reference: reference.into(),
            kind: PostingKind::Posting,
            voids: None,
        }
    }

    /// The void (sequence `seq`) of posting `p<of>`.
    fn void(seq: u64, d: i32, amount: i128, of: u64) -> BookLine {
        BookLine {
            kind: PostingKind::Void,
            voids: Some(format!("p{of}")),
            ..b(seq, d, amount, "")
        }
    }

    /// What a case expects, by index: matched, mismatched, unmatched statement and book
    /// lines, reversed pairs.
    type Want = (
        Vec<(usize, usize, How)>,
        Vec<(usize, usize)>,
        Vec<usize>,
        Vec<usize>,
        Vec<(usize, usize)>,
    );

    struct Case {
        name: &'static str,
        statement: Vec<StatementLine>,
        book: Vec<BookLine>,
        tolerance: u32,
        want: Want,
    }

    fn case(
        name: &'static str,
        statement: Vec<StatementLine>,
        book: Vec<BookLine>,
        tolerance: u32,
        want: Want,
    ) -> Case {
        Case {
            name,
            statement,
            book,
            tolerance,
            want,
        }
    }

    fn reference_cases() -> Vec<Case> {
        vec![
            case(
                "a reference matches whatever the dates",
                vec![s(2, 0, 100, "INV-1")],
                vec![b(1, 5, 100, "INV-1")],
                0,
                (vec![(0, 0, Ref)], vec![], vec![], vec![], vec![]),
            ),
            case(
                "the same reference with another amount is a mismatch, not a match by amount",
                vec![s(2, 0, 100, "INV-1")],
                vec![b(1, 0, 90, "INV-1"), b(2, 0, 100, "")],
                0,
                (vec![], vec![(0, 0)], vec![], vec![1], vec![]),
            ),
            case(
                "of one reference and amount, the nearest date (a monthly standing order)",
                vec![s(2, 30, 100, "RENT")],
                vec![b(1, 0, 100, "RENT"), b(2, 31, 100, "RENT")],
                0,
                (vec![(0, 1, Ref)], vec![], vec![], vec![0], vec![]),
            ),
            case(
                "a reference on one side only matches by amount and date",
                vec![s(2, 0, 100, "BANK-77")],
                vec![b(1, 0, 100, "")],
                0,
                (vec![(0, 0, Amt)], vec![], vec![], vec![], vec![]),
            ),
            case(
                "a second line of one reference, the book's taken, is matched by amount or left",
                vec![s(2, 0, 100, "A"), s(3, 0, 100, "A")],
                vec![b(1, 0, 100, "A")],
                3,
                (vec![(0, 0, Ref)], vec![], vec![1], vec![], vec![]),
            ),
            case(
                "the opposite sign never matches",
                vec![s(2, 0, -100, "A")],
                vec![b(1, 0, 100, "")],
                3,
                (vec![], vec![], vec![0], vec![0], vec![]),
            ),
        ]
    }

    fn date_cases() -> Vec<Case> {
        vec![
            case(
                "a day apart is unmatched with tolerance 0",
                vec![s(2, 1, 100, "")],
                vec![b(1, 0, 100, "")],
                0,
                (vec![], vec![], vec![0], vec![0], vec![]),
            ),
            case(
                "a day apart matches with tolerance 1",
                vec![s(2, 1, 100, "")],
                vec![b(1, 0, 100, "")],
                1,
                (vec![(0, 0, Amt)], vec![], vec![], vec![], vec![]),
            ),
            case(
                "the closest pairs first, not the first statement line first",
                vec![s(2, 2, 100, ""), s(3, 1, 100, "")],
                vec![b(1, 1, 100, ""), b(2, 3, 100, "")],
                1,
                (
                    vec![(0, 1, Amt), (1, 0, Amt)],
                    vec![],
                    vec![],
                    vec![],
                    vec![],
                ),
            ),
            case(
                "as close on both sides: the earlier book day (a bank books on or after it)",
                vec![s(2, 1, 100, "")],
                vec![b(1, 2, 100, ""), b(2, 0, 100, "")],
                1,
                (vec![(0, 1, Amt)], vec![], vec![], vec![0], vec![]),
            ),
            case(
                "as close on one day: the lower sequence",
                vec![s(2, 1, 100, "")],
                vec![b(1, 0, 100, ""), b(2, 0, 100, "")],
                1,
                (vec![(0, 0, Amt)], vec![], vec![], vec![1], vec![]),
            ),
            case(
                "as many pairs as can be, where the closest first would make fewer",
                vec![s(2, 1, 100, ""), s(3, 2, 100, "")],
                vec![b(1, 2, 100, ""), b(2, 3, 100, "")],
                1,
                (
                    vec![(0, 0, Amt), (1, 1, Amt)],
                    vec![],
                    vec![],
                    vec![],
                    vec![],
                ),
            ),
            case(
                "three identical statement lines, two book lines: one left",
                vec![s(2, 0, 100, ""), s(3, 0, 100, ""), s(4, 0, 100, "")],
                vec![b(1, 0, 100, ""), b(2, 0, 100, "")],
                0,
                (
                    vec![(0, 0, Amt), (1, 1, Amt)],
                    vec![],
                    vec![2],
                    vec![],
                    vec![],
                ),
            ),
            case(
                "two identical statement lines, three book lines: the last left",
                vec![s(2, 0, 100, "X"), s(3, 0, 100, "X")],
                vec![b(1, 0, 100, "X"), b(2, 0, 100, "X"), b(3, 0, 100, "X")],
                0,
                (
                    vec![(0, 0, Ref), (1, 1, Ref)],
                    vec![],
                    vec![],
                    vec![2],
                    vec![],
                ),
            ),
        ]
    }

    fn void_cases() -> Vec<Case> {
        vec![
            case(
                "a posting and its void, neither on the statement, cancel each other",
                vec![s(2, 0, 50, "")],
                vec![b(1, 0, 100, ""), b(2, 0, 50, ""), void(3, 1, -100, 1)],
                0,
                (vec![(0, 1, Amt)], vec![], vec![], vec![], vec![(0, 2)]),
            ),
            case(
                "a posting and its void both on the statement are matched",
                vec![s(2, 0, 100, ""), s(3, 1, -100, "")],
                vec![b(1, 0, 100, ""), void(2, 1, -100, 1)],
                0,
                (
                    vec![(0, 0, Amt), (1, 1, Amt)],
                    vec![],
                    vec![],
                    vec![],
                    vec![],
                ),
            ),
            case(
                "a void whose posting is on the statement stays unmatched",
                vec![s(2, 0, 100, "")],
                vec![b(1, 0, 100, ""), void(2, 1, -100, 1)],
                0,
                (vec![(0, 0, Amt)], vec![], vec![], vec![1], vec![]),
            ),
        ]
    }

    #[test]
    fn statement_lines_match_book_lines_by_reference_then_amount_and_nearest_date_once_each() {
        let cases = [reference_cases(), date_cases(), void_cases()]
            .into_iter()
            .flatten();
        for c in cases {
            let o = reconcile(&c.statement, &c.book, c.tolerance);
            let got = (
                o.matched.clone(),
                o.mismatched.clone(),
                o.unmatched_statement.clone(),
                o.unmatched_book.clone(),
                o.reversed.clone(),
            );
            assert_eq!(got, c.want, "{}", c.name);
            let sum = |v: &[i128]| v.iter().sum::<i128>();
            let amounts = |l: &[StatementLine]| l.iter().map(|s| s.amount).collect::<Vec<_>>();
            assert_eq!(o.statement_sum, sum(&amounts(&c.statement)), "{}", c.name);
            let all_matched = c.want.1.is_empty() && c.want.2.is_empty() && c.want.3.is_empty();
            assert_eq!(
                o.reconciled(),
                all_matched && o.difference() == 0,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn everything_matched_is_reconciled_with_no_difference_and_an_unmatched_line_is_not() {
        let statement = [s(2, 0, 100, "A"), s(3, 2, -30, "")];
        let book = [b(1, 0, 100, "A"), b(2, 1, -30, "")];
        let o = reconcile(&statement, &book, 1);
        assert!(o.reconciled());
        assert_eq!((o.statement_sum, o.book_sum, o.difference()), (70, 70, 0));
        let o = reconcile(&statement, &book, 0);
        assert!(!o.reconciled());
        assert_eq!(o.difference(), 0, "the sums agree, a line does not");
        let o = reconcile(&[], &[], 0);
        assert!(o.reconciled(), "nothing on either side");
    }

    /// A pseudo-random number (a linear congruential generator: the same every run).
    fn next(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        *seed >> 33
    }

    #[test]
    fn a_hundred_thousand_statement_lines_match_a_hundred_thousand_book_lines() {
        const N: usize = 100_000;
        let mut seed = 29;
        let mut book = Vec::with_capacity(N);
        let mut statement = Vec::with_capacity(N);
        for i in 0..N {
            let d = (next(&mut seed) % 31) as i32;
            let amount = (next(&mut seed) % 2_000) as i128 - 1_000;
            let amount = if amount == 0 { 1 } else { amount };
            let reference = if i % 2 == 0 {
                format!("R{i}")
            } else {
                String::new()
            };
            book.push(b(i as u64 + 1, d, amount, &reference));
            // The bank books it up to two days later, in its own order.
            let late = (next(&mut seed) % 3) as i32;
            statement.push(s(0, d + late, amount, &reference));
        }
        statement.reverse();
        for (i, l) in statement.iter_mut().enumerate() {
            l.line = i as u64 + 2;
        }
        let started = std::time::Instant::now();
        let o = reconcile(&statement, &book, 2);
        eprintln!(
            "100,000 against 100,000 lines matched in {:?}",
            started.elapsed()
        );
        assert_eq!(o.matched.len(), N);
        assert!(o.reconciled());
        let by_reference = o.matched.iter().filter(|m| m.2 == Ref).count();
        assert_eq!(by_reference, N / 2);
    }
}
