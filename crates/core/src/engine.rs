//! The pure decision core of the writer: applies postings, in order, to balances held in
//! memory for a batch, and refuses any posting that would take a no-negative account's
//! available balance below zero or an account's totals past [`MAX_TOTAL_MINOR`]. A refused
//! posting changes nothing. A posting is applied whole: its legs on one account are netted
//! before the rule is checked.
//!
//! Four kinds of change: an ordinary posting moves money (debits, credits); a hold adds to
//! the held totals and moves nothing; a capture moves what it captures and takes the whole
//! hold off the held totals (never refused for funds: they were reserved); a release takes a
//! hold off the held totals.
//!
//! A hold whose expiry time has passed but whose release is not recorded yet is *lapsed*: it
//! stays in the held totals (they are the journal's) but holds nothing for the funds rule.

use super::account::{Account, Direction, NormalBalance};
use super::amount::format_minor;
use super::error::{LedgerError, Reason};
use super::limits::MAX_TOTAL_MINOR;
use super::posting::Leg;
use super::terms::{
    ceiling_exceeded, limit_exceeded, AccountStatus, DebitLimit, DebitWindow, Terms,
};
use std::collections::HashMap;
use time::{Duration, OffsetDateTime};

/// An account's running totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Sum of debit legs, in minor units.
    pub debits: i128,
    /// Sum of credit legs, in minor units.
    pub credits: i128,
    /// Number of legs that moved money so far (the version of the last).
    pub version: i64,
    /// Sums of the legs of the account's open holds.
    pub held_debits: i128,
    pub held_credits: i128,
}

impl Totals {
    /// The signed balance for an account of `normal` side.
    pub fn balance(&self, normal: NormalBalance) -> i128 {
        balance_of(normal, self.debits, self.credits)
    }

    /// The balance less what the open holds would take from it.
    pub fn available(&self, normal: NormalBalance) -> i128 {
        available_of(
            normal,
            self.debits,
            self.credits,
            self.held_debits,
            self.held_credits,
        )
    }
}

/// debits − credits for debit-normal accounts, credits − debits for credit-normal ones.
pub fn balance_of(normal: NormalBalance, debits: i128, credits: i128) -> i128 {
    match normal {
        NormalBalance::Debit => debits - credits,
        NormalBalance::Credit => credits - debits,
    }
}

/// The balance less the held legs that would lower it: debits − credits − held credits for a
/// debit-normal account, credits − debits − held debits for a credit-normal one.
pub fn available_of(
    normal: NormalBalance,
    debits: i128,
    credits: i128,
    held_debits: i128,
    held_credits: i128,
) -> i128 {
    match normal {
        NormalBalance::Debit => debits - credits - held_credits,
        NormalBalance::Credit => credits - debits - held_debits,
    }
}

/// The state of one leg after it was applied: the account's totals including it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LegEffect {
    pub account_id: i64,
    pub after: Totals,
}

/// What a posting does to the totals, beside the legs it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Its legs move money: they add to debits and credits; the funds rule applies.
    Move,
    /// Its legs reserve: they add to the held totals; the funds rule applies.
    Hold,
    /// Its legs move money (what it captures) and these, the hold's legs, leave the held
    /// totals; within the hold, so never refused for funds.
    Capture(Vec<Leg>),
    /// These, the hold's legs, leave the held totals; its own legs (the hold's, swapped)
    /// move nothing.
    Release(Vec<Leg>),
}

/// An account as a batch finds it: its attributes, the version of its terms in force (the
/// rules it obeys), its totals, and what its debit limits need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountState {
    pub account: Account,
    pub totals: Totals,
    pub terms: Terms,
    /// The last stored sequence that touched it (moved or held on it); its ledger's base
    /// when none.
    pub last_sequence: i64,
    /// One per distinct window of its debit limits in force and of those the batch's
    /// updates set (`write::update_windows`).
    pub windows: Vec<DebitWindow>,
}

impl AccountState {
    /// An account with version 1 of its terms and nothing recorded on it beyond `totals`.
    pub fn new(account: Account, totals: Totals) -> AccountState {
        let terms = Terms::initial(account.allow_negative);
        AccountState {
            account,
            totals,
            terms,
            last_sequence: 0,
            windows: Vec::new(),
        }
    }
}

