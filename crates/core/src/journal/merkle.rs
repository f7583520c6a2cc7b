//! The Merkle tree of RFC 9162 §2.1 over a ledger's posting hashes in sequence order: leaf `i`
//! (0-based) is the posting of sequence `i + 1`.
//!
//! Storage keeps only complete, aligned subtrees ([`NodeId`]), each with its last leaf, and
//! the [`Frontier`] of the whole tree. Every subtree the RFC's algorithms name that is not
//! complete is the combination of complete aligned ones (its size's binary digits, largest
//! first), so roots and proofs of any size are read from complete nodes only, O(log n) of them,
//! deduplicated so each is read once.

use super::hash::Hash;
use sha2::{Digest, Sha256};
use std::fmt;

/// The root of the empty tree (RFC 9162 §2.1.1): SHA-256 of the empty string.
pub const EMPTY_ROOT: Hash = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// The leaf hash of a posting hash: SHA-256(0x00 ‖ posting hash).
pub fn leaf_hash(posting_hash: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([0x00]);
    h.update(posting_hash);
    h.finalize().into()
}

/// An inner node's hash: SHA-256(0x01 ‖ left ‖ right).
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([0x01]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// A complete, aligned subtree: the leaves `[index·2^level, (index+1)·2^level)`. Level 0 is a
/// leaf. Storage keeps it with its last leaf ([`NodeId::last_leaf`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId {
    /// Its height: it covers 2^level leaves.
    pub level: u32,
    /// Its position among the subtrees of its level, from 0.
    pub index: u64,
}

impl NodeId {
    /// Its first leaf.
    pub fn first_leaf(self) -> u64 {
        self.index << self.level
    }

    /// Its last leaf: the one storage keeps it with.
    pub fn last_leaf(self) -> u64 {
        ((self.index + 1) << self.level) - 1
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node (level {}, index {}; leaves {}..={})",
            self.level,
            self.index,
            self.first_leaf(),
            self.last_leaf()
        )
    }
}

/// Where the nodes come from: a node's hash, or `None` when it is missing.
pub type Nodes<'a> = &'a dyn Fn(NodeId) -> Option<Hash>;

/// The complete aligned subtrees that make up the leaves `[start, end)`, largest first, when
/// `start` is a multiple of the smallest power of two ≥ `end − start` (every range the RFC's
/// recursions visit is).
fn range_nodes(start: u64, end: u64) -> Vec<NodeId> {
    let mut out = Vec::new();
    let mut at = start;
    let size = end - start;
    for level in (0..64).rev() {
        if size >> level & 1 == 1 {
            out.push(NodeId {
                level,
                index: at >> level,
            });
            at += 1 << level;
        }
    }
    out
}

/// The hash of a node, or an error naming it.
fn fetch(nodes: Nodes<'_>, id: NodeId) -> Result<Hash, String> {
    nodes(id).ok_or_else(|| format!("{id} is missing"))
}

/// MTH of the leaves `[start, end)` (non-empty) from its complete nodes.
fn range_hash(start: u64, end: u64, nodes: Nodes<'_>) -> Result<Hash, String> {
    let ids = range_nodes(start, end);
    let mut hashes = ids.iter().rev().map(|&id| fetch(nodes, id));
    let mut acc = hashes.next().ok_or("an empty range has no hash")??;
    for h in hashes {
        acc = node_hash(&h?, &acc);
    }
    Ok(acc)
}

/// The largest power of two smaller than `n` (n ≥ 2): the RFC's split point `k`.
fn split(n: u64) -> u64 {
    1 << (63 - (n - 1).leading_zeros())
}

/// Sorted, each once.
fn dedup(mut ids: Vec<NodeId>) -> Vec<NodeId> {
    ids.sort_by_key(|id| (id.last_leaf(), id.level));
    ids.dedup();
    ids
}

/// The complete nodes whose combination is MTH of the first `n` leaves: the subtrees of `n`'s
/// binary decomposition, largest (leftmost) first. Empty for `n` = 0.
pub fn root_nodes(n: u64) -> Vec<NodeId> {
    range_nodes(0, n)
}

