//! Requests as the writer takes them, for tests that drive a batch directly (no gRPC).

use ledger_core::posting::{LegRequest, PostRequest, VoidRequest};
use ledger_core::write::{Command, WriteRequest};
use ledger_core::{Direction, Metadata};
use std::collections::HashMap;

/// A validated two-leg transfer (debit `to`, credit `from`) for driving the batch directly.
pub async fn valid_transfer(
    db: &deadpool_postgres::Client,
    key: &str,
    from: &str,
    to: &str,
    amount: &str,
) -> WriteRequest {
    let req = PostRequest {
        idempotency_key: key.into(),
        legs: vec![
            LegRequest {
                account: to.into(),
                direction: Some(Direction::Debit),
                amount: amount.into(),
            },
            LegRequest {
                account: from.into(),
                direction: Some(Direction::Credit),
                amount: amount.into(),
            },
        ],
        effective_at: None,
        memo: String::new(),
        metadata: Metadata::new(),
        hold: false,
        hold_expires_at: None,
        conditions: Vec::new(),
    };
    let codes = vec![from.to_owned(), to.to_owned()];
    let accounts: HashMap<_, _> = ledger_server::storage::accounts::get_many(db, 0, &codes)
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.code.clone(), a))
        .collect();
    WriteRequest {
        caller: ledger_server::grpc::ANONYMOUS.into(),
        command: Command::Post(req.validate(&accounts).expect("valid transfer")),
    }
}

/// A void of posting `target` under key `key`, for driving the batch directly.
pub fn void_of(target: &uuid::Uuid, key: &str) -> WriteRequest {
    let req = VoidRequest {
        idempotency_key: key.into(),
        posting_id: target.to_string(),
        reason: "test".into(),
        effective_at: None,
    };
    WriteRequest {
        caller: ledger_server::grpc::ANONYMOUS.into(),
        command: Command::Void(req.validate().expect("valid void")),
    }
}
