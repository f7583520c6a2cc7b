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

use super::account::{Direction, NormalBalance};
use super::amount::format_minor;
use super::error::{LedgerError, Reason};
use super::limits::MAX_TOTAL_MINOR;
use super::posting::Leg;
use std::collections::HashMap;

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

/// What the engine needs to know about an account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub code: String,
    pub currency: String,
    pub scale: u8,
    pub normal_balance: NormalBalance,
    pub allow_negative: bool,
}

impl Rule {
    /// The rules of an account.
    pub fn of(a: &super::account::Account) -> Rule {
        Rule {
            code: a.code.clone(),
            currency: a.currency.clone(),
            scale: a.scale,
            normal_balance: a.normal_balance,
            allow_negative: a.allow_negative,
        }
    }
}

/// The state of one leg after it was applied: the account's totals including it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LegEffect {
    pub account_id: i64,
    pub after: Totals,
}

/// What a posting does to the totals.
#[derive(Clone, Copy, Debug)]
pub enum Change<'a> {
    /// Moves money: the legs add to debits and credits; the funds rule applies.
    Move(&'a [Leg]),
    /// Reserves: the legs add to the held totals; the funds rule applies.
    Hold(&'a [Leg]),
    /// Moves `captured` and takes `hold` (the hold's legs) off the held totals; within the
    /// hold, so never refused for funds.
    Capture {
        captured: &'a [Leg],
        hold: &'a [Leg],
    },
    /// Takes `hold` off the held totals.
    Release(&'a [Leg]),
}

/// Balances of the accounts a batch touches, and the rules they obey.
pub struct Engine {
    totals: HashMap<i64, Totals>,
    rules: HashMap<i64, Rule>,
    /// Per account, the (debit, credit) legs of its lapsed holds: in the held totals, not
    /// held for the funds rule.
    lapsed: HashMap<i64, (i128, i128)>,
}

impl Engine {
    /// An engine over the given totals (every account the batch touches must be present).
    pub fn new(totals: HashMap<i64, Totals>, rules: HashMap<i64, Rule>) -> Engine {
        for (id, t) in &totals {
            let rule = rules
                .get(id)
                .unwrap_or_else(|| panic!("no rule for account {id}"));
            assert!(
                t.debits >= 0
                    && t.credits >= 0
                    && t.version >= 0
                    && t.held_debits >= 0
                    && t.held_credits >= 0,
                "account {} totals negative: {t:?}",
                rule.code
            );
            // Its available balance may be below zero while holds that lapsed still count in
            // its held totals (their releases not recorded yet); its balance never is.
            assert!(
                rule.allow_negative || t.balance(rule.normal_balance) >= 0,
                "account {} is below zero though it does not allow it: {t:?}",
                rule.code
            );
        }
        Engine {
            totals,
            rules,
            lapsed: HashMap::new(),
        }
    }

    /// A hold's legs (on the batch's accounts) lapse (`sign` 1: its expiry time has passed)
    /// or stop being lapsed (−1: its release is recorded now, which takes them off the held
    /// totals). Lapsed amounts never exceed what is held.
    pub fn lapse(&mut self, legs: &[Leg], sign: i128) {
        for leg in legs {
            let held = self.totals(leg.account_id);
            let l = self.lapsed.entry(leg.account_id).or_default();
            match leg.direction {
                Direction::Debit => l.0 += sign * leg.amount.minor(),
                Direction::Credit => l.1 += sign * leg.amount.minor(),
            }
            assert!(
                (0..=held.held_debits).contains(&l.0) && (0..=held.held_credits).contains(&l.1),
                "lapsed {l:?} beyond held {held:?} on account {}",
                leg.account_id
            );
        }
    }

    /// The available balance the funds rule sees: lapsed holds hold nothing.
    fn available(&self, account_id: i64, t: &Totals) -> i128 {
        let (d, c) = self.lapsed.get(&account_id).copied().unwrap_or_default();
        let normal = self.rules[&account_id].normal_balance;
        available_of(
            normal,
            t.debits,
            t.credits,
            t.held_debits - d,
            t.held_credits - c,
        )
    }

    /// Current totals of an account.
    pub fn totals(&self, account_id: i64) -> Totals {
        *self
            .totals
            .get(&account_id)
            .unwrap_or_else(|| panic!("account {account_id} not loaded for this batch"))
    }

    /// All totals (to write back after the batch).
    pub fn into_totals(self) -> HashMap<i64, Totals> {
        self.totals
    }

    /// Applies an ordinary posting whole, or refuses it whole and changes nothing.
    pub fn apply(&mut self, legs: &[Leg]) -> Result<Vec<LegEffect>, LedgerError> {
        self.change(Change::Move(legs))
    }

    /// Applies a change whole, or refuses it whole and changes nothing. Returns the effect of
    /// each leg that moved money (for a hold or a release: none).
    pub fn change(&mut self, change: Change) -> Result<Vec<LegEffect>, LedgerError> {
        let mut next: HashMap<i64, Totals> = HashMap::new();
        let (moves, check) = match change {
            Change::Move(legs) => (legs, true),
            Change::Hold(legs) => {
                self.held(&mut next, legs, 1)?;
                (&[][..], true)
            }
            Change::Capture { captured, hold } => {
                self.held(&mut next, hold, -1)?;
                (captured, false)
            }
            Change::Release(hold) => {
                self.held(&mut next, hold, -1)?;
                (&[][..], false)
            }
        };
        let effects = self.moved(&mut next, moves)?;
        if check {
            let legs = match change {
                Change::Hold(l) | Change::Move(l) => l,
                _ => unreachable!(),
            };
            self.check_funds(&next, legs)?;
        }
        self.totals.extend(next);
        Ok(effects)
    }

    fn current(&self, next: &HashMap<i64, Totals>, id: i64) -> Totals {
        next.get(&id).copied().unwrap_or_else(|| self.totals(id))
    }

    /// Adds (`sign` 1) or takes off (−1) legs from the held totals.
    fn held(
        &self,
        next: &mut HashMap<i64, Totals>,
        legs: &[Leg],
        sign: i128,
    ) -> Result<(), LedgerError> {
        for leg in legs {
            let mut t = self.current(next, leg.account_id);
            let amount = sign * leg.amount.minor();
            match leg.direction {
                Direction::Debit => t.held_debits += amount,
                Direction::Credit => t.held_credits += amount,
            }
            assert!(
                t.held_debits >= 0 && t.held_credits >= 0,
                "a release of more than was held: {t:?}"
            );
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
            let mut t = self.current(next, leg.account_id);
            let amount = leg.amount.minor();
            assert!(amount > 0, "leg amount {amount} must be positive");
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
        let rule = &self.rules[&id];
        Err(LedgerError::new(
            Reason::LimitExceeded,
            format!(
                "account {} would exceed {} total debits or credits (limit MAX_TOTAL_MINOR)",
                rule.code,
                format_minor(MAX_TOTAL_MINOR, rule.scale)
            ),
        )
        .with("account", &rule.code)
        .with("limit", "MAX_TOTAL_MINOR"))
    }

    /// The funds rule after a whole posting, in leg order so the message names the first
    /// account in the request.
    fn check_funds(&self, next: &HashMap<i64, Totals>, legs: &[Leg]) -> Result<(), LedgerError> {
        for leg in legs {
            let rule = &self.rules[&leg.account_id];
            let after = self.available(leg.account_id, &next[&leg.account_id]);
            if !rule.allow_negative && after < 0 {
                let before = self.totals(leg.account_id);
                let before_available = self.available(leg.account_id, &before);
                let balance = before.balance(rule.normal_balance);
                return Err(insufficient(rule, balance, before_available, after));
            }
        }
        Ok(())
    }
}

/// The refusal of a posting that would take `rule`'s account's available balance below zero
/// (`balance` and `before_available` before it).
fn insufficient(rule: &Rule, balance: i128, before_available: i128, after: i128) -> LedgerError {
    let held = if before_available == balance {
        String::new()
    } else {
        format!(
            " ({} {} held by open holds)",
            format_minor(balance - before_available, rule.scale),
            rule.currency
        )
    };
    LedgerError::new(
        Reason::InsufficientFunds,
        format!(
            "account {} has an available balance of {} {}{held} over all its legs, whatever their effective time (a future-dated leg counts at once, though GetBalance without as_of leaves it out until it is effective), and does not allow negative balances; this posting would make it {} {}",
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

    fn rule(code: &str, normal: NormalBalance, allow_negative: bool) -> Rule {
        Rule {
            code: code.into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: normal,
            allow_negative,
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
        let totals = (0..n).map(|i| (i, Totals::default())).collect();
        let rules = (0..n)
            .map(|i| {
                (
                    i,
                    rule(
                        &format!("acct{i}"),
                        if i % 2 == 0 {
                            NormalBalance::Debit
                        } else {
                            NormalBalance::Credit
                        },
                        i == 0 && allow_negative_first,
                    ),
                )
            })
            .collect();
        Engine::new(totals, rules)
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
        let before = (e.totals(0), e.totals(2));
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
        assert_eq!((e.totals(0), e.totals(2)), before);
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
        assert_eq!(e.totals(2).balance(NormalBalance::Debit), 50);
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
                    let t = e.totals(id);
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
