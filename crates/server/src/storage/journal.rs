//! The verifiable journal's reads (migration 0016): a ledger's digest now or at a size, the
//! stored tree nodes proofs are made of (each by its last leaf's primary key, one query for all
//! a proof needs), and the hashing of a journal recorded before hashing existed, in chunks.

use super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::journal::{self, Chain, Frontier, Hash, NodeId};
use ledger_core::ledger::{self, LedgerId};
use std::collections::HashMap;
use time::OffsetDateTime;

/// A ledger's tree at one size: its root, and when its last posting was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    pub size: u64,
    pub root: Hash,
    pub recorded_at: Option<OffsetDateTime>,
}

/// The ledger's chain as its state row holds it: how many postings are hashed, and the tree's
/// frontier (its root is the current digest's).
pub async fn head(client: &impl GenericClient, ledger: LedgerId) -> Result<Frontier, StorageError> {
    let row = client
        .query_one(
            "SELECT tree_size, tree_frontier FROM ledger_state WHERE ledger_id = $1",
            &[&ledger],
        )
        .await?;
    let size: i64 = row.get(0);
    let bytes: Vec<u8> = row.get(1);
    Frontier::from_bytes(size as u64, &bytes).map_err(|e| {
        StorageError::corrupt_posting(
            ledger::stored(ledger, size),
            format!("the ledger's chain: {e}"),
        )
    })
}

/// When the posting of sequence `n` (within the ledger) was recorded (none for 0).
async fn recorded_at(
    client: &impl GenericClient,
    ledger: LedgerId,
    n: u64,
) -> Result<Option<OffsetDateTime>, StorageError> {
    if n == 0 {
        return Ok(None);
    }
    let stored = ledger::stored(ledger, n as i64);
    let row = client
        .query_opt(
            "SELECT recorded_at FROM postings WHERE sequence = $1",
            &[&stored],
        )
        .await?;
    match row {
        Some(r) => Ok(Some(r.get(0))),
        None => Err(StorageError::corrupt_posting(
            stored,
            "hashed, but not in the journal",
        )),
    }
}

/// The digest of the ledger's tree of `size` postings (`None`: the current one); `Ok(None)`
/// when the tree is smaller than that.
pub async fn digest(
    client: &impl GenericClient,
    ledger: LedgerId,
    size: Option<u64>,
) -> Result<Option<Digest>, StorageError> {
    let frontier = head(client, ledger).await?;
    let size = size.unwrap_or(frontier.size());
    if size > frontier.size() {
        return Ok(None);
    }
    let root = if size == frontier.size() {
        frontier.root().unwrap_or(journal::EMPTY_ROOT)
    } else {
        let stored = nodes(client, ledger, &journal::root_nodes(size)).await?;
        journal::root_from(size, &|id| stored.get(&id).copied())
            .map_err(|e| corrupt_tree(ledger, size, e))?
    };
    Ok(Some(Digest {
        size,
        root,
        recorded_at: recorded_at(client, ledger, size).await?,
    }))
}

/// The stored tree nodes `ids` of the ledger's tree, each read from its last leaf's row (one
/// query). A node whose row is missing or too short is not in the map: the proof that needs
/// it reports it.
pub async fn nodes(
    client: &impl GenericClient,
    ledger: LedgerId,
    ids: &[NodeId],
) -> Result<HashMap<NodeId, Hash>, StorageError> {
    let sequences: Vec<i64> = ids
        .iter()
        .map(|id| ledger::stored(ledger, id.last_leaf() as i64 + 1))
        .collect();
    let rows = client
        .query(
            "SELECT sequence, nodes FROM posting_hashes WHERE sequence = ANY($1)",
            &[&sequences],
        )
        .await?;
    let by_leaf: HashMap<u64, Vec<u8>> = rows
        .iter()
        .map(|r| ((ledger::in_ledger(r.get(0)) - 1) as u64, r.get(1)))
        .collect();
    Ok(ids
        .iter()
        .filter_map(|id| {
            let bytes = by_leaf.get(&id.last_leaf())?;
            let at = id.level as usize * 32;
            let node: Hash = bytes.get(at..at + 32)?.try_into().ok()?;
            Some((*id, node))
        })
        .collect())
}

/// A tree that cannot be rebuilt from its stored nodes: rows written behind the ledger's back.
pub fn corrupt_tree(ledger: LedgerId, size: u64, e: String) -> StorageError {
    StorageError::corrupt_posting(
        ledger::stored(ledger, size as i64),
        format!("the ledger's tree of {size} postings: {e}"),
    )
}