/// MTH of the first `n` leaves from the nodes of [`root_nodes`]; [`EMPTY_ROOT`] for `n` = 0.
pub fn root_from(n: u64, nodes: Nodes<'_>) -> Result<Hash, String> {
    if n == 0 {
        return Ok(EMPTY_ROOT);
    }
    range_hash(0, n, nodes)
}

/// The leaf ranges whose hashes make PATH(m, D[n]) (RFC 9162 §2.1.3.1), in the RFC's order
/// (the leaf's sibling first, the root's other child last).
fn inclusion_ranges(m: u64, n: u64) -> Vec<(u64, u64)> {
    let (mut start, mut end, mut m) = (0, n, m);
    let mut top_down = Vec::new();
    while end - start > 1 {
        let k = split(end - start);
        if m < k {
            top_down.push((start + k, end));
            end = start + k;
        } else {
            top_down.push((start, start + k));
            start += k;
            m -= k;
        }
    }
    top_down.reverse();
    top_down
}

fn check_inclusion_sizes(m: u64, n: u64) -> Result<(), String> {
    if m >= n {
        return Err(format!(
            "leaf index {m} is not in a tree of {n} leaves (leaf indexes are 0..{n})"
        ));
    }
    Ok(())
}

/// The complete nodes [`inclusion_proof`] reads for leaf `m` in the tree of `n` leaves, each
/// once. Empty when `m ≥ n` (which `inclusion_proof` refuses with the reason).
pub fn inclusion_nodes(m: u64, n: u64) -> Vec<NodeId> {
    if m >= n {
        return Vec::new();
    }
    nodes_of(&inclusion_ranges(m, n))
}

/// The complete nodes that make the hashes of these leaf ranges, each once.
fn nodes_of(ranges: &[(u64, u64)]) -> Vec<NodeId> {
    dedup(
        ranges
            .iter()
            .flat_map(|&(a, b)| range_nodes(a, b))
            .collect(),
    )
}

/// The audit path PATH(m, D[n]) of RFC 9162 §2.1.3.1 for leaf `m` (the posting of sequence
/// `m + 1`) in the tree of the first `n` leaves, in the RFC's order, from the nodes of
/// [`inclusion_nodes`].
pub fn inclusion_proof(m: u64, n: u64, nodes: Nodes<'_>) -> Result<Vec<Hash>, String> {
    check_inclusion_sizes(m, n)?;
    inclusion_ranges(m, n)
        .into_iter()
        .map(|(a, b)| range_hash(a, b, nodes))
        .collect()
}

/// The leaf ranges whose hashes make PROOF(m, D[n]) (RFC 9162 §2.1.4.1), in the RFC's order.
fn consistency_ranges(m: u64, n: u64) -> Vec<(u64, u64)> {
    let (mut start, mut end, mut m, mut whole) = (0, n, m, true);
    let mut top_down = Vec::new();
    let mut first = None;
    while start < end {
        if m == end - start {
            // SUBPROOF(m, D[m], b): nothing when D[m] is the old tree itself, else its MTH.
            if !whole {
                first = Some((start, end));
            }
            break;
        }
        let k = split(end - start);
        if m <= k {
            top_down.push((start + k, end));
            end = start + k;
        } else {
            top_down.push((start, start + k));
            start += k;
            m -= k;
            whole = false;
        }
    }
    first
        .into_iter()
        .chain(top_down.into_iter().rev())
        .collect()
}

fn check_consistency_sizes(m: u64, n: u64) -> Result<(), String> {
    if m == 0 || m > n {
        return Err(format!(
            "no consistency proof from size {m} to size {n}: it needs 0 < first size ≤ second size"
        ));
    }
    Ok(())
}

