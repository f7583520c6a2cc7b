//! A batch's rounds: `decide` runs on the batch's live requests (admitted, and not refused
//! unbound by an earlier round); a plan that refuses some unbound is not written (its
//! transaction claimed their keys: the caller rolls it back) and the batch runs again without
//! them. Each round is written or refuses at least one request, so a batch of n requests takes
//! at most n + 1 rounds. The writer, the reference model's test and `bench-writer` drive the
//! rounds the same way: [`Rounds::batch`] → load → `decide` → [`Rounds::decided`] → write (or
//! roll back and again) → [`Rounds::outcomes`].

use super::command::{Outcome, WriteRequest};
use super::plan::Plan;
use crate::error::LedgerError;
use std::borrow::Cow;
use std::collections::HashMap;

/// The rounds of one batch.
pub struct Rounds {
    /// The batch's size.
    n: usize,
    /// The admitted requests, in batch order, and each one's index in the batch.
    admitted: Vec<WriteRequest>,
    at: Vec<usize>,
    /// Requests refused so far (by admission or by a round), by index in the batch.
    refused: HashMap<usize, LedgerError>,
    /// The indexes into `admitted` of the next round's requests.
    live: Vec<usize>,
    /// The requests rounds refused unbound, by index in the batch.
    unbound: Vec<usize>,
}

impl Rounds {
    /// The rounds of a batch whose requests were admitted or refused before it.
    pub fn new(batch: Vec<Result<WriteRequest, LedgerError>>) -> Rounds {
        let n = batch.len();
        let mut admitted = Vec::with_capacity(n);
        let mut at = Vec::with_capacity(n);
        let mut refused = HashMap::new();
        for (i, r) in batch.into_iter().enumerate() {
            match r {
                Ok(r) => {
                    admitted.push(r);
                    at.push(i);
                }
                Err(e) => {
                    refused.insert(i, e);
                }
            }
        }
        let live = (0..admitted.len()).collect();
        Rounds {
            n,
            admitted,
            at,
            refused,
            live,
            unbound: Vec::new(),
        }
    }

    /// The requests the next round decides, in batch order; `None` when none is left.
    pub fn batch(&self) -> Option<Cow<'_, [WriteRequest]>> {
        if self.live.is_empty() {
            return None;
        }
        if self.live.len() == self.admitted.len() {
            return Some(Cow::Borrowed(&self.admitted));
        }
        Some(Cow::Owned(
            self.live
                .iter()
                .map(|&j| self.admitted[j].clone())
                .collect(),
        ))
    }

    /// Takes the plan `decide` made of the round's batch (what [`Rounds::batch`] gave): the
    /// plan to write when it refuses nothing unbound; `None` when the round must be rolled
    /// back and the batch run again without the requests it refused.
    pub fn decided(&mut self, plan: Plan) -> Option<Plan> {
        if plan.unbound.is_empty() {
            assert_eq!(
                plan.outcomes.len(),
                self.live.len(),
                "a plan of the round's batch"
            );
            return Some(plan);
        }
        let mut out: Vec<usize> = Vec::with_capacity(plan.unbound.len());
        for (k, e) in plan.unbound {
            let j = self.live[k];
            self.refused.insert(self.at[j], e);
            self.unbound.push(self.at[j]);
            out.push(j);
        }
        self.live.retain(|j| !out.contains(j));
        None
    }

    /// The requests the rounds refused unbound so far (not those refused before the batch),
    /// by index in the batch, in the order refused.
    pub fn unbound(&self) -> &[usize] {
        &self.unbound
    }

    /// Every request's outcome, in batch order: a live request's from the written plan's
    /// `outcomes` (one per request of the last round, in its order; empty when no round was
    /// written, as none was live), a refused one's refusal.
    pub fn outcomes(mut self, outcomes: Vec<Outcome>) -> Vec<Outcome> {
        assert_eq!(
            outcomes.len(),
            self.live.len(),
            "one outcome per live request"
        );
        let mut by_index: HashMap<usize, Outcome> = self
            .live
            .iter()
            .map(|&j| self.at[j])
            .zip(outcomes)
            .collect();
        (0..self.n)
            .map(|i| match self.refused.remove(&i) {
                Some(e) => Err(e),
                None => by_index.remove(&i).expect("an outcome for every request"),
            })
            .collect()
    }
}
