//! `ledger verify`: every ledger's posting hashes, tree nodes, digests and chain recomputed
//! from the journal alone and compared with what is stored (docs/verifiable.md). The journal
//! is read in pages of [`VERIFY_PAGE`] sequences in one REPEATABLE READ, READ ONLY
//! transaction per ledger, so memory stays bounded and a running writer does not disturb the
//! comparison. The comparisons are the pure [`Walk`]; the rest reads.

use super::{read, Conn, StorageError};
use deadpool_postgres::GenericClient;
use ledger_core::journal::{self, to_hex, Frontier, Hash, PostingAtRecording, GENESIS};
use ledger_core::ledger::{self, LedgerId};
use ledger_core::record::Posting;
use std::collections::HashMap;
use std::fmt;

/// Sequences read per page (limit VERIFY_PAGE): a page's postings and hash rows are what
/// `ledger verify` holds at once.
pub const VERIFY_PAGE: u64 = 1_000;

/// A digest the verifier holds from elsewhere: the root of the tree of `size` postings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldDigest {
    pub size: u64,
    pub root: Hash,
}

impl fmt::Display for HeldDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.size, to_hex(&self.root))
    }
}

/// What a held digest came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DigestOutcome {
    /// The journal's tree of that size has that root.
    Confirmed,
    /// The journal's tree of that size has another root.
    Differs { recomputed: Hash },
    /// The ledger's tree is smaller than the digest (its chain's size).
    Beyond { tree_size: u64 },
    /// The journal could not be read up to the digest's size: it breaks at this sequence.
    Unreached { broken_at: u64 },
}

/// Why a posting (or the chain after the last one) does not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Broken {
    /// The stored hash is not the one recomputed from the journal.
    Hash { stored: Vec<u8>, recomputed: Hash },
    /// Within the chain's size, but `posting_hashes` has no row for it.
    NoHash,
    /// The journal has no posting of this sequence: a gap (a deleted posting).
    Gap,
    /// The posting's rows cannot be read (the read's error).
    Corrupt(String),
    /// The stored tree nodes of its leaf are not the recomputed ones.
    Nodes {
        stored: Vec<u8>,
        recomputed: Vec<u8>,
    },
    /// The stored digest root on it is not the recomputed root of the tree of its size.
    Root { stored: Vec<u8>, recomputed: Hash },
    /// The chain in `ledger_state` (head or frontier) is not the recomputed one.
    State(String),
    /// A `posting_hashes` row beyond the chain's size.
    BeyondTree { tree_size: u64 },
}

/// The first posting that does not match, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The sequence within the ledger.
    pub sequence: u64,
    pub broken: Broken,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.sequence;
        match &self.broken {
            Broken::Hash { stored, recomputed } => write!(
                f,
                "the stored hash {} is not the hash recomputed from the journal, {}: the posting \
                 (or its stored hash) was changed after it was recorded",
                hex(stored),
                to_hex(recomputed)
            ),
            Broken::NoHash => write!(
                f,
                "hashed (within the chain's tree_size) but posting_hashes has no row for it"
            ),
            Broken::Gap => write!(f, "missing from the journal (a gap: a deleted posting)"),
            Broken::Corrupt(e) => write!(f, "cannot be read: {e}"),
            Broken::Nodes { stored, recomputed } => write!(
                f,
                "its stored tree nodes {} are not the recomputed ones, {}",
                hex(stored),
                hex(recomputed)
            ),
            Broken::Root { stored, recomputed } => write!(
                f,
                "its stored digest root {} is not the recomputed root of the tree of size {n}, \
                 {}",
                hex(stored),
                to_hex(recomputed)
            ),
            Broken::State(e) => write!(f, "the ledger's chain in ledger_state: {e}"),
            Broken::BeyondTree { tree_size } => write!(
                f,
                "hashed (a posting_hashes row) beyond the chain's tree_size {tree_size}"
            ),
        }
    }
}

/// One ledger's verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub code: String,
    /// The journal's last sequence (ledger_state.last_sequence, within the ledger).
    pub last_sequence: u64,
    /// The chain's size (ledger_state.tree_size): the postings hashed.
    pub tree_size: u64,
    /// Postings whose hash, nodes and digest root matched, from 1 (all of 1..=tree_size when
    /// `first` is none).
    pub verified: u64,
    /// The recomputed root of the tree of `verified` postings.
    pub root: Hash,
    /// The first posting that does not match.
    pub first: Option<Mismatch>,
    /// Each held digest asked for, with its outcome.
    pub digests: Vec<(HeldDigest, DigestOutcome)>,
}

