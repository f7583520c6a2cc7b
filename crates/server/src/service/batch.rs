//! `PostBatch`: a call's postings, each validated exactly as `Post` validates it alone, their
//! accounts looked up together, and the valid ones submitted to the writer together (one job:
//! queued whole or refused whole, decided in one write batch in the call's order).

use super::Ledger;
use ledger_core::limits::MAX_BATCH_REQUESTS;
use ledger_core::posting::{PostRequest, ValidPost};
use ledger_core::write::{Command, Outcome};
use ledger_core::{LedgerError, Reason};
use std::collections::HashSet;

/// A call's number of requests: 1..=[`MAX_BATCH_REQUESTS`].
pub fn check_batch_len(n: usize) -> Result<(), LedgerError> {
    if n == 0 {
        return Err(LedgerError::new(
            Reason::InvalidField,
            format!("a PostBatch needs 1..={MAX_BATCH_REQUESTS} requests, got none"),
        )
        .with("field", "requests"));
    }
    if n > MAX_BATCH_REQUESTS {
        return Err(LedgerError::limit(
            "the number of requests in a PostBatch",
            "MAX_BATCH_REQUESTS",
            MAX_BATCH_REQUESTS,
            n,
        )
        .with("field", "requests"));
    }
    Ok(())
}

impl Ledger {
    /// Decides a call's postings: one outcome per request, in order, each what `Post` would
    /// have answered had the requests been sent one by one (a request refused before the
    /// writer, by conversion or validation, keeps its error and takes no part). `Err` is a
    /// call-level fault that fails the whole call: the number of requests, or storage
    /// (`UNAVAILABLE`: nothing of the call may be assumed, the call may be re-sent as it is).
    pub async fn post_batch(
        &self,
        book: &ledger_core::ledger::Ledger,
        caller: &str,
        requests: Vec<Result<PostRequest, LedgerError>>,
    ) -> Result<Vec<Outcome>, LedgerError> {
        check_batch_len(requests.len())?;
        let shaped: Vec<Result<PostRequest, LedgerError>> = requests
            .into_iter()
            .map(|r| r.and_then(|req| req.check_shape().map(|_| req)))
            .collect();
        let accounts = self.accounts(book, &codes_of(&shaped)).await?;
        let valid: Vec<Result<ValidPost, LedgerError>> = shaped
            .into_iter()
            .map(|r| r.and_then(|req| req.validate(&accounts)))
            .collect();
        let (commands, mut outcomes) = split(valid);
        let decided = self.writer.submit_all(book.id, caller, commands).await?;
        fill(&mut outcomes, decided);
        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("every request answered"))
            .collect())
    }
}

/// The distinct account codes of the requests that passed the shape checks.
fn codes_of(shaped: &[Result<PostRequest, LedgerError>]) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    shaped
        .iter()
        .flatten()
        .flat_map(|req| req.legs.iter())
        .filter(|leg| seen.insert(&leg.account))
        .map(|leg| leg.account.clone())
        .collect()
}

/// The writer's commands (the valid requests, in order) and the answers so far: the refused
/// requests' errors in their places, the others to be filled by [`fill`].
fn split(valid: Vec<Result<ValidPost, LedgerError>>) -> (Vec<Command>, Vec<Option<Outcome>>) {
    let mut commands = Vec::with_capacity(valid.len());
    let outcomes = valid
        .into_iter()
        .map(|r| match r {
            Ok(post) => {
                commands.push(Command::Post(post));
                None
            }
            Err(e) => Some(Err(e)),
        })
        .collect();
    (commands, outcomes)
}

/// Puts the writer's outcomes, in order, into the places left open.
fn fill(outcomes: &mut [Option<Outcome>], decided: Vec<Outcome>) {
    let open = outcomes.iter().filter(|o| o.is_none()).count();
    assert_eq!(open, decided.len(), "one decision per submitted request");
    let mut decided = decided.into_iter();
    for slot in outcomes.iter_mut().filter(|o| o.is_none()) {
        *slot = decided.next();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger_core::posting::LegRequest;
    use ledger_core::Direction;

    fn req(key: &str, accounts: &[&str]) -> PostRequest {
        PostRequest {
            idempotency_key: key.into(),
            legs: accounts
                .iter()
                .map(|a| LegRequest {
                    account: (*a).into(),
                    direction: Some(Direction::Debit),
                    amount: "1".into(),
                })
                .collect(),
            effective_at: None,
            memo: String::new(),
            metadata: Default::default(),
            hold: false,
            hold_expires_at: None,
            conditions: Vec::new(),
        }
    }

    #[test]
    fn a_batch_holds_one_to_max_batch_requests_and_says_which_limit_it_passed() {
        assert_eq!(check_batch_len(0).unwrap_err().reason, Reason::InvalidField);
        check_batch_len(1).unwrap();
        check_batch_len(MAX_BATCH_REQUESTS).unwrap();
        let e = check_batch_len(MAX_BATCH_REQUESTS + 1).unwrap_err();
        assert_eq!(e.reason, Reason::LimitExceeded);
        assert!(e.message.contains("MAX_BATCH_REQUESTS"), "{}", e.message);
        assert!(e.message.contains("1001"), "{}", e.message);
    }

    #[test]
    fn accounts_are_looked_up_once_each_and_only_for_requests_that_passed_their_shape() {
        let refused = Err(LedgerError::new(Reason::InvalidField, "bad"));
        let shaped = vec![
            Ok(req("a", &["x", "y"])),
            refused,
            Ok(req("b", &["y", "z", "x"])),
        ];
        assert_eq!(codes_of(&shaped), ["x", "y", "z"]);
    }

    #[test]
    fn decisions_fill_the_places_of_the_submitted_requests_in_order() {
        let e = |m: &str| LedgerError::new(Reason::InvalidField, m);
        let mut outcomes = vec![None, Some(Err(e("first refused"))), None, None];
        fill(
            &mut outcomes,
            vec![Err(e("d0")), Err(e("d1")), Err(e("d2"))],
        );
        let messages: Vec<String> = outcomes
            .into_iter()
            .map(|o| o.unwrap().unwrap_err().message)
            .collect();
        assert_eq!(messages, ["d0", "first refused", "d1", "d2"]);
    }
}