/// The complete nodes [`consistency_proof`] reads from size `m` to size `n`, each once. Empty
/// unless 0 < `m` ≤ `n` (which `consistency_proof` requires, with the reason).
pub fn consistency_nodes(m: u64, n: u64) -> Vec<NodeId> {
    if m == 0 || m > n {
        return Vec::new();
    }
    nodes_of(&consistency_ranges(m, n))
}

/// The consistency proof PROOF(m, D[n]) of RFC 9162 §2.1.4.1 between the tree of the first
/// `m` leaves and that of the first `n` (0 < m ≤ n; m = n is the empty proof), in the RFC's
/// order, from the nodes of [`consistency_nodes`].
pub fn consistency_proof(m: u64, n: u64, nodes: Nodes<'_>) -> Result<Vec<Hash>, String> {
    check_consistency_sizes(m, n)?;
    consistency_ranges(m, n)
        .into_iter()
        .map(|(a, b)| range_hash(a, b, nodes))
        .collect()
}

/// Right-shifts `fn_` and `sn` together until `fn_`'s lowest bit is set or it is 0.
fn shift_to_set_bit(fn_: &mut u64, sn: &mut u64) {
    while *fn_ & 1 == 0 && *fn_ != 0 {
        *fn_ >>= 1;
        *sn >>= 1;
    }
}