impl Verified {
    /// Whether hashing has not caught up with the journal (verified up to tree_size only).
    pub fn behind(&self) -> bool {
        self.tree_size < self.last_sequence
    }
}

/// A stored `posting_hashes` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRow {
    pub hash: Vec<u8>,
    pub nodes: Vec<u8>,
    pub root: Option<Vec<u8>>,
}

/// The recomputation: the chain as the journal alone makes it, compared posting by posting
/// with what is stored. Pure.
#[derive(Clone, Debug)]
pub struct Walk {
    ledger: String,
    head: Hash,
    frontier: Frontier,
    /// The root after the last posting that matched, and how many matched.
    verified: (u64, Hash),
    first: Option<Mismatch>,
    /// Held digests: the recomputed root once reached.
    digests: Vec<(HeldDigest, Option<Hash>)>,
    /// The chain's size: how far the walk goes.
    tree_size: u64,
    /// Set when the journal itself breaks (a gap, an unreadable row): nothing after it can
    /// be recomputed.
    broken_at: Option<u64>,
}

impl Walk {
    /// The walk of ledger `ledger` up to `tree_size` postings, with the held `digests`.
    pub fn new(ledger: &str, digests: &[HeldDigest], tree_size: u64) -> Walk {
        let mut w = Walk {
            ledger: ledger.to_owned(),
            head: GENESIS,
            frontier: Frontier::new(),
            verified: (0, journal::EMPTY_ROOT),
            first: None,
            digests: digests.iter().map(|d| (*d, None)).collect(),
            broken_at: None,
            tree_size,
        };
        w.reach_digests();
        w
    }

    /// The next sequence to recompute.
    pub fn next(&self) -> u64 {
        self.frontier.size() + 1
    }

    /// Whether reading on is of use: the journal still reads, the chain's size is not
    /// reached, and nothing failed yet or a held digest within it is still ahead (its root is
    /// recomputed from the journal alone).
    pub fn goes_on(&self) -> bool {
        let ahead = |(d, r): &(HeldDigest, Option<Hash>)| r.is_none() && d.size <= self.tree_size;
        self.broken_at.is_none()
            && self.next() <= self.tree_size
            && (self.first.is_none() || self.digests.iter().any(ahead))
    }

    fn fail(&mut self, sequence: u64, broken: Broken) {
        if self.first.is_none() {
            self.first = Some(Mismatch { sequence, broken });
        }
    }

    fn reach_digests(&mut self) {
        let size = self.frontier.size();
        let root = self.frontier.root().unwrap_or(journal::EMPTY_ROOT);
        for (d, r) in &mut self.digests {
            if d.size == size {
                *r = Some(root);
            }
        }
    }

    /// The journal has no readable posting at the next sequence (`broken`: a gap or a
    /// corrupt row).
    pub fn unreadable(&mut self, broken: Broken) {
        let n = self.next();
        self.fail(n, broken);
        self.broken_at = Some(n);
    }

    /// The ledger has no state row: nothing says how far it is hashed.
    pub fn no_state(&mut self) {
        self.fail(
            0,
            Broken::State("the ledger has no ledger_state row".into()),
        );
        self.broken_at = Some(0);
    }

    /// Recomputes the next posting `p` and compares it with its stored row.
    pub fn posting(&mut self, p: &Posting, stored: Option<&StoredRow>) {
        let n = self.next();
        let at = PostingAtRecording::of(p);
        debug_assert_eq!(at.sequence, n, "postings are walked in sequence order");
        let hash = journal::posting_hash(&self.ledger, &self.head, &at);
        let nodes = self.frontier.append(&hash).concat();
        self.head = hash;
        let root = self.frontier.root().unwrap_or(journal::EMPTY_ROOT);
        self.reach_digests();
        if self.first.is_some() {
            return;
        }
        let broken = match stored {
            None => Some(Broken::NoHash),
            Some(s) if s.hash != hash => Some(Broken::Hash {
                stored: s.hash.clone(),
                recomputed: hash,
            }),
            Some(s) if s.nodes != nodes => Some(Broken::Nodes {
                stored: s.nodes.clone(),
                recomputed: nodes,
            }),
            Some(StoredRow { root: Some(r), .. }) if *r != root => Some(Broken::Root {
                stored: r.clone(),
                recomputed: root,
            }),
            Some(_) => None,
        };
        match broken {
            Some(b) => self.fail(n, b),
            None => self.verified = (n, root),
        }
    }