impl AccountState {
    /// Totals no writer could have left are a corrupt row: negative sums, sums past
    /// [`MAX_TOTAL_MINOR`], or a balance below zero on an account that forbids it. (Its
    /// available balance may be below zero while holds that lapsed still count in its held
    /// totals, their releases not recorded yet; its balance never is.)
    pub fn check(&self) -> Result<(), LedgerError> {
        let (a, t) = (&self.account, &self.totals);
        let sums = [t.debits, t.credits, t.held_debits, t.held_credits];
        let why = if sums.iter().any(|v| *v < 0) || t.version < 0 {
            "negative totals"
        } else if sums.iter().any(|v| *v > MAX_TOTAL_MINOR) {
            "totals past MAX_TOTAL_MINOR"
        } else if matches!(self.terms.floor, Some(f) if t.balance(a.normal_balance) < f) {
            "a balance below the floor of its terms"
        } else {
            return Ok(());
        };
        Err(corrupt_account(&a.code, &format!("{why}: {t:?}")))
    }
}

/// The refusal of a request that touches account `code`, whose row breaks an invariant.
fn corrupt_account(code: &str, detail: &str) -> LedgerError {
    LedgerError::journal_corrupt(&format!("account {code:?}"), None, detail).with("account", code)
}

/// Balances of the accounts a batch touches, and the rules they obey. Every refusal is an
/// error: a rule of the ledger's state (`INSUFFICIENT_FUNDS`, `LIMIT_EXCEEDED`, which bind
/// the request's key), or `JOURNAL_CORRUPT` when what it was given cannot be (an account it
/// was not given, a release of more than is held), which binds nothing.
pub struct Engine {
    totals: HashMap<i64, Totals>,
    accounts: HashMap<i64, Account>,
    /// The version of each account's terms in force (updated as the batch records versions).
    terms: HashMap<i64, Terms>,
    windows: HashMap<i64, Vec<DebitWindow>>,
    /// The time the posting being applied is recorded at (debit limits' windows end there).
    at: OffsetDateTime,
    /// Per account, the (debit, credit) legs of its lapsed holds: in the held totals, not
    /// held for the funds rule.
    lapsed: HashMap<i64, (i128, i128)>,
}

impl Engine {
    /// An engine over accounts whose states passed [`AccountState::check`].
    pub fn new(states: impl IntoIterator<Item = (i64, AccountState)>) -> Engine {
        let mut e = Engine {
            totals: HashMap::new(),
            accounts: HashMap::new(),
            terms: HashMap::new(),
            windows: HashMap::new(),
            at: OffsetDateTime::UNIX_EPOCH,
            lapsed: HashMap::new(),
        };
        for (id, s) in states {
            e.totals.insert(id, s.totals);
            e.accounts.insert(id, s.account);
            e.terms.insert(id, s.terms);
            e.windows.insert(id, s.windows);
        }
        e
    }

    /// The version of an account's terms in force, if the engine has the account.
    pub fn terms(&self, account_id: i64) -> Option<&Terms> {
        self.terms.get(&account_id)
    }

    /// A version recorded now: the postings applied after it obey it.
    pub fn set_terms(&mut self, account_id: i64, terms: Terms) {
        self.terms.insert(account_id, terms);
    }

    /// The time the next postings are recorded at.
    pub fn at(&mut self, now: OffsetDateTime) {
        self.at = now;
    }

    /// The available balance the funds rule sees (lapsed holds hold nothing), now.
    pub fn available_now(&self, account_id: i64) -> Option<i128> {
        let a = self.accounts.get(&account_id)?;
        Some(self.available(a, self.totals.get(&account_id)?))
    }

