//! The verifiable journal's answers: a ledger's digest, and the RFC 9162 proofs an auditor
//! checks against a digest held elsewhere (`ledger verify-proof`, docs/verifiable.md). Each is
//! made of O(log n) stored nodes read in one query.

use super::Ledger;
pub use crate::storage::journal::Digest;
use crate::storage::{self, StorageError};
use ledger_core::journal::{self, Hash};
use ledger_core::ledger::{self, Ledger as Book};
use ledger_core::posting::parse_posting_id;
use ledger_core::{LedgerError, Reason};

/// An inclusion proof: the posting's leaf, the digest it is proved in, the audit path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inclusion {
    pub leaf_index: u64,
    pub posting_hash: Hash,
    pub digest: Digest,
    pub proof: Vec<Hash>,
}

/// A consistency proof between two digests of a ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consistency {
    pub from: Digest,
    pub to: Digest,
    pub proof: Vec<Hash>,
}

/// No digest of that size: the tree is smaller.
fn beyond(book: &Book, size: u64, current: u64) -> LedgerError {
    LedgerError::new(
        Reason::DigestNotFound,
        format!(
            "ledger {:?} has hashed {current} postings: there is no digest of size {size}",
            book.code
        ),
    )
    .with("sequence", size)
}

impl Ledger {
    /// The ledger's digest now, or of the tree of `size` postings.
    pub async fn digest(&self, book: &Book, size: Option<u64>) -> Result<Digest, LedgerError> {
        let client = self.client_of(book).await?;
        match storage::journal::digest(&client, book.id, size).await {
            Ok(Some(d)) => Ok(d),
            Ok(None) => {
                let current = storage::journal::head(&client, book.id).await;
                let current = current.map_err(StorageError::into_ledger_error)?.size();
                Err(beyond(book, size.unwrap_or(0), current))
            }
            Err(e) => Err(e.into_ledger_error()),
        }
    }

    /// The audit path of a posting in the tree of the digest of size `size` (0: the current).
    pub async fn inclusion_proof(
        &self,
        book: &Book,
        posting_id: &str,
        size: u64,
    ) -> Result<Inclusion, LedgerError> {
        let id = parse_posting_id(posting_id)?;
        let p = self.posting(book, id).await?;
        let digest = self.digest(book, (size > 0).then_some(size)).await?;
        let n = ledger::in_ledger(p.sequence as i64) as u64;
        let hash = p.hash.filter(|_| n <= digest.size).ok_or_else(|| {
            LedgerError::new(
                Reason::DigestNotFound,
                format!(
                    "posting {id} (sequence {n}) is not in the digest of size {}: ask for one at least as large",
                    digest.size
                ),
            )
            .with("posting_id", id.to_string())
        })?;
        let client = self.client_of(book).await?;
        let stored = storage::journal::nodes(
            &client,
            book.id,
            &journal::inclusion_nodes(n - 1, digest.size),
        )
        .await
        .map_err(StorageError::into_ledger_error)?;
        let proof = journal::inclusion_proof(n - 1, digest.size, &|id| stored.get(&id).copied())
            .map_err(|e| {
                storage::journal::corrupt_tree(book.id, digest.size, e).into_ledger_error()
            })?;
        Ok(Inclusion {
            leaf_index: n - 1,
            posting_hash: hash,
            digest,
            proof,
        })
    }

    /// The consistency proof from the tree of `from` postings to that of `to` (0: the current).
    pub async fn consistency_proof(
        &self,
        book: &Book,
        from: u64,
        to: u64,
    ) -> Result<Consistency, LedgerError> {
        let to = self.digest(book, (to > 0).then_some(to)).await?;
        if from == 0 || from > to.size {
            return Err(LedgerError::new(
                Reason::InvalidField,
                format!(
                    "from_sequence must be 1..={} (the later size), got {from}",
                    to.size
                ),
            )
            .with("field", "from_sequence"));
        }
        let from = self.digest(book, Some(from)).await?;
        let client = self.client_of(book).await?;
        let ids = journal::consistency_nodes(from.size, to.size);
        let stored = storage::journal::nodes(&client, book.id, &ids)
            .await
            .map_err(StorageError::into_ledger_error)?;
        let proof = journal::consistency_proof(from.size, to.size, &|id| stored.get(&id).copied())
            .map_err(|e| storage::journal::corrupt_tree(book.id, to.size, e).into_ledger_error())?;
        Ok(Consistency { from, to, proof })
    }
}
