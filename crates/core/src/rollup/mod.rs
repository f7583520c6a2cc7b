//! Rollups of the account-code tree: which nodes a request covers, and the totals of the
//! accounts beneath each, summed from what storage reads at one cut-off (per deepest node,
//! currency, scale and normal side: nothing is stored that could drift).
//!
//! A node is a code prefix of whole segments (split at `:`; the empty node is the root, over
//! every account). A request names a prefix node and a depth: the nodes are the prefix's own
//! and those with at most `depth` more segments. Storage groups the accounts by their code cut
//! to `levels()` segments; [`roll_up`] adds each group into that node and every ancestor down
//! to the prefix's.

use crate::account::{validate_code, NormalBalance};
use crate::error::{LedgerError, Reason};
use crate::limits::{add_to_sum, MAX_ROLLUP_DEPTH, MAX_TRIAL_BALANCE_CURRENCIES};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// A validated rollup request: a prefix of whole segments and a depth below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollupRequest {
    prefix: String,
    depth: u32,
}

impl RollupRequest {
    /// The prefix must be empty or an account code (whole segments: no empty segment, no
    /// trailing `:`); the depth at most [`MAX_ROLLUP_DEPTH`].
    pub fn new(prefix: &str, depth: u32) -> Result<RollupRequest, LedgerError> {
        if !prefix.is_empty() {
            validate_code(prefix).map_err(|e| e.with("field", "prefix"))?;
            if prefix.split(':').any(str::is_empty) {
                return Err(LedgerError::new(
                    Reason::InvalidField,
                    format!("prefix {prefix:?} must be whole segments of account codes: no empty segment and no leading or trailing ':' (\"assets\" covers assets and assets:*)"),
                )
                .with("field", "prefix"));
            }
        }
        if depth > MAX_ROLLUP_DEPTH {
            return Err(LedgerError::limit(
                "depth",
                "MAX_ROLLUP_DEPTH",
                MAX_ROLLUP_DEPTH,
                format!("{depth} segments below the prefix"),
            )
            .with("field", "depth"));
        }
        Ok(RollupRequest {
            prefix: prefix.to_owned(),
            depth,
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Segments of the prefix (0 for the root).
    pub fn prefix_levels(&self) -> u32 {
        segments(&self.prefix)
    }

    /// Segments of the deepest nodes: the prefix's and the depth.
    pub fn levels(&self) -> u32 {
        self.prefix_levels() + self.depth
    }

    /// Whether an account code lies beneath the prefix (whole segments).
    pub fn covers(&self, code: &str) -> bool {
        self.prefix.is_empty()
            || code == self.prefix
            || (code.starts_with(&self.prefix) && code.as_bytes()[self.prefix.len()] == b':')
    }
}

/// Segments of a node (0 for the root).
pub fn segments(node: &str) -> u32 {
    match node {
        "" => 0,
        n => n.split(':').count() as u32,
    }
}

/// A node cut to its first `levels` segments (itself when it has no more).
pub fn cut(node: &str, levels: u32) -> &str {
    if levels == 0 {
        return "";
    }
    match node.match_indices(':').nth(levels as usize - 1) {
        Some((i, _)) => &node[..i],
        None => node,
    }
}

/// Tree order: by segments, a node before its children, siblings by code (`assets`,
/// `assets:bank`, `assets-2`; plain string order would put `assets-2` between them).
pub fn tree_order(a: &str, b: &str) -> Ordering {
    let (a, b) = (
        a.split(':').filter(|s| !s.is_empty()),
        b.split(':').filter(|s| !s.is_empty()),
    );
    a.cmp(b)
}

/// What storage sums for one group of accounts at a cut-off: those whose code cut to the
/// request's levels is `node`, of one currency, scale and normal side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub node: String,
    pub currency: String,
    pub scale: u8,
    pub normal: NormalBalance,
    pub accounts: u64,
    pub debits: i128,
    pub credits: i128,
    pub held_debits: i128,
    pub held_credits: i128,
}

/// Totals of one currency (and scale) over the accounts beneath a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RollupTotal {
    pub currency: String,
    pub scale: u8,
    pub debits: i128,
    pub credits: i128,
    /// The accounts' balances, each in its own normal direction.
    pub balance: i128,
    pub held_debits: i128,
    pub held_credits: i128,
    /// The accounts' available balances.
    pub available: i128,
}

/// One node and its totals, in (currency, scale) order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollup {
    pub node: String,
    pub account_count: u64,
    pub totals: Vec<RollupTotal>,
}