    /// A hold's legs (on the batch's accounts) lapse (`sign` 1: its expiry time has passed)
    /// or stop being lapsed (−1: its release is recorded now, which takes them off the held
    /// totals). Lapsed amounts never exceed what is held: beyond it, the hold's rows disagree
    /// with the account's totals (`JOURNAL_CORRUPT`), and nothing changes.
    pub fn lapse(&mut self, legs: &[Leg], sign: i128) -> Result<(), LedgerError> {
        let mut next = self.lapsed.clone();
        for leg in legs {
            let held = self.current(&HashMap::new(), leg.account_id)?;
            let l = next.entry(leg.account_id).or_default();
            match leg.direction {
                Direction::Debit => l.0 += sign * leg.amount.minor(),
                Direction::Credit => l.1 += sign * leg.amount.minor(),
            }
            if !(0..=held.held_debits).contains(&l.0) || !(0..=held.held_credits).contains(&l.1) {
                let detail =
                    format!("an expiring hold's legs {l:?} beyond its held totals {held:?}");
                return Err(corrupt_account(&leg.account_code, &detail));
            }
        }
        self.lapsed = next;
        Ok(())
    }

    /// The balance with the open holds that would raise it (the ceiling's measure); lapsed
    /// holds raise nothing.
    pub fn raised(&self, account: &Account, t: &Totals) -> i128 {
        let (d, c) = self.lapsed.get(&account.id).copied().unwrap_or_default();
        t.balance(account.normal_balance)
            + match account.normal_balance {
                NormalBalance::Debit => t.held_debits - d,
                NormalBalance::Credit => t.held_credits - c,
            }
    }

    /// The available balance the funds rule sees: lapsed holds hold nothing.
    fn available(&self, account: &Account, t: &Totals) -> i128 {
        let (d, c) = self.lapsed.get(&account.id).copied().unwrap_or_default();
        available_of(
            account.normal_balance,
            t.debits,
            t.credits,
            t.held_debits - d,
            t.held_credits - c,
        )
    }

    /// Current totals of an account, if the engine has it.
    pub fn totals(&self, account_id: i64) -> Option<Totals> {
        self.totals.get(&account_id).copied()
    }

    /// All totals (to write back after the batch).
    pub fn into_totals(self) -> HashMap<i64, Totals> {
        self.totals
    }

    /// Applies an ordinary posting whole, or refuses it whole and changes nothing.
    pub fn apply(&mut self, legs: &[Leg]) -> Result<Vec<LegEffect>, LedgerError> {
        self.change(&Effect::Move, legs)
    }

    /// Applies a posting (its `legs` and `effect`) whole, or refuses it whole and changes
    /// nothing. Returns the effect of each leg that moved money (for a hold or a release:
    /// none).
    pub fn change(&mut self, effect: &Effect, legs: &[Leg]) -> Result<Vec<LegEffect>, LedgerError> {
        let mut next: HashMap<i64, Totals> = HashMap::new();
        if matches!(effect, Effect::Move | Effect::Hold) {
            self.check_status(legs)?;
        }
        let (moves, funds) = match effect {
            Effect::Move => (legs, true),
            Effect::Hold => {
                self.held(&mut next, legs, 1)?;
                (&[][..], true)
            }
            Effect::Capture(hold) => {
                self.held(&mut next, hold, -1)?;
                (legs, false)
            }
            Effect::Release(hold) => {
                self.held(&mut next, hold, -1)?;
                (&[][..], false)
            }
        };
        let effects = self.moved(&mut next, moves)?;
        if funds {
            self.check_funds(&next, legs)?;
            self.check_ceilings(&next, legs)?;
            self.check_limits(&next, legs)?;
        }
        self.totals.extend(next);
        Ok(effects)
    }

    /// An account's totals as the posting being applied has left them so far.
    fn current(&self, next: &HashMap<i64, Totals>, id: i64) -> Result<Totals, LedgerError> {
        match next.get(&id).or_else(|| self.totals.get(&id)) {
            Some(t) => Ok(*t),
            None => Err(corrupt_account(
                &format!("#{id}"),
                "a leg names it, but the batch did not load it",
            )),
        }
    }

    fn account(&self, id: i64) -> Result<&Account, LedgerError> {
        self.accounts.get(&id).ok_or_else(|| {
            corrupt_account(
                &format!("#{id}"),
                "a leg names it, but the batch did not load it",
            )
        })
    }

