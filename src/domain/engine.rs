//! The pure decision core of the writer: applies postings, in order, to balances held in
//! memory for a batch, and refuses any posting that would take a no-negative account below
//! zero or an account's totals past [`MAX_TOTAL_MINOR`]. A refused posting changes nothing.

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
    /// Number of legs so far (the version of the last leg).
    pub version: i64,
}

impl Totals {
    /// The signed balance for an account of `normal` side.
    pub fn balance(&self, normal: NormalBalance) -> i128 {
        balance_of(normal, self.debits, self.credits)
    }
}

/// debits − credits for debit-normal accounts, credits − debits for credit-normal ones.
pub fn balance_of(normal: NormalBalance, debits: i128, credits: i128) -> i128 {
    match normal {
        NormalBalance::Debit => debits - credits,
        NormalBalance::Credit => credits - debits,
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

/// Balances of the accounts a batch touches, and the rules they obey.
pub struct Engine {
    totals: HashMap<i64, Totals>,
    rules: HashMap<i64, Rule>,
}

impl Engine {
    /// An engine over the given totals (every account the batch touches must be present).
    pub fn new(totals: HashMap<i64, Totals>, rules: HashMap<i64, Rule>) -> Engine {
        for (id, t) in &totals {
            let rule = rules
                .get(id)
                .unwrap_or_else(|| panic!("no rule for account {id}"));
            assert!(
                t.debits >= 0 && t.credits >= 0 && t.version >= 0,
                "account {} totals negative: {t:?}",
                rule.code
            );
            assert!(
                rule.allow_negative || t.balance(rule.normal_balance) >= 0,
                "account {} is below zero though it does not allow it: {t:?}",
                rule.code
            );
        }
        Engine { totals, rules }
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

    /// Applies a posting whole, or refuses it whole and changes nothing.
    pub fn apply(&mut self, legs: &[Leg]) -> Result<Vec<LegEffect>, LedgerError> {
        let mut next: HashMap<i64, Totals> = HashMap::with_capacity(legs.len());
        let mut effects = Vec::with_capacity(legs.len());
        for leg in legs {
            let cur = next
                .get(&leg.account_id)
                .copied()
                .unwrap_or_else(|| self.totals(leg.account_id));
            let mut t = cur;
            let amount = leg.amount.minor();
            assert!(amount > 0, "leg amount {amount} must be positive");
            match leg.direction {
                Direction::Debit => t.debits += amount,
                Direction::Credit => t.credits += amount,
            }
            t.version += 1;
            let rule = &self.rules[&leg.account_id];
            if t.debits > MAX_TOTAL_MINOR || t.credits > MAX_TOTAL_MINOR {
                return Err(LedgerError::new(
                    Reason::LimitExceeded,
                    format!(
                        "account {} would exceed {} total debits or credits (limit MAX_TOTAL_MINOR)",
                        rule.code,
                        format_minor(MAX_TOTAL_MINOR, rule.scale)
                    ),
                )
                .with("account", &rule.code)
                .with("limit", "MAX_TOTAL_MINOR"));
            }
            next.insert(leg.account_id, t);
            effects.push(LegEffect {
                account_id: leg.account_id,
                after: t,
            });
        }
        // Check in leg order so the message names the first account in the request.
        for leg in legs {
            let rule = &self.rules[&leg.account_id];
            let t = next[&leg.account_id];
            let after = t.balance(rule.normal_balance);
            if !rule.allow_negative && after < 0 {
                let before = self.totals(leg.account_id).balance(rule.normal_balance);
                return Err(LedgerError::new(
                    Reason::InsufficientFunds,
                    format!(
                        "account {} has a balance of {} {} over all its legs, whatever their effective time (a future-dated leg counts at once, though GetBalance without as_of leaves it out until it is effective), and does not allow negative balances; this posting would make it {} {}",
                        rule.code,
                        format_minor(before, rule.scale),
                        rule.currency,
                        format_minor(after, rule.scale),
                        rule.currency
                    ),
                )
                .with("account", &rule.code));
            }
        }
        self.totals.extend(next);
        Ok(effects)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::amount::Amount;
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
