//! The journal's hashes and tree against an independent reference: RFC 9162's recursive
//! definitions of MTH, PATH and PROOF written out as the RFC writes them.

use super::hash::{encode, from_hex, micros, posting_hash, to_hex, Hash, PostingAtRecording};
use super::merkle::*;
use super::GENESIS;
use crate::account::{Direction, Metadata};
use crate::amount::Amount;
use crate::record::{CloseKind, Closes, HoldState, PostedLeg, Posting};
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use time::macros::datetime;
use time::OffsetDateTime;
use uuid::Uuid;

const DOC: &str = include_str!("../../../../docs/verifiable.md");

// ---- The reference: RFC 9162 §2.1, recursively, on SHA-256 directly. ----

fn sha(parts: &[&[u8]]) -> Hash {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

fn ref_leaf(posting: &Hash) -> Hash {
    sha(&[&[0x00], posting])
}

fn ref_node(left: &Hash, right: &Hash) -> Hash {
    sha(&[&[0x01], left, right])
}

/// The largest power of two smaller than n (n > 1), by counting up.
fn ref_k(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// MTH(D[n]) over the posting hashes `d`.
fn ref_mth(d: &[Hash]) -> Hash {
    match d.len() {
        0 => sha(&[]),
        1 => ref_leaf(&d[0]),
        n => {
            let k = ref_k(n);
            ref_node(&ref_mth(&d[..k]), &ref_mth(&d[k..]))
        }
    }
}

/// PATH(m, D[n]).
fn ref_path(m: usize, d: &[Hash]) -> Vec<Hash> {
    if d.len() == 1 {
        return Vec::new();
    }
    let k = ref_k(d.len());
    if m < k {
        let mut p = ref_path(m, &d[..k]);
        p.push(ref_mth(&d[k..]));
        p
    } else {
        let mut p = ref_path(m - k, &d[k..]);
        p.push(ref_mth(&d[..k]));
        p
    }
}

/// SUBPROOF(m, D[n], b).
fn ref_subproof(m: usize, d: &[Hash], b: bool) -> Vec<Hash> {
    let n = d.len();
    if m == n {
        return if b { Vec::new() } else { vec![ref_mth(d)] };
    }
    let k = ref_k(n);
    if m <= k {
        let mut p = ref_subproof(m, &d[..k], b);
        p.push(ref_mth(&d[k..]));
        p
    } else {
        let mut p = ref_subproof(m - k, &d[k..], false);
        p.push(ref_mth(&d[..k]));
        p
    }
}

/// PROOF(m, D[n]).
fn ref_proof(m: usize, d: &[Hash]) -> Vec<Hash> {
    ref_subproof(m, d, true)
}

/// What a proof means by the recursive definition: the root PATH(m, D[n]) folds to from a
/// leaf hash, if the proof has PATH's shape.
fn ref_inclusion_root(m: u64, n: u64, leaf: Hash, proof: &[Hash]) -> Option<Hash> {
    if m >= n {
        return None;
    }
    if n == 1 {
        return proof.is_empty().then_some(leaf);
    }
    let (last, rest) = proof.split_last()?;
    let k = ref_k(n as usize) as u64;
    Some(if m < k {
        ref_node(&ref_inclusion_root(m, k, leaf, rest)?, last)
    } else {
        ref_node(last, &ref_inclusion_root(m - k, n - k, leaf, rest)?)
    })
}

/// The (old, new) roots SUBPROOF(m, D[n], b) folds to, if the proof has its shape.
fn ref_consistency_roots(
    m: u64,
    n: u64,
    b: bool,
    first: Hash,
    proof: &[Hash],
) -> Option<(Hash, Hash)> {
    if m == 0 || m > n {
        return None;
    }
    if m == n {
        return match (b, proof) {
            (true, []) => Some((first, first)),
            (false, [x]) => Some((*x, *x)),
            _ => None,
        };
    }
    let (last, rest) = proof.split_last()?;
    let k = ref_k(n as usize) as u64;
    if m <= k {
        let (f, s) = ref_consistency_roots(m, k, b, first, rest)?;
        Some((f, ref_node(&s, last)))
    } else {
        let (f, s) = ref_consistency_roots(m - k, n - k, false, first, rest)?;
        Some((ref_node(last, &f), ref_node(last, &s)))
    }
}

fn ref_consistent(m: u64, n: u64, first: Hash, second: Hash, proof: &[Hash]) -> bool {
    ref_consistency_roots(m, n, true, first, proof) == Some((first, second))
}

// ---- Fixtures. ----

fn postings(n: usize) -> Vec<Hash> {
    (0..n as u64)
        .map(|i| sha(&[b"posting", &i.to_be_bytes()]))
        .collect()
}

/// The tree of `leaves` as storage would keep it: every node `append` returned, by id; and
/// the frontier after each leaf.
fn stored_tree(leaves: &[Hash]) -> (HashMap<NodeId, Hash>, Vec<Frontier>) {
    let mut f = Frontier::new();
    let mut nodes = HashMap::new();
    let mut frontiers = vec![f.clone()];
    for (i, p) in leaves.iter().enumerate() {
        for (level, h) in f.append(p).into_iter().enumerate() {
            let id = NodeId {
                level: level as u32,
                index: (i as u64) >> level,
            };
            assert_eq!(id.last_leaf(), i as u64, "{id} is kept with its last leaf");
            assert!(nodes.insert(id, h).is_none(), "{id} completed twice");
        }
        frontiers.push(f.clone());
    }
    (nodes, frontiers)
}

/// Reads nodes of the tree of the first `n` leaves, recording which were read; a node past
/// leaf `n − 1` is missing.
struct Reader<'a> {
    nodes: &'a HashMap<NodeId, Hash>,
    n: u64,
    read: RefCell<Vec<NodeId>>,
}

impl Reader<'_> {
    fn get(&self, id: NodeId) -> Option<Hash> {
        self.read.borrow_mut().push(id);
        if id.last_leaf() >= self.n {
            return None;
        }
        self.nodes.get(&id).copied()
    }

    /// The nodes read, as a set, after checking the list given to storage names each once.
    fn read_exactly(&self, listed: &[NodeId]) -> bool {
        let set: BTreeSet<NodeId> = listed.iter().copied().collect();
        assert_eq!(set.len(), listed.len(), "{listed:?} names a node twice");
        let read: BTreeSet<NodeId> = self.read.take().into_iter().collect();
        read == set
    }
}

