//! The verifiable journal: each ledger's postings form a hash chain (every posting hash covers
//! the one before it) and an RFC 9162 Merkle tree, so an auditor holding one root can check
//! that a posting is in the journal and that a later journal extends an earlier one. Pure: the
//! writer computes the hashes and nodes it stores, readers rebuild roots and proofs from the
//! nodes storage returns. `docs/verifiable.md` describes every byte for an auditor.

pub mod hash;
pub mod merkle;

pub use hash::{
    encode, from_hex, posting_hash, to_hex, Hash, PostingAtRecording, DOMAIN_TAG, GENESIS,
};
pub use merkle::{
    consistency_nodes, consistency_proof, inclusion_nodes, inclusion_proof, leaf_hash, node_hash,
    root_from, root_nodes, verify_consistency, verify_inclusion, Frontier, NodeId, EMPTY_ROOT,
};

#[cfg(test)]
mod tests;

use crate::record::Posting;

/// A ledger's chain as the writer carries it through a batch: the ledger's code (hashed into
/// every posting), the last posting's hash and the tree's frontier (its size is the number of
/// postings hashed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub ledger: String,
    pub head: Hash,
    pub frontier: Frontier,
}

impl Chain {
    /// The chain of a ledger with no posting yet.
    pub fn genesis(ledger: &str) -> Chain {
        Chain {
            ledger: ledger.to_owned(),
            head: GENESIS,
            frontier: Frontier::new(),
        }
    }

    /// Appends the next posting of the ledger: its hash, and the tree nodes its leaf completes
    /// (level 0 first: what storage keeps with it). Its sequence must be the next one.
    pub fn append(&mut self, p: &Posting) -> (Hash, Vec<Hash>) {
        let at = PostingAtRecording::of(p);
        assert_eq!(
            at.sequence,
            self.frontier.size() + 1,
            "a posting joins its ledger's chain in sequence order"
        );
        let hash = posting_hash(&self.ledger, &self.head, &at);
        let nodes = self.frontier.append(&hash);
        self.head = hash;
        (hash, nodes)
    }

    /// The tree's root now (`EMPTY_ROOT` with no posting).
    pub fn root(&self) -> Hash {
        self.frontier.root().unwrap_or(EMPTY_ROOT)
    }
}
