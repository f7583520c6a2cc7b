//! The verifiable journal's and period closes' calls: `GetDigest`, `GetInclusionProof`,
//! `GetConsistencyProof`, `ClosePeriod`, `ListPeriodCloses` (the trait's methods in
//! `handlers` call these).

use super::convert::{opt_time, time_to_pb, total_to_pb};
use super::handlers::{caller, grants, reply, LedgerGrpc, Reply};
use super::pb;
use crate::service::journal::Digest;
use crate::service::{self, closes::TrialBalance};
use ledger_core::journal::to_hex;
use ledger_core::ledger;
use ledger_core::period::{PeriodClose, ValidClose};
use ledger_core::{LedgerError, Reason};
use time::OffsetDateTime;
use tonic::Request;

/// A digest as the contract shows it.
pub fn digest_to_pb(d: &Digest, ledger: &str) -> pb::Digest {
    pb::Digest {
        ledger: ledger.to_owned(),
        sequence: d.size,
        root: to_hex(&d.root),
        recorded_at: d.recorded_at.map(time_to_pb),
    }
}

pub(super) async fn get_digest(
    g: &LedgerGrpc,
    req: Request<pb::GetDigestRequest>,
) -> Reply<pb::Digest> {
    let grants = grants(&req);
    let r = req.into_inner();
    let result = async {
        let book = g.book(&grants, &r.ledger).await?;
        let d = g.ledger.digest(&book, None).await?;
        Ok(digest_to_pb(&d, &book.code))
    };
    reply(result.await)
}

pub(super) async fn get_inclusion_proof(
    g: &LedgerGrpc,
    req: Request<pb::GetInclusionProofRequest>,
) -> Reply<pb::InclusionProof> {
    let grants = grants(&req);
    let r = req.into_inner();
    let result = async {
        let book = g.book(&grants, &r.ledger).await?;
        let p = g
            .ledger
            .inclusion_proof(&book, &r.posting_id, r.digest_sequence)
            .await?;
        Ok(pb::InclusionProof {
            leaf_index: p.leaf_index,
            tree_size: p.digest.size,
            root: to_hex(&p.digest.root),
            proof: p.proof.iter().map(to_hex).collect(),
            posting_hash: to_hex(&p.posting_hash),
        })
    };
    reply(result.await)
}

pub(super) async fn get_consistency_proof(
    g: &LedgerGrpc,
    req: Request<pb::GetConsistencyProofRequest>,
) -> Reply<pb::ConsistencyProof> {
    let grants = grants(&req);
    let r = req.into_inner();
    let result = async {
        let book = g.book(&grants, &r.ledger).await?;
        let c = g
            .ledger
            .consistency_proof(&book, r.from_sequence, r.to_sequence)
            .await?;
        Ok(pb::ConsistencyProof {
            from_sequence: c.from.size,
            to_sequence: c.to.size,
            from_root: to_hex(&c.from.root),
            to_root: to_hex(&c.to.root),
            proof: c.proof.iter().map(to_hex).collect(),
        })
    };
    reply(result.await)
}

/// A close as the contract shows it, with its trial balance's summary.
fn close_to_pb(c: &PeriodClose, tb: &TrialBalance, book: &str) -> pb::PeriodClose {
    pb::PeriodClose {
        ledger: book.to_owned(),
        effective_before: Some(time_to_pb(c.effective_before)),
        after_sequence: ledger::in_ledger(c.after_sequence) as u64,
        recorded_at: Some(time_to_pb(c.recorded_at)),
        idempotency_key: c.idempotency_key.clone(),
        memo: c.memo.clone(),
        caller: c.caller.clone(),
        digest: Some(pb::Digest {
            ledger: book.to_owned(),
            sequence: tb.digest.0,
            root: to_hex(&tb.digest.1),
            recorded_at: None,
        }),
        totals: tb.totals.iter().map(total_to_pb).collect(),
        accounts: tb.accounts,
    }
}

pub(super) async fn close_period(
    g: &LedgerGrpc,
    req: Request<pb::ClosePeriodRequest>,
) -> Reply<pb::ClosePeriodResponse> {
    let (caller, grants) = (caller(&req), grants(&req));
    let r = req.into_inner();
    let result = async {
        let book = g.book(&grants, &r.ledger).await?;
        let before = opt_time("effective_before", r.effective_before.as_ref())?;
        let close = ValidClose::validate(before, &r.idempotency_key, &r.memo)?;
        let (c, tb, replayed) = g.ledger.close_period(&book, &caller, close).await?;
        Ok(pb::ClosePeriodResponse {
            close: Some(close_to_pb(&c, &tb, &book.code)),
            replayed,
        })
    };
    reply(result.await)
}

/// The close a `ListPeriodCloses` token says its page follows (none: the first page): its
/// `effective_before` in microseconds since the epoch.
fn closes_after(token: &str) -> Result<Option<OffsetDateTime>, LedgerError> {
    if token.is_empty() {
        return Ok(None);
    }
    let at = token
        .parse::<i128>()
        .ok()
        .and_then(|us| OffsetDateTime::from_unix_timestamp_nanos(us * 1000).ok());
    at.map(Some).ok_or_else(|| {
        LedgerError::new(
            Reason::InvalidPageToken,
            "page_token is not a token ListPeriodCloses gave: send next_page_token unchanged",
        )
        .with("field", "page_token")
    })
}

pub(super) async fn list_period_closes(
    g: &LedgerGrpc,
    req: Request<pb::ListPeriodClosesRequest>,
) -> Reply<pb::ListPeriodClosesResponse> {
    let grants = grants(&req);
    let r = req.into_inner();
    let result = async {
        let book = g.book(&grants, &r.ledger).await?;
        let size = service::page_size(r.page_size)?;
        let after = closes_after(&r.page_token)?;
        let closes = g.ledger.period_closes(&book, after, size + 1).await?;
        let more = closes.len() as i64 > size;
        let page = &closes[..closes.len().min(size as usize)];
        let next = match page.last() {
            Some((c, _)) if more => (c.effective_before.unix_timestamp_nanos() / 1000).to_string(),
            _ => String::new(),
        };
        Ok(pb::ListPeriodClosesResponse {
            closes: page
                .iter()
                .map(|(c, tb)| close_to_pb(c, tb, &book.code))
                .collect(),
            next_page_token: next,
        })
    };
    reply(result.await)
}
