//! What the batch writes of the verifiable journal: each posting's hash and the tree nodes its
//! leaf completes (`posting_hashes`, migration 0016), the digest on the batch's last posting,
//! and the ledger's chain after it (`ledger_state`).

use ledger_core::journal::Chain;
use ledger_core::write::Plan;

/// The batch's rows of `posting_hashes`: the root (a digest) only on its last posting.
pub(super) const HASHES_SQL: &str = "INSERT INTO posting_hashes (sequence, hash, nodes, root)
     SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::bytea[])";

/// The plan's hashed postings as columns, and the chain after them.
#[derive(Default)]
pub(super) struct Hashes {
    pub sequence: Vec<i64>,
    pub hash: Vec<Vec<u8>>,
    pub nodes: Vec<Vec<u8>>,
    pub root: Vec<Option<Vec<u8>>>,
    /// The chain's size, head and frontier after the batch (`None`: not hashed, the state's
    /// columns stay as they are).
    pub size: Option<i64>,
    pub head: Option<Vec<u8>>,
    pub frontier: Option<Vec<u8>>,
}

/// A statement parameter.
type P = dyn tokio_postgres::types::ToSql + Sync;

impl Hashes {
    /// [`HASHES_SQL`]'s parameters.
    pub fn params(&self) -> [&P; 4] {
        [&self.sequence, &self.hash, &self.nodes, &self.root]
    }

    pub fn of(plan: &Plan) -> Hashes {
        let mut h = Hashes::default();
        let Some(chain) = &plan.chain else {
            return h;
        };
        for p in &plan.postings {
            let hash = p.posting.hash.expect("a hashed plan hashes every posting");
            h.sequence.push(p.posting.sequence as i64);
            h.hash.push(hash.to_vec());
            h.nodes.push(p.nodes.concat());
            h.root.push(None);
        }
        if let Some(last) = h.root.last_mut() {
            *last = Some(chain.root().to_vec());
        }
        let Chain { head, frontier, .. } = chain;
        h.size = Some(frontier.size() as i64);
        h.head = Some(head.to_vec());
        h.frontier = Some(frontier.to_bytes());
        h
    }
}
