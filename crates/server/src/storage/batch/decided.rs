//! The keys of a batch: which it claimed, and the decisions of those decided earlier (their
//! postings, rejections and account versions, read back to be replayed).

use crate::storage::read::{postings_by_sequence, stored_rejection};
use crate::storage::terms::{keyed_version, VERSION_BY_KEY_SQL};
use crate::storage::StorageError;
use ledger_core::ledger::LedgerId;
use ledger_core::posting::Fingerprint;
use ledger_core::record::Posting;
use ledger_core::terms::AccountVersion;
use ledger_core::write::{Done, KeyState, Operation, StoredDecision, WriteRequest};
use ledger_core::LedgerError;
use std::collections::HashMap;
use tokio_postgres::Row;

/// The stored decision of keys decided before this batch (run only when the claim left some
/// keys unclaimed).
const DECIDED_SQL: &str =
    "SELECT u.n, k.key_id, k.operation, k.fingerprint, p.sequence, r.reason, r.message, r.metadata
     FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(c, k, n)
     JOIN idempotency_keys k ON k.ledger_id = $3 AND k.caller = u.c AND k.idempotency_key = u.k
     LEFT JOIN postings p ON p.key_id = k.key_id
     LEFT JOIN rejections r ON r.ledger_id = $3 AND r.caller = u.c AND r.idempotency_key = u.k
     ORDER BY u.n";

/// The number of each key this batch claimed (`None`: decided earlier), in key order.
pub(super) fn claimed_keys(claim: &[Row], keys: usize) -> Vec<Option<i64>> {
    assert!(claim.len() <= keys, "at most one claim row per key");
    let mut claimed: Vec<Option<i64>> = vec![None; keys];
    for row in claim {
        let n: i64 = row.get("n");
        assert!(
            n >= 1 && n as usize <= keys,
            "claim row {n} names a key of the batch"
        );
        let slot = &mut claimed[n as usize - 1];
        assert!(slot.is_none(), "key {n} claimed twice");
        *slot = Some(row.get("key_id"));
    }
    claimed
}

/// Each key's state: claimed now, or its decision stored earlier (one more round trip, only
/// when the batch has keys decided earlier).
pub(super) async fn key_states(
    client: &deadpool_postgres::Client,
    ledger: LedgerId,
    requests: &[WriteRequest],
    firsts: &[usize],
    claimed: &[Option<i64>],
) -> Result<Vec<KeyState>, StorageError> {
    let unclaimed: Vec<usize> = firsts
        .iter()
        .zip(claimed)
        .filter(|(_, c)| c.is_none())
        .map(|(&i, _)| i)
        .collect();
    let rows = if unclaimed.is_empty() {
        Vec::new()
    } else {
        let c: Vec<&str> = unclaimed
            .iter()
            .map(|&i| requests[i].caller.as_str())
            .collect();
        let k: Vec<&str> = unclaimed
            .iter()
            .map(|&i| requests[i].command.key())
            .collect();
        let st = client.prepare_cached(DECIDED_SQL).await?;
        client.query(&st, &[&c, &k, &ledger]).await?
    };
    assert_eq!(
        rows.len(),
        unclaimed.len(),
        "a key that conflicted must exist"
    );
    let seqs: Vec<i64> = rows
        .iter()
        .filter_map(|r| r.get::<_, Option<i64>>("sequence"))
        .collect();
    let (mut postings, mut bad) = load_postings_tolerant(client, &seqs).await?;
    let mut versions = versions_by_key(client, &rows).await?;
    let close_keys: Vec<i64> = rows
        .iter()
        .filter(|r| r.get::<_, &str>("operation") == Operation::Close.as_str())
        .map(|r| r.get("key_id"))
        .collect();
    let mut closes = crate::storage::closes::by_key(client, &close_keys).await?;
    let mut rows = rows.iter().enumerate();
    Ok(claimed
        .iter()
        .zip(firsts)
        .map(|(c, &i)| match c {
            Some(key_id) => KeyState::Claimed(*key_id),
            None => {
                let (j, row) = rows.next().expect("a decision row per unclaimed key");
                assert_eq!(
                    row.get::<_, i64>("n"),
                    j as i64 + 1,
                    "decision rows in order"
                );
                let found = Named {
                    postings: &mut postings,
                    bad: &mut bad,
                    versions: &mut versions,
                    closes: &mut closes,
                };
                stored_decision(row, requests[i].command.key(), found)
            }
        })
        .collect())
}