/// A node's account count and its totals by (currency, scale), while they are summed.
type Node<'a> = (u64, BTreeMap<(&'a str, u8), RollupTotal>);

/// Every node of the request with an account beneath it, in tree order. Sums past
/// `MAX_SUM_MINOR`, or more than [`MAX_TRIAL_BALANCE_CURRENCIES`] currencies, are refused.
pub fn roll_up(req: &RollupRequest, groups: &[Group]) -> Result<Vec<Rollup>, LedgerError> {
    let mut nodes: BTreeMap<&str, Node> = BTreeMap::new();
    let mut currencies = std::collections::BTreeSet::new();
    for g in groups {
        assert!(
            req.covers(&g.node) && segments(&g.node) <= req.levels(),
            "storage grouped an account outside the rollup: {:?}",
            g.node
        );
        currencies.insert(g.currency.as_str());
        for level in req.prefix_levels()..=segments(&g.node) {
            let (count, totals) = nodes.entry(cut(&g.node, level)).or_default();
            *count += g.accounts;
            let t = totals
                .entry((g.currency.as_str(), g.scale))
                .or_insert_with(|| RollupTotal {
                    currency: g.currency.clone(),
                    scale: g.scale,
                    ..RollupTotal::default()
                });
            add_group(t, g)?;
        }
    }
    if currencies.len() > MAX_TRIAL_BALANCE_CURRENCIES {
        return Err(LedgerError::limit(
            "currencies in the rollup",
            "MAX_TRIAL_BALANCE_CURRENCIES",
            MAX_TRIAL_BALANCE_CURRENCIES,
            format!("{} (narrow the prefix)", currencies.len()),
        ));
    }
    let mut out: Vec<Rollup> = nodes
        .into_iter()
        .map(|(node, (account_count, totals))| Rollup {
            node: node.to_owned(),
            account_count,
            totals: totals.into_values().collect(),
        })
        .collect();
    out.sort_by(|a, b| tree_order(&a.node, &b.node));
    Ok(out)
}

/// Adds a group's sums to a node's totals of its currency.
fn add_group(t: &mut RollupTotal, g: &Group) -> Result<(), LedgerError> {
    let what = |side: &str| format!("the rollup's {side} of {}", g.currency);
    // `engine::balance_of` and `available_of`, checked: a group's sums reach `MAX_SUM_MINOR`.
    let (balance, lowering) = match g.normal {
        NormalBalance::Debit => (g.debits.checked_sub(g.credits), g.held_credits),
        NormalBalance::Credit => (g.credits.checked_sub(g.debits), g.held_debits),
    };
    let available = balance.and_then(|b| b.checked_sub(lowering));
    let (Some(balance), Some(available)) = (balance, available) else {
        return Err(LedgerError::limit(
            &what("balance"),
            "MAX_SUM_MINOR",
            i128::MAX,
            "beyond it",
        ));
    };
    add_to_sum(&mut t.debits, g.debits, &what("debits"))?;
    add_to_sum(&mut t.credits, g.credits, &what("credits"))?;
    add_to_sum(&mut t.held_debits, g.held_debits, &what("held debits"))?;
    add_to_sum(&mut t.held_credits, g.held_credits, &what("held credits"))?;
    add_to_sum(&mut t.balance, balance, &what("balance"))?;
    add_to_sum(&mut t.available, available, &what("available amount"))
}

/// The nodes after `last` in tree order (all of them when `None`): where a page goes on.
pub fn after<'a>(nodes: &'a [Rollup], last: Option<&str>) -> &'a [Rollup] {
    match last {
        None => nodes,
        Some(last) => {
            let i = nodes.partition_point(|r| tree_order(&r.node, last) != Ordering::Greater);
            &nodes[i..]
        }
    }
}

#[cfg(test)]
mod tests;
