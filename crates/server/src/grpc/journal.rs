//! The verifiable journal's and period closes' calls: `GetDigest`, `GetInclusionProof`,
//! `GetConsistencyProof`, `ClosePeriod`, `ListPeriodCloses` (the trait's methods in
//! `handlers` call these).

use super::convert::time_to_pb;
use super::handlers::{grants, reply, LedgerGrpc, Reply};
use super::pb;
use crate::storage::journal::Digest;
use ledger_core::journal::to_hex;
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

pub(super) async fn close_period(
    _g: &LedgerGrpc,
    _req: Request<pb::ClosePeriodRequest>,
) -> Reply<pb::ClosePeriodResponse> {
    Err(tonic::Status::unimplemented("ClosePeriod: in progress"))
}

pub(super) async fn list_period_closes(
    _g: &LedgerGrpc,
    _req: Request<pb::ListPeriodClosesRequest>,
) -> Reply<pb::ListPeriodClosesResponse> {
    Err(tonic::Status::unimplemented(
        "ListPeriodCloses: in progress",
    ))
}