    /// Adds (`sign` 1) or takes off (−1) legs from the held totals.
    fn held(
        &self,
        next: &mut HashMap<i64, Totals>,
        legs: &[Leg],
        sign: i128,
    ) -> Result<(), LedgerError> {
        for leg in legs {
            let mut t = self.current(next, leg.account_id)?;
            let amount = sign * leg.amount.minor();
            match leg.direction {
                Direction::Debit => t.held_debits += amount,
                Direction::Credit => t.held_credits += amount,
            }
            if t.held_debits < 0 || t.held_credits < 0 {
                let detail = format!("a release of more than it holds: {t:?}");
                return Err(corrupt_account(&leg.account_code, &detail));
            }
            self.within_limit(leg.account_id, &t)?;
            next.insert(leg.account_id, t);
        }
        Ok(())
    }

    /// Moves legs' money; the effect of each (the totals after it).
    fn moved(
        &self,
        next: &mut HashMap<i64, Totals>,
        legs: &[Leg],
    ) -> Result<Vec<LegEffect>, LedgerError> {
        let mut effects = Vec::with_capacity(legs.len());
        for leg in legs {
            let mut t = self.current(next, leg.account_id)?;
            let amount = leg.amount.minor();
            if amount <= 0 {
                let detail = format!("a recorded leg of {amount} minor units");
                return Err(corrupt_account(&leg.account_code, &detail));
            }
            match leg.direction {
                Direction::Debit => t.debits += amount,
                Direction::Credit => t.credits += amount,
            }
            t.version += 1;
            self.within_limit(leg.account_id, &t)?;
            next.insert(leg.account_id, t);
            effects.push(LegEffect {
                account_id: leg.account_id,
                after: t,
            });
        }
        Ok(effects)
    }

    fn within_limit(&self, id: i64, t: &Totals) -> Result<(), LedgerError> {
        let over = [t.debits, t.credits, t.held_debits, t.held_credits]
            .iter()
            .any(|v| *v > MAX_TOTAL_MINOR);
        if !over {
            return Ok(());
        }
        let a = self.account(id)?;
        Err(LedgerError::new(
            Reason::LimitExceeded,
            format!(
                "account {} would exceed {} total debits or credits (limit MAX_TOTAL_MINOR)",
                a.code,
                format_minor(MAX_TOTAL_MINOR, a.scale)
            ),
        )
        .with("account", &a.code)
        .with("limit", "MAX_TOTAL_MINOR"))
    }

    /// The funds rule after a whole posting, in leg order so the message names the first
    /// account in the request.
    fn check_funds(&self, next: &HashMap<i64, Totals>, legs: &[Leg]) -> Result<(), LedgerError> {
        for leg in legs {
            let a = self.account(leg.account_id)?;
            let after = self.available(a, &self.current(next, leg.account_id)?);
            let floor = self.terms_of(leg.account_id)?.floor;
            if let Some(floor) = floor.filter(|f| after < *f) {
                let before = self.current(&HashMap::new(), leg.account_id)?;
                let before_available = self.available(a, &before);
                let balance = before.balance(a.normal_balance);
                return Err(insufficient(a, floor, (balance, before_available), after));
            }
        }
        Ok(())
    }
}

/// The rules of an account's terms.
impl Engine {
    fn terms_of(&self, id: i64) -> Result<&Terms, LedgerError> {
        self.terms.get(&id).ok_or_else(|| {
            corrupt_account(
                &format!("#{id}"),
                "a leg names it, but the batch did not load it",
            )
        })
    }

    /// Frozen and closed accounts take no new postings or holds (in leg order).
    fn check_status(&self, legs: &[Leg]) -> Result<(), LedgerError> {
        for leg in legs {
            let (reason, what) = match self.terms_of(leg.account_id)?.status {
                AccountStatus::Open => continue,
                AccountStatus::Frozen => (Reason::AccountFrozen, "frozen: it takes no new postings or holds until it is opened again (captures and releases of earlier holds go through)"),
                AccountStatus::Closed => (Reason::AccountClosed, "closed, which is final"),
            };
            return Err(LedgerError::new(
                reason,
                format!("account {} is {what}", leg.account_code),
            )
            .with("account", &leg.account_code));
        }
        Ok(())
    }