    /// After the chain's last posting: the stored head and frontier (ledger_state) must be
    /// the recomputed ones, and no posting beyond it hashed (`hashed_beyond`: the first).
    pub fn state(&mut self, tree_head: &[u8], tree_frontier: &[u8], hashed_beyond: Option<u64>) {
        let size = self.frontier.size();
        if self.first.is_some() || self.broken_at.is_some() {
            return;
        }
        if tree_head != self.head {
            let e = format!(
                "tree_head {} is not the last recomputed hash, {}",
                hex(tree_head),
                to_hex(&self.head)
            );
            return self.fail(size, Broken::State(e));
        }
        let frontier = self.frontier.to_bytes();
        if tree_frontier != frontier {
            let e = format!(
                "tree_frontier {} is not the recomputed frontier of the tree of size {size}, {}",
                hex(tree_frontier),
                hex(&frontier)
            );
            return self.fail(size, Broken::State(e));
        }
        if let Some(n) = hashed_beyond {
            self.fail(n, Broken::BeyondTree { tree_size: size });
        }
    }

    /// The outcome, with the journal's `last_sequence`.
    pub fn finish(self, last_sequence: u64) -> Verified {
        let (broken_at, tree_size) = (self.broken_at, self.tree_size);
        let digests = self
            .digests
            .iter()
            .map(|(d, r)| (*d, digest_outcome(d, *r, tree_size, broken_at)))
            .collect();
        Verified {
            code: self.ledger,
            last_sequence,
            tree_size,
            verified: self.verified.0,
            root: self.verified.1,
            first: self.first,
            digests,
        }
    }
}

fn digest_outcome(
    d: &HeldDigest,
    recomputed: Option<Hash>,
    tree_size: u64,
    broken_at: Option<u64>,
) -> DigestOutcome {
    match (recomputed, broken_at) {
        (Some(r), _) if r == d.root => DigestOutcome::Confirmed,
        (Some(r), _) => DigestOutcome::Differs { recomputed: r },
        (None, _) if d.size > tree_size => DigestOutcome::Beyond { tree_size },
        (None, Some(b)) => DigestOutcome::Unreached { broken_at: b },
        // Every size up to tree_size is reached unless the journal breaks first.
        (None, None) => DigestOutcome::Unreached {
            broken_at: tree_size,
        },
    }
}

/// A connection for `ledger verify` (the URL's login; it only reads).
pub async fn connect(database_url: &str) -> Result<Conn, StorageError> {
    Ok(super::pool(database_url, 1)?.get().await?)
}