/// A ledger's chain from its state row's columns after `size` postings (`tree_head`,
/// `tree_frontier`); ones that cannot be read are the ledger's state written behind its back.
pub(crate) fn chain_from(
    (ledger, code): (LedgerId, &str),
    size: i64,
    head: &[u8],
    frontier: &[u8],
) -> Result<Chain, StorageError> {
    let corrupt = |e: String| {
        StorageError::corrupt_posting(
            ledger::stored(ledger, size),
            format!("the ledger's chain: {e}"),
        )
    };
    Ok(Chain {
        ledger: code.to_owned(),
        head: <[u8; 32]>::try_from(head).map_err(|_| corrupt("a head not of 32 bytes".into()))?,
        frontier: Frontier::from_bytes(size as u64, frontier).map_err(corrupt)?,
    })
}

/// Postings hashed per transaction of [`hash_backlog`] (limit HASH_CHUNK): the ledger's
/// writes wait for one chunk at most (about 0.1 s).
pub const HASH_CHUNK: i64 = 2_000;

/// Hashes every ledger's postings recorded before hashing existed (migration 0016), in
/// sequence order, [`HASH_CHUNK`] per transaction, each under its ledger's write lock, going
/// on from the ledger's `tree_size`: a run stopped anywhere is resumed by the next. Once a
/// ledger is caught up its writer hashes its batches itself. Returns the postings hashed.
pub async fn hash_backlogs(client: &mut deadpool_postgres::Client) -> Result<u64, StorageError> {
    let ledgers: Vec<(i32, String)> = client
        .query(
            "SELECT s.ledger_id, l.code FROM ledger_state s JOIN ledgers l USING (ledger_id)
             WHERE s.tree_size < s.last_sequence & $1 ORDER BY 1",
            &[&ledger::MAX_SEQUENCE_IN_LEDGER],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut hashed = 0;
    for (id, code) in ledgers {
        loop {
            let n = hash_chunk(client, (id, &code)).await?;
            if n == 0 {
                break;
            }
            hashed += n;
            tracing::info!(ledger = %code, hashed, "hashing the journal recorded before hashing");
        }
    }
    Ok(hashed)
}

/// Hashes the next [`HASH_CHUNK`] unhashed postings of a ledger in one transaction under its
/// lock; 0 when it is caught up.
async fn hash_chunk(
    client: &mut deadpool_postgres::Client,
    (ledger, code): (LedgerId, &str),
) -> Result<u64, StorageError> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&super::LEDGER_LOCK_CLASS, &ledger],
    )
    .await?;
    let state = tx
        .query_one(
            "SELECT last_sequence, tree_size, tree_head, tree_frontier FROM ledger_state WHERE ledger_id = $1 FOR UPDATE",
            &[&ledger],
        )
        .await?;
    let (last, size): (i64, i64) = (ledger::in_ledger(state.get(0)), state.get(1));
    if size >= last {
        tx.commit().await?;
        return Ok(0);
    }
    let mut chain = chain_from(
        (ledger, code),
        size,
        &state.get::<_, Vec<u8>>(2),
        &state.get::<_, Vec<u8>>(3),
    )?;
    let upto = last.min(size + HASH_CHUNK);
    let sequences: Vec<i64> = (size + 1..=upto)
        .map(|n| ledger::stored(ledger, n))
        .collect();
    let postings = super::read::postings_by_sequence(&tx, &sequences).await?;
    if postings.len() != sequences.len() {
        return Err(StorageError::corrupt_posting(
            ledger::stored(ledger, size),
            format!(
                "the ledger's chain: postings {}..={upto} are not all in the journal",
                size + 1
            ),
        ));
    }
    let (mut hashes, mut nodes) = (Vec::new(), Vec::new());
    for p in &postings {
        let (h, n) = chain.append(p);
        hashes.push(h.to_vec());
        nodes.push(n.concat());
    }
    let mut roots: Vec<Option<Vec<u8>>> = vec![None; sequences.len()];
    roots[sequences.len() - 1] = Some(chain.root().to_vec());
    tx.execute(
        "INSERT INTO posting_hashes (sequence, hash, nodes, root)
         SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::bytea[])",
        &[&sequences, &hashes, &nodes, &roots],
    )
    .await?;
    tx.execute(
        "UPDATE ledger_state SET tree_size = $2, tree_head = $3, tree_frontier = $4 WHERE ledger_id = $1",
        &[&ledger, &upto, &chain.head.to_vec(), &chain.frontier.to_bytes()],
    )
    .await?;
    tx.commit().await?;
    Ok(sequences.len() as u64)
}