    /// No posting takes an account's balance, with the open holds that would raise it, above
    /// its ceiling (a posting that lowers it is not refused).
    fn check_ceilings(&self, next: &HashMap<i64, Totals>, legs: &[Leg]) -> Result<(), LedgerError> {
        for leg in legs {
            let Some(ceiling) = self.terms_of(leg.account_id)?.ceiling else {
                continue;
            };
            let a = self.account(leg.account_id)?;
            let after = self.raised(a, &self.current(next, leg.account_id)?);
            let before = self.raised(a, &self.current(&HashMap::new(), leg.account_id)?);
            if after > ceiling && after > before {
                return Err(ceiling_exceeded(a, ceiling, before, after));
            }
        }
        Ok(())
    }

    /// No posting debits an account past a debit limit: the debits recorded in the window
    /// ending now, with the debit legs of its open holds, stay within the limit.
    fn check_limits(&self, next: &HashMap<i64, Totals>, legs: &[Leg]) -> Result<(), LedgerError> {
        for leg in legs.iter().filter(|l| l.direction == Direction::Debit) {
            let terms = self.terms_of(leg.account_id)?;
            for (i, limit) in terms.debit_limits.iter().enumerate() {
                let before = self.debit_use(leg.account_id, limit, &HashMap::new())?;
                let after = self.debit_use(leg.account_id, limit, next)?;
                if after > limit.amount && after > before {
                    let a = self.account(leg.account_id)?;
                    return Err(limit_exceeded(a, i, limit, before, after - before));
                }
            }
        }
        Ok(())
    }

    /// What counts against `limit` now: the account's debits recorded in the window ending
    /// now and the debit legs of its open holds (lapsed ones hold nothing).
    fn debit_use(
        &self,
        id: i64,
        limit: &DebitLimit,
        next: &HashMap<i64, Totals>,
    ) -> Result<i128, LedgerError> {
        let t = self.current(next, id)?;
        let window = self
            .windows
            .get(&id)
            .and_then(|w| w.iter().find(|w| w.window_seconds == limit.window_seconds));
        let Some(window) = window else {
            let detail = format!(
                "a debit limit over {} s whose window the batch did not load",
                limit.window_seconds
            );
            return Err(corrupt_account(&self.account(id)?.code, &detail));
        };
        let cut = self.at - Duration::seconds(i64::from(limit.window_seconds));
        let (lapsed_d, _) = self.lapsed.get(&id).copied().unwrap_or_default();
        Ok(t.debits - window.debits_until(cut) + t.held_debits - lapsed_d)
    }
}