/// A key's stored decision, or the refusal when it cannot be read.
fn stored_decision(row: &Row, key: &str, found: Named) -> KeyState {
    let key_id: i64 = row.get("key_id");
    let outcome = match (
        row.get::<_, Option<i64>>("sequence"),
        found.versions.remove(&key_id),
    ) {
        (_, Some(Err(e))) => return KeyState::Unreadable(e),
        (_, Some(Ok(v))) => Ok(Done::Version(v)),
        (None, None) if found.closes.contains_key(&key_id) => {
            Ok(Done::Close(found.closes.remove(&key_id).expect("a close")))
        }
        (Some(seq), None) => match found.bad.get(&seq) {
            Some(e) => return KeyState::Unreadable(e.clone()),
            None => Ok(Done::Posting(
                found
                    .postings
                    .remove(&seq)
                    .expect("replayed posting loaded"),
            )),
        },
        (None, None) => match stored_rejection(
            key,
            row.get("reason"),
            row.get("message"),
            row.get("metadata"),
        ) {
            Ok(rejection) => Err(rejection),
            Err(e) => return KeyState::Unreadable(e.into_ledger_error()),
        },
    };
    let operation = row.get::<_, &str>("operation");
    let operation = Operation::parse(operation)
        .unwrap_or_else(|| panic!("stored operation {operation:?} (a CHECK constraint)"));
    let fingerprint: Fingerprint = row
        .get::<_, &[u8]>("fingerprint")
        .try_into()
        .expect("a 32-byte fingerprint (a CHECK constraint)");
    KeyState::Decided(Box::new(StoredDecision {
        operation,
        fingerprint,
        outcome,
    }))
}

/// Postings by sequence; those that break an invariant come back apart, as the refusal of
/// the requests that touch them.
async fn load_postings_tolerant(
    client: &deadpool_postgres::Client,
    sequences: &[i64],
) -> Result<(HashMap<i64, Posting>, HashMap<i64, LedgerError>), StorageError> {
    let mut left = sequences.to_vec();
    let mut bad = HashMap::new();
    loop {
        match postings_by_sequence(client, &left).await {
            Ok(ps) => {
                let good = ps.into_iter().map(|p| (p.sequence as i64, p)).collect();
                return Ok((good, bad));
            }
            Err(StorageError::Corrupt {
                row,
                sequence: Some(s),
                detail,
            }) if left.contains(&s) => {
                left.retain(|&x| x != s);
                let e = StorageError::Corrupt {
                    row,
                    sequence: Some(s),
                    detail,
                };
                bad.insert(s, e.into_ledger_error());
            }
            Err(e) => return Err(e),
        }
    }
}

/// The versions recorded under the keys of decision rows whose operation is an update, by
/// key number (one more round trip, only when there are any).
async fn versions_by_key(
    client: &deadpool_postgres::Client,
    rows: &[Row],
) -> Result<HashMap<i64, Result<AccountVersion, LedgerError>>, StorageError> {
    let keys: Vec<i64> = rows
        .iter()
        .filter(|r| r.get::<_, &str>("operation") == Operation::Update.as_str())
        .map(|r| r.get("key_id"))
        .collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let st = client.prepare_cached(&VERSION_BY_KEY_SQL).await?;
    let found = client.query(&st, &[&keys]).await?;
    let mut out = HashMap::new();
    for r in &found {
        let key_id: i64 = r.get("key_id");
        out.insert(key_id, keyed_version(r).map_err(|e| e.into_ledger_error()));
    }
    Ok(out)
}

/// What decided keys' rows name, loaded.
struct Named<'a> {
    postings: &'a mut HashMap<i64, Posting>,
    bad: &'a mut HashMap<i64, LedgerError>,
    versions: &'a mut HashMap<i64, Result<AccountVersion, LedgerError>>,
    closes: &'a mut HashMap<i64, ledger_core::period::PeriodClose>,
}