fn flipped(h: &Hash, byte: usize) -> Hash {
    let mut h = *h;
    h[byte % 32] ^= 0x01;
    h
}

// ---- The tree. ----

#[test]
fn the_empty_tree_has_the_rfc_root_the_sha256_of_nothing() {
    assert_eq!(
        to_hex(&EMPTY_ROOT),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(EMPTY_ROOT, sha(&[]));
    assert_eq!(Frontier::new().root(), None);
    assert_eq!(root_from(0, &|_| None), Ok(EMPTY_ROOT));
    assert!(root_nodes(0).is_empty());
}

#[test]
fn leaves_and_nodes_hash_with_the_rfc_prefixes() {
    let (a, b) = ([7u8; 32], [9u8; 32]);
    assert_eq!(leaf_hash(&a), ref_leaf(&a));
    assert_eq!(node_hash(&a, &b), ref_node(&a, &b));
    assert_ne!(node_hash(&a, &b), node_hash(&b, &a));
}

#[test]
fn every_root_of_sizes_1_to_70_matches_the_reference_from_the_frontier_and_from_stored_nodes() {
    let leaves = postings(70);
    let (nodes, frontiers) = stored_tree(&leaves);
    for n in 1..=70u64 {
        let want = ref_mth(&leaves[..n as usize]);
        assert_eq!(frontiers[n as usize].size(), n);
        assert_eq!(frontiers[n as usize].root(), Some(want), "frontier of {n}");
        let r = Reader {
            nodes: &nodes,
            n,
            read: RefCell::new(Vec::new()),
        };
        assert_eq!(root_from(n, &|id| r.get(id)), Ok(want), "root_from({n})");
        assert!(r.read_exactly(&root_nodes(n)), "root_nodes({n})");
        let rebuilt = Frontier::from_nodes(n, &|id| nodes.get(&id).copied()).unwrap();
        assert_eq!(rebuilt, frontiers[n as usize], "from_nodes({n})");
    }
}

fn check_inclusion(leaves: &[Hash], nodes: &HashMap<NodeId, Hash>, m: u64, n: u64) {
    let r = Reader {
        nodes,
        n,
        read: RefCell::new(Vec::new()),
    };
    let proof = inclusion_proof(m, n, &|id| r.get(id)).unwrap();
    assert!(
        r.read_exactly(&inclusion_nodes(m, n)),
        "nodes of ({m}, {n})"
    );
    assert_eq!(
        proof,
        ref_path(m as usize, &leaves[..n as usize]),
        "({m}, {n})"
    );
    let root = ref_mth(&leaves[..n as usize]);
    let leaf = &leaves[m as usize];
    assert_eq!(verify_inclusion(m, n, leaf, &proof, &root), Ok(()));
    for i in 0..proof.len() {
        for byte in [0, 31, i] {
            let mut bad = proof.clone();
            bad[i] = flipped(&bad[i], byte);
            assert!(verify_inclusion(m, n, leaf, &bad, &root).is_err());
        }
    }
    assert!(verify_inclusion(m, n, &flipped(leaf, 5), &proof, &root).is_err());
    assert!(verify_inclusion(m, n, leaf, &proof, &flipped(&root, 17)).is_err());
    let mut longer = proof.clone();
    longer.push(root);
    assert!(verify_inclusion(m, n, leaf, &longer, &root).is_err());
    if !proof.is_empty() {
        assert!(verify_inclusion(m, n, leaf, &proof[1..], &root).is_err());
    }
    // Other sizes: the verifier agrees with what the proof means by the recursive definition
    // (a proof can fit another size too: leaf 0's path in 3 leaves has the shape of 4's).
    for (m2, n2) in [(m + 1, n), (m.wrapping_sub(1), n), (m, n + 1), (m, n - 1)] {
        let means = ref_inclusion_root(m2, n2, ref_leaf(leaf), &proof) == Some(root);
        let got = verify_inclusion(m2, n2, leaf, &proof, &root);
        assert_eq!(
            got.is_ok(),
            means,
            "({m}, {n}) proof checked as ({m2}, {n2}): {got:?}"
        );
    }
}

#[test]
fn every_inclusion_proof_up_to_70_leaves_matches_the_reference_and_verifies_and_a_change_fails() {
    let leaves = postings(70);
    let (nodes, _) = stored_tree(&leaves);
    for n in 1..=70u64 {
        for m in 0..n {
            check_inclusion(&leaves, &nodes, m, n);
        }
    }
    assert!(
        verify_inclusion(1, 3, &leaves[0], &[], &EMPTY_ROOT).is_err(),
        "a size change that changes the shape fails"
    );
}

fn check_consistency(leaves: &[Hash], nodes: &HashMap<NodeId, Hash>, m: u64, n: u64) {
    let r = Reader {
        nodes,
        n,
        read: RefCell::new(Vec::new()),
    };
    let proof = consistency_proof(m, n, &|id| r.get(id)).unwrap();
    assert!(
        r.read_exactly(&consistency_nodes(m, n)),
        "nodes of ({m}, {n})"
    );
    assert_eq!(
        proof,
        ref_proof(m as usize, &leaves[..n as usize]),
        "({m}, {n})"
    );
    let first = ref_mth(&leaves[..m as usize]);
    let second = ref_mth(&leaves[..n as usize]);
    assert_eq!(verify_consistency(m, n, &first, &second, &proof), Ok(()));
    for i in 0..proof.len() {
        for byte in [0, 31, i] {
            let mut bad = proof.clone();
            bad[i] = flipped(&bad[i], byte);
            assert!(verify_consistency(m, n, &first, &second, &bad).is_err());
        }
    }
    assert!(verify_consistency(m, n, &flipped(&first, 3), &second, &proof).is_err());
    assert!(verify_consistency(m, n, &first, &flipped(&second, 30), &proof).is_err());
    let mut longer = proof.clone();
    longer.push(second);
    assert!(verify_consistency(m, n, &first, &second, &longer).is_err());
    if !proof.is_empty() {
        assert!(verify_consistency(m, n, &first, &second, &proof[1..]).is_err());
    }
    for (m2, n2) in [(m + 1, n), (m - 1, n), (m, n + 1), (m, n - 1)] {
        let means = ref_consistent(m2, n2, first, second, &proof);
        let got = verify_consistency(m2, n2, &first, &second, &proof);
        assert_eq!(
            got.is_ok(),
            means,
            "({m}, {n}) proof checked as ({m2}, {n2}): {got:?}"
        );
    }
}

#[test]
fn every_consistency_proof_up_to_70_leaves_matches_the_reference_and_verifies_and_a_change_fails() {
    let leaves = postings(70);
    let (nodes, _) = stored_tree(&leaves);
    for n in 1..=70u64 {
        for m in 1..=n {
            check_consistency(&leaves, &nodes, m, n);
        }
    }
}

/// A proof binds its sizes only together with their roots (RFC 9162: a size and its root come
/// from one tree head). Checked with the true root of another size, every proof fails.
#[test]
fn a_proof_for_one_size_never_verifies_against_the_true_root_of_another() {
    let leaves = postings(41);
    let (nodes, _) = stored_tree(&leaves);
    let get = |id: NodeId| nodes.get(&id).copied();
    let roots: Vec<Hash> = (0..=41).map(|n| ref_mth(&leaves[..n])).collect();
    for n in 1..=40u64 {
        for n2 in [n - 1, n + 1] {
            let root2 = &roots[n2 as usize];
            for m in 0..n.min(n2) {
                let proof = inclusion_proof(m, n, &get).unwrap();
                let got = verify_inclusion(m, n2, &leaves[m as usize], &proof, root2);
                assert!(got.is_err(), "leaf {m}: proof in {n} checked in {n2}");
            }
            for m in 1..=n.min(n2) {
                let proof = consistency_proof(m, n, &get).unwrap();
                let first = &roots[m as usize];
                let got = verify_consistency(m, n2, first, root2, &proof);
                assert!(got.is_err(), "from {m}: proof to {n} checked to {n2}");
            }
        }
    }
}

#[test]
fn proofs_of_bad_sizes_and_missing_nodes_are_errors_that_say_why() {
    assert!(inclusion_nodes(3, 3).is_empty());
    assert_eq!(
        inclusion_proof(3, 3, &|_| Some(GENESIS)),
        Err("leaf index 3 is not in a tree of 3 leaves (leaf indexes are 0..3)".into())
    );
    assert!(consistency_nodes(0, 3).is_empty() && consistency_nodes(4, 3).is_empty());
    let refused =
        "no consistency proof from size 4 to size 3: it needs 0 < first size ≤ second size";
    assert_eq!(
        consistency_proof(4, 3, &|_| Some(GENESIS)),
        Err(refused.into())
    );
    assert_eq!(
        verify_consistency(4, 3, &GENESIS, &GENESIS, &[]),
        Err(refused.into())
    );
    assert_eq!(
        root_from(6, &|_| None),
        Err("node (level 1, index 2; leaves 4..=5) is missing".into())
    );
    let only_leaves = |id: NodeId| (id.level == 0).then_some(GENESIS);
    assert_eq!(
        inclusion_proof(0, 5, &only_leaves),
        Err("node (level 1, index 1; leaves 2..=3) is missing".into())
    );
    assert_eq!(
        consistency_proof(3, 5, &only_leaves),
        Err("node (level 1, index 0; leaves 0..=1) is missing".into())
    );
    assert!(Frontier::from_nodes(5, &only_leaves).is_err());
    assert_eq!(consistency_proof(5, 5, &|_| None), Ok(Vec::new()));
}

#[test]
fn verification_errors_say_what_did_not_match() {
    let leaves = postings(5);
    let (nodes, _) = stored_tree(&leaves);
    let get = |id: NodeId| nodes.get(&id).copied();
    let root = root_from(5, &get).unwrap();
    let proof = inclusion_proof(2, 5, &get).unwrap();
    let e = verify_inclusion(2, 5, &leaves[2], &proof, &GENESIS).unwrap_err();
    assert!(e.starts_with("the root computed from the proof, "), "{e}");
    assert!(
        e.ends_with(&format!("is not the root given, {}", to_hex(&GENESIS))),
        "{e}"
    );
    let e = verify_inclusion(2, 5, &leaves[2], &proof[..2], &root).unwrap_err();
    assert!(
        e.contains("fewer than leaf 2 of a tree of 5 leaves needs"),
        "{e}"
    );
    let e = verify_inclusion(5, 5, &leaves[2], &proof, &root).unwrap_err();
    assert!(
        e.starts_with("leaf index 5 is not in a tree of 5 leaves"),
        "{e}"
    );
    let first = root_from(3, &get).unwrap();
    let proof = consistency_proof(3, 5, &get).unwrap();
    let e = verify_consistency(3, 5, &GENESIS, &root, &proof).unwrap_err();
    assert!(
        e.starts_with("the first root computed from the proof, "),
        "{e}"
    );
    let e = verify_consistency(3, 5, &first, &GENESIS, &proof).unwrap_err();
    assert!(
        e.starts_with("the second root computed from the proof, "),
        "{e}"
    );
    let e = verify_consistency(3, 5, &first, &root, &[]).unwrap_err();
    assert_eq!(
        e,
        "a consistency proof between different sizes is never empty"
    );
    let e = verify_consistency(3, 3, &first, &root, &[]).unwrap_err();
    assert_eq!(e, "the roots of two trees of the same size differ");
    assert_eq!(verify_consistency(3, 3, &first, &first, &[]), Ok(()));
    assert!(verify_consistency(3, 3, &first, &first, &[first]).is_err());
}

#[test]
fn a_frontier_round_trips_through_its_bytes_and_refuses_a_wrong_length() {
    let leaves = postings(11);
    let (_, frontiers) = stored_tree(&leaves);
    let f = &frontiers[11];
    assert_eq!(f.hashes().len(), 3, "11 = 8 + 2 + 1");
    assert_eq!(Frontier::from_bytes(11, &f.to_bytes()).as_ref(), Ok(f));
    assert_eq!(
        Frontier::from_bytes(11, &[0; 64]),
        Err("the frontier of a tree of 11 leaves is 3 hashes (96 bytes), got 64 bytes".into())
    );
    assert_eq!(Frontier::from_bytes(0, &[]), Ok(Frontier::new()));
}

#[test]
fn an_append_returns_exactly_the_nodes_its_leaf_completes() {
    let leaves = postings(8);
    let mut f = Frontier::new();
    let counts: Vec<usize> = leaves.iter().map(|p| f.append(p).len()).collect();
    assert_eq!(counts, [1, 2, 1, 3, 1, 2, 1, 4]);
    assert_eq!(f.hashes(), [ref_mth(&leaves)]);
    let mut g = Frontier::new();
    let last = leaves.iter().map(|p| g.append(p)).last().unwrap();
    assert_eq!(last[0], ref_leaf(&leaves[7]));
    assert_eq!(last[1], ref_mth(&leaves[6..8]));
    assert_eq!(last[2], ref_mth(&leaves[4..8]));
    assert_eq!(last[3], ref_mth(&leaves));
}

proptest! {
    #[test]
    fn random_appends_keep_the_frontier_s_bytes_faithful_and_its_root_the_reference(
        leaves in proptest::collection::vec(any::<[u8; 32]>(), 0..120)
    ) {
        let mut f = Frontier::new();
        for (i, p) in leaves.iter().enumerate() {
            f.append(p);
            prop_assert_eq!(f.size(), i as u64 + 1);
            let back = Frontier::from_bytes(f.size(), &f.to_bytes());
            prop_assert_eq!(back.as_ref(), Ok(&f));
            if i % 16 == 0 {
                prop_assert_eq!(f.root(), Some(ref_mth(&leaves[..=i])));
            }
        }
        let want = (!leaves.is_empty()).then(|| ref_mth(&leaves));
        prop_assert_eq!(f.root(), want);
    }
}

// ---- The posting hash. ----

fn leg(account: &str, direction: Direction, minor: i128, scale: u8) -> PostedLeg {
    PostedLeg {
        account: account.into(),
        direction,
        amount: Amount::from_minor(minor, scale),
    }
}

/// The worked example of docs/verifiable.md.
fn example() -> Posting {
    Posting {
        posting_id: Uuid::parse_str("01a23442-6b11-7682-9590-2608c7df6df2").unwrap(),
        sequence: 1,
        caller: "alice".into(),
        idempotency_key: "topup-1001".into(),
        legs: vec![
            leg("cash:eur", Direction::Debit, 10050, 2),
            leg("wallet:alice", Direction::Credit, 10050, 2),
        ],
        effective_at: datetime!(2027-01-05 14:02:00 UTC),
        recorded_at: datetime!(2027-01-05 14:02:00.123456 UTC),
        memo: "top-up".into(),
        metadata: [("order", "1001"), ("channel", "web")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        voids_posting_id: None,
        voided_by_posting_id: None,
        hash: None,
        void_reason: None,
        hold: None,
        closes: None,
    }
}

fn hash_of(p: &Posting) -> Hash {
    posting_hash("default", &GENESIS, &PostingAtRecording::of(p))
}

#[test]
fn every_field_at_recording_changes_the_hash() {
    let base = example();
    let h = hash_of(&base);
    type Change = Box<dyn Fn(&mut Posting)>;
    let changes: Vec<(&str, Change)> = vec![
        ("memo", Box::new(|p| p.memo.push('!'))),
        (
            "an amount",
            Box::new(|p| p.legs[0].amount = Amount::from_minor(10051, 2)),
        ),
        (
            "an amount's scale",
            Box::new(|p| p.legs[0].amount = Amount::from_minor(1005, 1)),
        ),
        (
            "a leg's account",
            Box::new(|p| p.legs[1].account = "wallet:bob".into()),
        ),
        (
            "a leg's side",
            Box::new(|p| p.legs[0].direction = Direction::Credit),
        ),
        ("the legs' order", Box::new(|p| p.legs.swap(0, 1))),
        (
            "effective_at",
            Box::new(|p| p.effective_at += time::Duration::microseconds(1)),
        ),
        (
            "recorded_at",
            Box::new(|p| p.recorded_at -= time::Duration::seconds(1)),
        ),
        (
            "a metadata value",
            Box::new(|p| {
                p.metadata.insert("order".into(), "1002".into());
            }),
        ),
        (
            "a metadata key",
            Box::new(|p| {
                let v = p.metadata.remove("order").unwrap();
                p.metadata.insert("orders".into(), v);
            }),
        ),
        (
            "a metadata entry more",
            Box::new(|p| {
                p.metadata.insert("x".into(), String::new());
            }),
        ),
        ("the caller", Box::new(|p| p.caller = "bob".into())),
        (
            "the key",
            Box::new(|p| p.idempotency_key = "topup-1002".into()),
        ),
        ("the id", Box::new(|p| p.posting_id = Uuid::from_u128(1))),
        ("the sequence", Box::new(|p| p.sequence = 2)),
        (
            "a void",
            Box::new(|p| {
                p.voids_posting_id = Some(Uuid::from_u128(7));
                p.void_reason = Some("typo".into());
            }),
        ),
        ("a hold", Box::new(|p| p.hold = Some(HoldState::default()))),
    ];
    let mut seen = vec![h];
    for (what, change) in changes {
        let mut p = base.clone();
        change(&mut p);
        let h2 = hash_of(&p);
        assert!(!seen.contains(&h2), "changing {what} changes the hash");
        seen.push(h2);
    }
    let at = PostingAtRecording::of(&base);
    assert_ne!(posting_hash("acme", &GENESIS, &at), h, "the ledger");
    assert_ne!(posting_hash("default", &[1; 32], &at), h, "prev");
}

#[test]
fn metadata_order_and_later_state_leave_the_hash_as_it_was() {
    let base = example();
    let mut other = base.clone();
    other.metadata = [("channel", "web"), ("order", "1001")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into_iter()
        .collect::<Metadata>();
    assert_eq!(hash_of(&other), hash_of(&base), "metadata insertion order");
    let mut later = base.clone();
    later.voided_by_posting_id = Some(Uuid::from_u128(9));
    assert_eq!(hash_of(&later), hash_of(&base), "voided later");
    let mut hold = base.clone();
    hold.hold = Some(HoldState::default());
    let mut closed = hold.clone();
    closed.hold = Some(HoldState {
        expires_at: None,
        closed_by: Some((Uuid::from_u128(3), CloseKind::Capture)),
        lapsed: true,
    });
    assert_eq!(hash_of(&closed), hash_of(&hold), "a hold's later status");
    let mut stored = base.clone();
    stored.sequence = (3 << crate::limits::SEQUENCE_BITS) | 1;
    assert_eq!(
        hash_of(&stored),
        hash_of(&base),
        "the stored sequence of ledger 3"
    );
    let mut nanos = base.clone();
    nanos.recorded_at += time::Duration::nanoseconds(999);
    assert_eq!(
        hash_of(&nanos),
        hash_of(&base),
        "nanoseconds below a microsecond"
    );
}

#[test]
fn times_are_whole_microseconds_truncated_toward_negative_infinity() {
    let epoch = OffsetDateTime::UNIX_EPOCH;
    assert_eq!(micros(epoch + time::Duration::nanoseconds(1_999)), 1);
    assert_eq!(micros(epoch - time::Duration::nanoseconds(1)), -1);
    assert_eq!(micros(epoch - time::Duration::nanoseconds(1_000)), -1);
    assert_eq!(micros(epoch - time::Duration::nanoseconds(1_001)), -2);
    assert_eq!(
        micros(datetime!(2027-01-05 14:02:00.123456 UTC)),
        1_799_157_720_123_456
    );
}

#[test]
fn kinds_holds_voids_and_closes_are_encoded_in_their_own_fields() {
    let mut hold = example();
    let at = datetime!(2027-01-06 00:00:00 UTC);
    hold.hold = Some(HoldState {
        expires_at: Some(at),
        ..HoldState::default()
    });
    let bytes = encode("default", &GENESIS, &PostingAtRecording::of(&hold));
    let mut tail = Vec::new();
    tail.extend_from_slice(&4u32.to_be_bytes());
    tail.extend_from_slice(b"hold");
    tail.extend_from_slice(&[0x00, 0x00, 0x01]);
    tail.extend_from_slice(&micros(at).to_be_bytes());
    tail.push(0x00);
    assert!(
        bytes.ends_with(&tail),
        "kind, no void, no reason, expiry, closes nothing"
    );
    let mut release = example();
    let held = Uuid::from_u128(5);
    release.voids_posting_id = Some(held);
    release.void_reason = Some(String::new());
    release.closes = Some(Closes {
        hold: held,
        kind: CloseKind::Release,
    });
    let bytes = encode("default", &GENESIS, &PostingAtRecording::of(&release));
    let mut tail = Vec::new();
    tail.extend_from_slice(&7u32.to_be_bytes());
    tail.extend_from_slice(b"release");
    tail.push(0x01);
    tail.extend_from_slice(held.as_bytes());
    tail.extend_from_slice(&[0x01, 0, 0, 0, 0, 0x00, 0x01]);
    tail.extend_from_slice(held.as_bytes());
    assert!(
        bytes.ends_with(&tail),
        "kind, void, empty reason, no expiry, closes"
    );
    let mut no_reason = release.clone();
    no_reason.void_reason = None;
    assert_eq!(
        hash_of(&no_reason),
        hash_of(&release),
        "GetPosting shows both as \"\""
    );
}

#[test]
fn hashes_print_as_64_hex_digits_and_read_back_in_either_case() {
    let h = hash_of(&example());
    let hex = to_hex(&h);
    assert_eq!(hex.len(), 64);
    assert_eq!(from_hex(&hex), Ok(h));
    assert_eq!(from_hex(&hex.to_uppercase()), Ok(h));
    assert_eq!(
        from_hex("abc"),
        Err("a hash is 64 hexadecimal characters, got 3".into())
    );
    let bad = format!("{}g", &hex[..63]);
    assert_eq!(
        from_hex(&bad),
        Err("character 'g' at position 63 of a hash is not a hexadecimal digit".into())
    );
    let accent = format!("é{}", &hex[..63]);
    assert_eq!(
        from_hex(&accent),
        Err("character 'é' at position 0 of a hash is not a hexadecimal digit".into())
    );
}

// ---- The document cannot drift. ----

/// The lines of the doc's fenced block after `marker`, up to the closing fence.
fn block_after<'a>(marker: &str) -> Vec<&'a str> {
    let start = DOC
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in the doc"));
    DOC[start..]
        .lines()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect()
}

#[test]
fn the_worked_example_in_docs_verifiable_md_is_the_code_s_encoding_and_hash() {
    let p = example();
    let bytes = encode("default", &GENESIS, &PostingAtRecording::of(&p));
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let hash = to_hex(&hash_of(&p));
    assert!(
        DOC.contains(&format!("echo -n '{hex}' | xxd -r -p | sha256sum")),
        "{hex}"
    );
    assert!(DOC.contains(&format!("{hash}  -")), "{hash}");
    let per_field: String = block_after("<!-- encoding per field -->")
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(per_field, hex, "the per-field split joins to the encoding");
}

#[test]
fn the_small_tree_in_docs_verifiable_md_is_the_code_s() {
    let leaves: Vec<Hash> = (1..=5u8).map(|b| [b; 32]).collect();
    let (nodes, _) = stored_tree(&leaves);
    let get = |id: NodeId| nodes.get(&id).copied();
    let mut want = Vec::new();
    for (i, p) in leaves.iter().enumerate() {
        want.push(format!("L{i} = {}", to_hex(&leaf_hash(p))));
    }
    for (name, a, b) in [("N01", 0, 2), ("N23", 2, 4), ("N0123", 0, 4)] {
        want.push(format!("{name} = {}", to_hex(&ref_mth(&leaves[a..b]))));
    }
    for n in [3, 5] {
        want.push(format!(
            "root{n} = {}",
            to_hex(&root_from(n, &get).unwrap())
        ));
    }
    let block = block_after("<!-- small tree -->");
    for w in &want {
        assert!(block.contains(&w.as_str()), "{w}");
    }
    let path = inclusion_proof(2, 5, &get).unwrap();
    assert_eq!(
        path,
        [
            leaf_hash(&leaves[3]),
            ref_mth(&leaves[..2]),
            leaf_hash(&leaves[4])
        ]
    );
    let proof = consistency_proof(3, 5, &get).unwrap();
    assert_eq!(
        proof,
        [
            leaf_hash(&leaves[2]),
            leaf_hash(&leaves[3]),
            ref_mth(&leaves[..2]),
            leaf_hash(&leaves[4])
        ]
    );
}