/// Every ledger (id, code) in id order, or the one of code `only` (none when no ledger has
/// that code).
pub async fn ledgers(
    client: &Conn,
    only: Option<&str>,
) -> Result<Vec<(LedgerId, String)>, StorageError> {
    let rows = client
        .query(
            "SELECT ledger_id, code FROM ledgers WHERE $1::text IS NULL OR code = $1 ORDER BY 1",
            &[&only],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Verifies one ledger against the journal, in one snapshot, and the held `digests` of it.
pub async fn verify_ledger(
    client: &mut Conn,
    (id, code): (LedgerId, &str),
    digests: &[HeldDigest],
) -> Result<Verified, StorageError> {
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let state = tx
        .query_opt(
            "SELECT last_sequence, tree_size, tree_head, tree_frontier FROM ledger_state
             WHERE ledger_id = $1",
            &[&id],
        )
        .await?;
    let Some(state) = state else {
        let mut walk = Walk::new(code, digests, 0);
        walk.no_state();
        return Ok(walk.finish(0));
    };
    let last = ledger::in_ledger(state.get(0)) as u64;
    let tree_size = state
        .get::<_, i64>(1)
        .clamp(0, ledger::MAX_SEQUENCE_IN_LEDGER) as u64;
    let mut walk = Walk::new(code, digests, tree_size);
    while walk.goes_on() {
        let lo = walk.next();
        let hi = tree_size.min(lo + VERIFY_PAGE - 1);
        page(&tx, id, (lo, hi), &mut walk).await?;
    }
    let beyond = hashed_beyond(&tx, id, tree_size).await?;
    let (head, frontier): (Vec<u8>, Vec<u8>) = (state.get(2), state.get(3));
    walk.state(&head, &frontier, beyond);
    tx.commit().await?;
    Ok(walk.finish(last))
}

/// Walks the sequences `lo..=hi` of ledger `id`: its postings and their stored rows.
async fn page(
    client: &impl GenericClient,
    id: LedgerId,
    (lo, hi): (u64, u64),
    walk: &mut Walk,
) -> Result<(), StorageError> {
    let sequences: Vec<i64> = (lo..=hi).map(|n| ledger::stored(id, n as i64)).collect();
    let (postings, corrupt) = readable_postings(client, &sequences).await?;
    let rows = stored_rows(client, id, (lo, hi)).await?;
    let mut postings = postings.into_iter().peekable();
    for n in lo..=hi {
        if !walk.goes_on() {
            break;
        }
        let at = |p: &Posting| ledger::in_ledger(p.sequence as i64) as u64 == n;
        match postings.next_if(at) {
            Some(p) => walk.posting(&p, rows.get(&n)),
            None => match &corrupt {
                Some((c, e)) if *c == n => walk.unreadable(Broken::Corrupt(e.clone())),
                _ => walk.unreadable(Broken::Gap),
            },
        }
    }
    Ok(())
}

/// The postings of `sequences` (consecutive, of one ledger) that read before the first one
/// that does not, and that one: its sequence within the ledger and the read's error. A read
/// that fails on a corrupt row is read again up to that row, so the postings before it are
/// still compared.
async fn readable_postings(
    client: &impl GenericClient,
    sequences: &[i64],
) -> Result<(Vec<Posting>, Option<(u64, String)>), StorageError> {
    let mut upto = sequences.len();
    let mut corrupt = None;
    while upto > 0 {
        let e = match read::postings_by_sequence(client, &sequences[..upto]).await {
            Ok(postings) => return Ok((postings, corrupt)),
            Err(e) => e,
        };
        let StorageError::Corrupt { sequence, .. } = &e else {
            return Err(e);
        };
        let first = ledger::in_ledger(sequences[0]);
        // Unnamed (or outside the range): the first of the range is the one reported.
        let at = sequence
            .map(|n| n - first)
            .filter(|i| (0..upto as i64).contains(i))
            .unwrap_or(0);
        corrupt = Some(((first + at) as u64, e.to_string()));
        upto = at as usize;
    }
    Ok((Vec::new(), corrupt))
}

/// The stored `posting_hashes` rows of ledger `id`'s sequences `lo..=hi`, by sequence within
/// the ledger.
async fn stored_rows(
    client: &impl GenericClient,
    id: LedgerId,
    (lo, hi): (u64, u64),
) -> Result<HashMap<u64, StoredRow>, StorageError> {
    let (from, to) = (ledger::stored(id, lo as i64), ledger::stored(id, hi as i64));
    let rows = client
        .query(
            "SELECT sequence, hash, nodes, root FROM posting_hashes
             WHERE sequence BETWEEN $1 AND $2 ORDER BY sequence",
            &[&from, &to],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let n = ledger::in_ledger(r.get(0)) as u64;
            let row = StoredRow {
                hash: r.get(1),
                nodes: r.get(2),
                root: r.get(3),
            };
            (n, row)
        })
        .collect())
}

/// The first sequence of ledger `id` beyond `tree_size` that has a `posting_hashes` row.
async fn hashed_beyond(
    client: &impl GenericClient,
    id: LedgerId,
    tree_size: u64,
) -> Result<Option<u64>, StorageError> {
    let from = ledger::stored(id, tree_size as i64);
    let to = ledger::stored(id, ledger::MAX_SEQUENCE_IN_LEDGER);
    let row = client
        .query_one(
            "SELECT min(sequence) FROM posting_hashes WHERE sequence > $1 AND sequence <= $2",
            &[&from, &to],
        )
        .await?;
    Ok(row
        .get::<_, Option<i64>>(0)
        .map(|s| ledger::in_ledger(s) as u64))
}