/// Verifies an inclusion proof exactly as RFC 9162 §2.1.3.2: that the posting of hash
/// `posting_hash` is leaf `leaf_index` (sequence `leaf_index + 1`) of the tree of `tree_size`
/// leaves whose root is `root`. The leaf hash is computed here.
pub fn verify_inclusion(
    leaf_index: u64,
    tree_size: u64,
    posting_hash: &Hash,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), String> {
    check_inclusion_sizes(leaf_index, tree_size)?;
    let (mut fn_, mut sn) = (leaf_index, tree_size - 1);
    let mut r = leaf_hash(posting_hash);
    for p in proof {
        if sn == 0 {
            return Err(format!(
                "the proof has {} hashes, more than leaf {leaf_index} of a tree of {tree_size} leaves needs",
                proof.len()
            ));
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            shift_to_set_bit(&mut fn_, &mut sn);
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(format!(
            "the proof has {} hashes, fewer than leaf {leaf_index} of a tree of {tree_size} leaves needs",
            proof.len()
        ));
    }
    if r != *root {
        return Err(format!(
            "the root computed from the proof, {}, is not the root given, {}",
            super::hash::to_hex(&r),
            super::hash::to_hex(root)
        ));
    }
    Ok(())
}

/// Verifies a consistency proof exactly as RFC 9162 §2.1.4.2: that the tree of `first_size`
/// leaves with root `first_root` is a prefix of the tree of `second_size` leaves with root
/// `second_root`. Equal sizes (outside the RFC's algorithm, which needs first < second) verify
/// with the empty proof when the roots are equal.
pub fn verify_consistency(
    first_size: u64,
    second_size: u64,
    first_root: &Hash,
    second_root: &Hash,
    proof: &[Hash],
) -> Result<(), String> {
    check_consistency_sizes(first_size, second_size)?;
    if first_size == second_size {
        return match (proof.is_empty(), first_root == second_root) {
            (true, true) => Ok(()),
            (false, _) => Err(format!(
                "the proof between equal sizes is empty, this one has {} hashes",
                proof.len()
            )),
            (true, false) => Err("the roots of two trees of the same size differ".into()),
        };
    }
    if proof.is_empty() {
        return Err("a consistency proof between different sizes is never empty".into());
    }
    let (fr, sr, sn) = consistency_fold(first_size, second_size, first_root, proof)?;
    let hex = super::hash::to_hex;
    if sn != 0 {
        return Err(format!(
            "the proof has {} hashes, fewer than sizes {first_size} and {second_size} need",
            proof.len()
        ));
    }
    if fr != *first_root {
        return Err(format!(
            "the first root computed from the proof, {}, is not the first root given, {}",
            hex(&fr),
            hex(first_root)
        ));
    }
    if sr != *second_root {
        return Err(format!(
            "the second root computed from the proof, {}, is not the second root given, {}",
            hex(&sr),
            hex(second_root)
        ));
    }
    Ok(())
}

/// Steps 2 to 6 of RFC 9162 §2.1.4.2: the two roots the proof computes, and the final `sn`.
fn consistency_fold(
    first_size: u64,
    second_size: u64,
    first_root: &Hash,
    proof: &[Hash],
) -> Result<(Hash, Hash, u64), String> {
    let path: Vec<&Hash> = if first_size.is_power_of_two() {
        std::iter::once(first_root).chain(proof).collect()
    } else {
        proof.iter().collect()
    };
    let (mut fn_, mut sn) = (first_size - 1, second_size - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let (mut fr, mut sr) = (*path[0], *path[0]);
    for c in &path[1..] {
        if sn == 0 {
            return Err(format!(
                "the proof has {} hashes, more than sizes {first_size} and {second_size} need",
                proof.len()
            ));
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            shift_to_set_bit(&mut fn_, &mut sn);
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    Ok((fr, sr, sn))
}

/// The complete subtrees of the binary decomposition of a tree of `size` leaves, largest
/// first: all a writer needs to append and to compute the root. At most 64 hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// The hashes of [`root_nodes`]`(size)`, in that order.
    hashes: Vec<Hash>,
}

impl Frontier {
    /// The frontier of the empty tree.
    pub fn new() -> Frontier {
        Frontier::default()
    }

    /// The number of leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The hashes of [`root_nodes`]`(self.size())`, largest subtree first.
    pub fn hashes(&self) -> &[Hash] {
        &self.hashes
    }

    /// MTH of the tree; `None` for the empty tree (whose RFC root is [`EMPTY_ROOT`]).
    pub fn root(&self) -> Option<Hash> {
        let mut rev = self.hashes.iter().rev();
        let last = *rev.next()?;
        Some(rev.fold(last, |acc, h| node_hash(h, &acc)))
    }

    /// Adds the leaf of `posting_hash` (the posting of sequence `size + 1`) and returns the
    /// hashes of the nodes it completes, level 0 first: its leaf hash, then the node of level
    /// 1 if it completed one, and so on. Exactly the nodes storage keeps with this leaf.
    ///
    /// Panics at 2^64 − 1 leaves (a ledger holds at most 2^40).
    pub fn append(&mut self, posting_hash: &Hash) -> Vec<Hash> {
        assert!(self.size < u64::MAX, "a Merkle tree of 2^64 leaves");
        let mut cur = leaf_hash(posting_hash);
        let mut completed = vec![cur];
        let mut size = self.size;
        while size & 1 == 1 {
            let left = self.hashes.pop().expect("one hash per set bit of the size");
            cur = node_hash(&left, &cur);
            completed.push(cur);
            size >>= 1;
        }
        self.hashes.push(cur);
        self.size += 1;
        completed
    }

    /// Its bytes for storage: the hashes concatenated, largest subtree first (32 bytes each;
    /// the size is kept beside them).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.hashes.concat()
    }

    /// The frontier of a tree of `size` leaves from [`Frontier::to_bytes`].
    pub fn from_bytes(size: u64, bytes: &[u8]) -> Result<Frontier, String> {
        let want = size.count_ones() as usize;
        if bytes.len() != want * 32 {
            return Err(format!(
                "the frontier of a tree of {size} leaves is {want} hashes ({} bytes), got {} bytes",
                want * 32,
                bytes.len()
            ));
        }
        let hashes = bytes
            .chunks_exact(32)
            .map(|c| c.try_into().expect("chunks of 32 bytes"))
            .collect();
        Ok(Frontier { size, hashes })
    }

    /// The frontier of a tree of `size` leaves from its stored nodes ([`root_nodes`]).
    pub fn from_nodes(size: u64, nodes: Nodes<'_>) -> Result<Frontier, String> {
        let hashes = root_nodes(size)
            .into_iter()
            .map(|id| fetch(nodes, id))
            .collect::<Result<_, _>>()?;
        Ok(Frontier { size, hashes })
    }
}