/// The refusal of a posting that would take `rule`'s account's available balance below its
/// floor (`balance` and `before_available` before it).
pub fn insufficient(
    rule: &Account,
    floor: i128,
    (balance, before_available): (i128, i128),
    after: i128,
) -> LedgerError {
    let held = if before_available == balance {
        String::new()
    } else {
        format!(
            " ({} {} held by open holds)",
            format_minor(balance - before_available, rule.scale),
            rule.currency
        )
    };
    let rule_text = if floor == 0 {
        "does not allow negative balances".to_owned()
    } else {
        format!(
            "has a balance floor of {} {}",
            format_minor(floor, rule.scale),
            rule.currency
        )
    };
    LedgerError::new(
        Reason::InsufficientFunds,
        format!(
            "account {} has an available balance of {} {}{held} over all its legs, whatever their effective time (a future-dated leg counts at once, though GetBalance without as_of leaves it out until it is effective), and {rule_text}; this posting would make it {} {}",
            rule.code,
            format_minor(before_available, rule.scale),
            rule.currency,
            format_minor(after, rule.scale),
            rule.currency
        ),
    )
    .with("account", &rule.code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amount::Amount;
    use proptest::prelude::*;

    fn account(id: i64, normal: NormalBalance, allow_negative: bool) -> Account {
        Account {
            ledger: crate::ledger::DEFAULT_LEDGER_ID,
            id,
            code: format!("acct{id}"),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: normal,
            allow_negative,
            metadata: Default::default(),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
        }
    }

    fn leg(id: i64, d: Direction, minor: i128) -> Leg {
        Leg {
            account_id: id,
            account_code: format!("acct{id}"),
            currency: "EUR".into(),
            direction: d,
            amount: Amount::from_minor(minor, 2),
        }
    }

    fn engine(n: i64, allow_negative_first: bool) -> Engine {
        Engine::new((0..n).map(|i| {
            let normal = if i % 2 == 0 {
                NormalBalance::Debit
            } else {
                NormalBalance::Credit
            };
            let account = account(i, normal, i == 0 && allow_negative_first);
            let totals = Totals::default();
            (i, AccountState::new(account, totals))
        }))
    }

    #[test]
    fn a_posting_that_would_overdraw_is_refused_whole_and_changes_nothing() {
        let mut e = engine(3, true);
        // account 0 (debit-normal, may go negative) funds account 1 (credit-normal)? Credit 0, debit 2.
        e.apply(&[
            leg(0, Direction::Credit, 100),
            leg(2, Direction::Debit, 100),
        ])
        .unwrap();
        let before = (e.totals(0).unwrap(), e.totals(2).unwrap());
        let err = e
            .apply(&[
                leg(2, Direction::Credit, 150),
                leg(0, Direction::Debit, 150),
            ])
            .unwrap_err();
        assert_eq!(err.reason, Reason::InsufficientFunds);
        assert!(
            err.message.contains("acct2")
                && err.message.contains("1.00")
                && err.message.contains("-0.50"),
            "{}",
            err.message
        );
        assert_eq!((e.totals(0).unwrap(), e.totals(2).unwrap()), before);
    }

    #[test]
    fn legs_on_the_same_account_are_netted_before_the_no_negative_check() {
        let mut e = engine(3, true);
        e.apply(&[
            leg(0, Direction::Credit, 100),
            leg(2, Direction::Debit, 100),
        ])
        .unwrap();
        // 2 pays out 150 but receives 100 in the same posting: net -50 from 100 → 50 ≥ 0.
        let effects = e
            .apply(&[
                leg(2, Direction::Credit, 150),
                leg(2, Direction::Debit, 100),
                leg(0, Direction::Debit, 100),
                leg(0, Direction::Credit, 50),
            ])
            .unwrap();
        assert_eq!(effects[1].after.version, 3);
        assert_eq!(e.totals(2).unwrap().balance(NormalBalance::Debit), 50);
    }

    proptest! {
        /// Whatever postings are attempted, accepted ones keep Σdebits = Σcredits, no
        /// no-negative account goes below zero, every balance equals the sum of its accepted
        /// legs, and versions count legs.
        #[test]
        fn accepted_postings_keep_the_books_balanced(
            postings in prop::collection::vec(
                prop::collection::vec((0i64..5, 1i128..1000), 1..5), 0..60)
        ) {
            let mut e = engine(5, true);
            let mut model: HashMap<i64, (i128, i128, i64)> = HashMap::new();
            for p in postings {
                // Build a balanced posting: each (account, amount) is a debit, and account
                // (a+1)%5 gets the matching credit.
                let mut legs = Vec::new();
                for (a, m) in &p {
                    legs.push(leg(*a, Direction::Debit, *m));
                    legs.push(leg((a + 1) % 5, Direction::Credit, *m));
                }
                if let Ok(effects) = e.apply(&legs) {
                    prop_assert_eq!(effects.len(), legs.len());
                    for l in &legs {
                        let m = model.entry(l.account_id).or_default();
                        match l.direction {
                            Direction::Debit => m.0 += l.amount.minor(),
                            Direction::Credit => m.1 += l.amount.minor(),
                        }
                        m.2 += 1;
                    }
                }
                let mut sd = 0; let mut sc = 0;
                for id in 0..5 {
                    let t = e.totals(id).unwrap();
                    let m = model.get(&id).copied().unwrap_or_default();
                    prop_assert_eq!((t.debits, t.credits, t.version), m);
                    sd += t.debits; sc += t.credits;
                    if id != 0 {
                        let normal = if id % 2 == 0 { NormalBalance::Debit } else { NormalBalance::Credit };
                        prop_assert!(t.balance(normal) >= 0);
                    }
                }
                prop_assert_eq!(sd, sc);
            }
        }
    }
}
