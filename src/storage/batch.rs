//! The writer's batch transaction: claim every idempotency key with one `INSERT … ON CONFLICT
//! DO NOTHING` (the UNIQUE constraint decides which requests are new), take the ledger's
//! advisory lock, read the totals of the batch's accounts (their rules come from the lane's
//! [`AccountCache`]), decide the new requests in order against balances held in memory, then
//! write postings, legs, rejections, outbox rows and totals with one statement per table,
//! and commit once. Nothing is answered before the commit.
//!
//! Plans: every statement here that reads a growing table is planned for each execution, for
//! the tables as they are then (the pool's connections run with
//! `plan_cache_mode=force_custom_plan`, see [`super::pool_as`]). A generic plan cached while a
//! table was small keeps its sequential scan after the table has grown: measured, the claim's
//! cached plan (when it still read earlier decisions) scanned all 99,171 keys on every batch,
//! and throughput fell from 10,000 to 4,300 postings/s within 20 s of a fresh start. The
//! statements that read no growing table run on generic plans (see `GENERIC_PLANS`).
//! The statements are shaped so that planning stays cheap: arrays are joined through `unnest`
//! (not `= ANY` over a long array, whose selectivity the planner estimates element by element),
//! and the lookup of keys decided earlier runs only for the keys the claim did not take.

use super::accounts::{account_from_row, metadata_to_json};
use super::read::{direction_to_sql, postings_by_sequence, stored_rejection};
use super::{StorageError, LEDGER_WRITE_LOCK};
use crate::domain::amount::{parse_stored, Amount};
use crate::domain::engine::{Engine, Rule, Totals};
use crate::domain::posting::{check_balanced, Fingerprint, Leg, ValidPost, ValidVoid};
use crate::domain::record::{Decided, PostedLeg, Posting};
use crate::domain::{Account, LedgerError, Metadata, Reason};
use std::collections::HashMap;
use time::{Duration, OffsetDateTime};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

/// What a caller asked the writer to do.
#[derive(Clone, Debug)]
pub enum Command {
    Post(ValidPost),
    Void(ValidVoid),
}

impl Command {
    fn key(&self) -> &str {
        match self {
            Command::Post(p) => &p.idempotency_key,
            Command::Void(v) => &v.idempotency_key,
        }
    }
    fn operation(&self) -> &'static str {
        match self {
            Command::Post(_) => "post",
            Command::Void(_) => "void",
        }
    }
    fn fingerprint(&self) -> &Fingerprint {
        match self {
            Command::Post(p) => &p.fingerprint,
            Command::Void(v) => &v.fingerprint,
        }
    }
}

/// One request in a batch.
#[derive(Clone, Debug)]
pub struct WriteRequest {
    pub caller: String,
    pub command: Command,
}

/// The answer to one request.
pub type Outcome = Result<Decided, LedgerError>;

/// How a key was decided: by which operation and fingerprint, with what outcome.
struct Decision<'a> {
    operation: std::borrow::Cow<'a, str>,
    fingerprint: std::borrow::Cow<'a, [u8]>,
    /// Index of the request in this batch that decided the key now (None: decided earlier).
    decided_by: Option<usize>,
    outcome: Result<Posting, LedgerError>,
}

/// Applies a batch in one transaction. Returns one outcome per request, in order, only after
/// the commit succeeded. Any error means nothing of the batch may be assumed (the commit's
/// fate may be unknown): every caller must be told `UNAVAILABLE`. On error the transaction is
/// rolled back (best effort) so the connection can be reused.
///
/// Round trips: the statements are prepared once per connection (`prepare_cached`), and sent
/// pipelined: `BEGIN`, the lock, the state, the key claim (which also reads the stored decision
/// of every key already decided) and the accounts go in one round trip; the writes and `COMMIT`
/// in a second. Replays and voids add one round trip each, only when the batch has them.
pub async fn apply(
    client: &mut deadpool_postgres::Client,
    requests: &[WriteRequest],
) -> Result<Vec<Outcome>, StorageError> {
    apply_cached(client, requests, &mut AccountCache::default()).await
}

/// Like [`apply`], with the accounts' rules kept in `cache` across batches (the writer's lanes
/// keep one each).
pub async fn apply_cached(
    client: &mut deadpool_postgres::Client,
    requests: &[WriteRequest],
    cache: &mut AccountCache,
) -> Result<Vec<Outcome>, StorageError> {
    assert!(!requests.is_empty(), "empty batch");
    // The requests that touch a corrupt journal row are refused and the batch runs again
    // without them (their keys were claimed in the rolled-back transaction, so the refusal
    // binds nothing). Each round refuses at least one request, so this ends.
    let mut refused: HashMap<usize, LedgerError> = HashMap::new();
    loop {
        let live: Vec<usize> = (0..requests.len())
            .filter(|i| !refused.contains_key(i))
            .collect();
        if live.is_empty() {
            return Ok(merge(requests.len(), Vec::new(), &live, refused));
        }
        let batch: std::borrow::Cow<[WriteRequest]> = if refused.is_empty() {
            std::borrow::Cow::Borrowed(requests)
        } else {
            live.iter().map(|&i| requests[i].clone()).collect()
        };
        let result = apply_in_transaction(client, &batch, cache).await;
        match result {
            Ok(Applied::Committed(outcomes)) => {
                return Ok(merge(requests.len(), outcomes, &live, refused))
            }
            Ok(Applied::Corrupt(bad)) => {
                let _ = client.batch_execute("ROLLBACK").await;
                assert!(!bad.is_empty(), "a corrupt round refuses a request");
                refused.extend(bad.into_iter().map(|(j, e)| (live[j], e)));
            }
            Err(e) => {
                // The transaction may still be open (aborted): end it so the connection is
                // clean.
                let _ = client.batch_execute("ROLLBACK").await;
                return Err(e);
            }
        }
    }
}

/// The outcomes of `live` requests (in order) and the `refused` ones, by request index.
fn merge(
    n: usize,
    outcomes: Vec<Outcome>,
    live: &[usize],
    mut refused: HashMap<usize, LedgerError>,
) -> Vec<Outcome> {
    assert_eq!(outcomes.len(), live.len(), "one outcome per live request");
    let mut by_index: HashMap<usize, Outcome> = live.iter().copied().zip(outcomes).collect();
    (0..n)
        .map(|i| match refused.remove(&i) {
            Some(e) => Err(e),
            None => by_index.remove(&i).expect("an outcome for every request"),
        })
        .collect()
}

/// How a batch transaction ended without a storage failure.
enum Applied {
    /// Committed: one outcome per request, in order.
    Committed(Vec<Outcome>),
    /// Not committed (the caller rolls back): these requests (by index) touch journal rows
    /// that break an invariant, and are refused with `JOURNAL_CORRUPT`.
    Corrupt(Vec<(usize, LedgerError)>),
}

/// Accounts kept at most in an [`AccountCache`] (limit ACCOUNT_CACHE_MAX); when full it is
/// emptied and refilled from the batches that follow.
pub const ACCOUNT_CACHE_MAX: usize = 100_000;

/// The rules of accounts (code, currency, scale, normal balance, negativity) by id. Accounts are
/// never updated (a trigger refuses it), so an entry never goes stale; a batch reads the rules
/// only of the accounts the cache does not hold, and the totals of all of them.
#[derive(Default)]
pub struct AccountCache {
    rules: HashMap<i64, Rule>,
}

impl AccountCache {
    /// Makes room for a batch naming `accounts` accounts: empties the cache when it could
    /// otherwise grow past ACCOUNT_CACHE_MAX (never during a batch, whose rules it must hold).
    fn make_room(&mut self, accounts: usize) {
        if self.rules.len() + accounts > ACCOUNT_CACHE_MAX {
            self.rules.clear();
        }
    }
}

fn rule_of(a: &Account) -> Rule {
    Rule {
        code: a.code.clone(),
        currency: a.currency.clone(),
        scale: a.scale,
        normal_balance: a.normal_balance,
        allow_negative: a.allow_negative,
    }
}

/// Opens the batch transaction. If the writer's connection goes silent mid-batch (a network
/// black hole), the server ends the transaction by itself after
/// `idle_in_transaction_session_timeout` (limit `BATCH_IDLE_TIMEOUT`), releasing the ledger's
/// write lock for the next batch on a fresh connection.
///
/// It also switches the transaction to generic plans ([`GENERIC_PLANS`]) for the claim, the
/// lock and the state row that follow; [`CUSTOM_PLANS`] switches back before any statement
/// that reads a growing table.
const BEGIN_SQL: &str = "BEGIN; SET LOCAL idle_in_transaction_session_timeout = '15s'; SET LOCAL plan_cache_mode = force_generic_plan";

/// Plans: statements that read no growing table (the claim, whose only reads are its own
/// arguments and rows; the legs, rejections and outbox inserts from `unnest`, which no foreign
/// key checks; the one-row `ledger_state`) run on a plan made once per connection, as nothing
/// in it can go stale. Each statement that reads a growing table (totals, accounts, earlier
/// decisions, the totals update, and the postings insert, whose void foreign key reads
/// `postings`) runs after [`CUSTOM_PLANS`], planned for the tables as they are. Measured at
/// `ledger bench --rate 1000`: planning the claim and the inserts on every batch cost about
/// 0.3 ms of a 1.9 ms batch.
const GENERIC_PLANS: &str = "SET LOCAL plan_cache_mode = force_generic_plan";
/// Back to the connection's default: a plan for each execution (see [`super::pool_as`]).
const CUSTOM_PLANS: &str = "SET LOCAL plan_cache_mode = force_custom_plan";

/// Claims the batch's keys: returns the position (1-based) and the key number of every key this
/// insert claimed (a posting names its key by that number), inserting in (caller, key) order
/// (a canonical order, so concurrent claims cannot deadlock).
/// A key it did not claim was decided earlier; [`DECIDED_SQL`] reads that decision.
const CLAIM_SQL: &str = "WITH u AS (
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) WITH ORDINALITY AS u(c, k, o, f, n)),
     ins AS (
        INSERT INTO idempotency_keys (caller, idempotency_key, operation, fingerprint, decided_at)
        SELECT c, k, o, f, clock_timestamp() FROM u ORDER BY c, k
        ON CONFLICT ON CONSTRAINT idempotency_keys_unique DO NOTHING
        RETURNING caller, idempotency_key, key_id)
     SELECT u.n, ins.key_id FROM u JOIN ins ON ins.caller = u.c AND ins.idempotency_key = u.k
     ORDER BY u.n";

/// The stored decision of keys decided before this batch (run only when the claim left some
/// keys unclaimed).
const DECIDED_SQL: &str =
    "SELECT u.n, k.operation, k.fingerprint, p.sequence, r.reason, r.message, r.metadata
     FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(c, k, n)
     JOIN idempotency_keys k ON k.caller = u.c AND k.idempotency_key = u.k
     LEFT JOIN postings p ON p.key_id = k.key_id
     LEFT JOIN rejections r ON r.caller = u.c AND r.idempotency_key = u.k
     ORDER BY u.n";

/// The batch's new totals, one row per account touched.
const TOTALS_UPDATE_SQL: &str = "UPDATE account_totals t SET debits = u.d::numeric, credits = u.c::numeric, version = u.v, last_sequence = u.s
     FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS u(id, d, c, v, s)
     WHERE t.account_id = u.id";

/// The totals of the accounts named by the batch's posts (ids distinct).
const TOTALS_SQL: &str =
    "SELECT t.account_id, t.debits::text AS debits, t.credits::text AS credits, t.version
     FROM unnest($1::bigint[]) AS x(id) JOIN account_totals t ON t.account_id = x.id";

/// The accounts whose rules the lane's cache does not hold yet (sent only when there are any).
const ACCOUNTS_SQL: &str = "SELECT a.account_id, a.code, a.currency, a.scale, a.normal_balance, a.allow_negative, a.metadata, a.created_at
     FROM unnest($1::bigint[]) AS x(id) JOIN accounts a ON a.account_id = x.id";

/// The accounts of the postings the batch's voids target (sent only when there are voids).
const TARGET_ACCOUNTS_SQL: &str = "SELECT a.account_id, a.code, a.currency, a.scale, a.normal_balance, a.allow_negative, a.metadata, a.created_at,
            t.debits::text AS debits, t.credits::text AS credits, t.version
     FROM accounts a JOIN account_totals t USING (account_id)
     WHERE a.account_id IN (
        SELECT e.account_id FROM unnest($1::uuid[]) AS x(id)
        JOIN postings p ON p.posting_id = x.id JOIN entries e USING (sequence))";

async fn apply_in_transaction(
    client: &mut deadpool_postgres::Client,
    requests: &[WriteRequest],
    cache: &mut AccountCache,
) -> Result<Applied, StorageError> {
    let t0 = std::time::Instant::now();
    let mut marks: Vec<(&str, u128)> = Vec::new();
    let (lock_st, state_st, claim_st, totals_st, accounts_st, targets_st) = futures_util::try_join!(
        client.prepare_cached("SELECT pg_advisory_xact_lock($1)"),
        client.prepare_cached(
            "SELECT last_sequence, last_recorded_at, clock_timestamp() AS now FROM ledger_state WHERE ledger_id = 1 FOR UPDATE"
        ),
        client.prepare_cached(CLAIM_SQL),
        client.prepare_cached(TOTALS_SQL),
        client.prepare_cached(ACCOUNTS_SQL),
        client.prepare_cached(TARGET_ACCOUNTS_SQL),
    )?;

    // The first request of each (caller, key) goes to the database; later ones in the batch
    // are answered from it.
    let mut first: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, r) in requests.iter().enumerate() {
        first
            .entry((r.caller.as_str(), r.command.key()))
            .or_insert(i);
    }
    let mut firsts: Vec<usize> = first.values().copied().collect();
    firsts.sort_unstable();
    let callers: Vec<&str> = firsts
        .iter()
        .map(|&i| requests[i].caller.as_str())
        .collect();
    let keys: Vec<&str> = firsts.iter().map(|&i| requests[i].command.key()).collect();
    let ops: Vec<&str> = firsts
        .iter()
        .map(|&i| requests[i].command.operation())
        .collect();
    let fps: Vec<&[u8]> = firsts
        .iter()
        .map(|&i| requests[i].command.fingerprint().as_slice())
        .collect();
    // Every account a request may touch: the legs of posts, the legs of void targets.
    let mut ids: Vec<i64> = Vec::new();
    let mut void_targets: Vec<Uuid> = Vec::new();
    for &i in &firsts {
        match &requests[i].command {
            Command::Post(p) => ids.extend(p.legs.iter().map(|l| l.account_id)),
            Command::Void(v) => void_targets.push(v.target),
        }
    }
    ids.sort_unstable();
    ids.dedup();

    // One round trip: BEGIN, claim, lock, state, accounts, run in this order. The claim comes
    // before the lock, so it runs while another batch holds the lock (on another core); a key
    // that batch has inserted but not committed makes the claim wait for its commit and then
    // conflict. Keys are inserted in (caller, key) order, so two claims never wait on each other
    // in a cycle. The state and the accounts are read with snapshots taken after the lock, so
    // they see every earlier batch.
    let client_ref: &deadpool_postgres::Client = client;
    let begin = client_ref.batch_execute(BEGIN_SQL);
    let lock_params: [&(dyn ToSql + Sync); 1] = [&LEDGER_WRITE_LOCK];
    let claim_params: [&(dyn ToSql + Sync); 4] = [&callers, &keys, &ops, &fps];
    cache.make_room(ids.len());
    let uncached: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|id| !cache.rules.contains_key(id))
        .collect();
    let totals_params: [&(dyn ToSql + Sync); 1] = [&ids];
    let account_params: [&(dyn ToSql + Sync); 1] = [&uncached];
    let target_params: [&(dyn ToSql + Sync); 1] = [&void_targets];
    let claim = client_ref.query(&claim_st, &claim_params);
    let lock = client_ref.execute(&lock_st, &lock_params);
    let state = client_ref.query(&state_st, &[]);
    let custom_plans = client_ref.batch_execute(CUSTOM_PLANS);
    let totals_read = client_ref.query(&totals_st, &totals_params);
    let accounts = async {
        if uncached.is_empty() {
            return Ok(Vec::new());
        }
        client_ref.query(&accounts_st, &account_params).await
    };
    let target_accounts = async {
        if void_targets.is_empty() {
            return Ok(Vec::new());
        }
        client_ref.query(&targets_st, &target_params).await
    };
    let (_, claim_rows, _, state, _, totals_rows, account_rows, target_account_rows) = futures_util::try_join!(
        begin,
        claim,
        lock,
        state,
        custom_plans,
        totals_read,
        accounts,
        target_accounts
    )?;
    marks.push(("read", t0.elapsed().as_micros()));
    assert_eq!(state.len(), 1, "ledger_state holds one row");
    let state = &state[0];
    let last_sequence: i64 = state.get("last_sequence");
    let last_recorded: OffsetDateTime = state.get("last_recorded_at");
    let now: OffsetDateTime = state.get("now");
    // Strictly after the clock any fenced reader saw, and after the last batch.
    let base = (now + Duration::microseconds(1)).max(last_recorded + Duration::microseconds(1));

    assert!(
        claim_rows.len() <= firsts.len(),
        "at most one claim row per key"
    );
    // The number of each key this batch claimed (None: decided earlier), in key order.
    let mut claimed: Vec<Option<i64>> = vec![None; firsts.len()];
    for row in &claim_rows {
        let n: i64 = row.get("n");
        assert!(
            n >= 1 && n as usize <= firsts.len(),
            "claim row {n} names a key of the batch"
        );
        let slot = &mut claimed[n as usize - 1];
        assert!(slot.is_none(), "key {n} claimed twice");
        *slot = Some(row.get("key_id"));
    }
    let mut decisions: HashMap<(&str, &str), Decision> = HashMap::new();
    // The requests that claimed their key, with its number.
    let new_idx: Vec<(usize, i64)> = firsts
        .iter()
        .zip(&claimed)
        .filter_map(|(&i, key_id)| key_id.map(|k| (i, k)))
        .collect();
    let unclaimed: Vec<usize> = firsts
        .iter()
        .zip(&claimed)
        .filter(|(_, key_id)| key_id.is_none())
        .map(|(&i, _)| i)
        .collect();

    // Keys decided earlier: their stored decision (one more round trip, only when there are any).
    let decided_rows = if unclaimed.is_empty() {
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
        let decided_st = client_ref.prepare_cached(DECIDED_SQL).await?;
        client_ref.query(&decided_st, &[&c, &k]).await?
    };
    assert_eq!(
        decided_rows.len(),
        unclaimed.len(),
        "a key that conflicted must exist"
    );
    let replayed: Vec<(usize, &tokio_postgres::Row)> = decided_rows
        .iter()
        .enumerate()
        .map(|(j, row)| {
            assert_eq!(
                row.get::<_, i64>("n"),
                j as i64 + 1,
                "decision rows in order"
            );
            (unclaimed[j], row)
        })
        .collect();
    // Requests that touch a journal row breaking an invariant: refused, and the batch runs
    // again without them (see `apply_cached`).
    let mut corrupt: Vec<(usize, LedgerError)> = Vec::new();
    if !replayed.is_empty() {
        let seqs: Vec<i64> = replayed
            .iter()
            .filter_map(|(_, r)| r.get::<_, Option<i64>>("sequence"))
            .collect();
        let (mut postings, bad) = load_postings_tolerant(client_ref, &seqs).await?;
        for (i, r) in replayed {
            let key = requests[i].command.key();
            let outcome = match r.get::<_, Option<i64>>("sequence") {
                Some(seq) => match bad.get(&seq) {
                    Some(e) => Err(e.clone()),
                    None => Ok(Ok(postings.remove(&seq).expect("replayed posting loaded"))),
                },
                None => stored_rejection(key, r.get("reason"), r.get("message"), r.get("metadata"))
                    .map(Err)
                    .map_err(StorageError::into_ledger_error),
            };
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => {
                    corrupt.push((i, e));
                    continue;
                }
            };
            decisions.insert(
                (requests[i].caller.as_str(), key),
                Decision {
                    operation: std::borrow::Cow::Owned(r.get("operation")),
                    fingerprint: std::borrow::Cow::Owned(r.get("fingerprint")),
                    decided_by: None,
                    outcome,
                },
            );
        }
    }

    // New voids: load their targets.
    let target_ids: Vec<Uuid> = new_idx
        .iter()
        .filter_map(|&(i, _)| match &requests[i].command {
            Command::Void(v) => Some(v.target),
            Command::Post(_) => None,
        })
        .collect();
    let (targets, bad_targets) = load_targets(client_ref, &target_ids).await?;
    // Rules: from the cache, from the accounts read now, and from the void targets' accounts
    // (the only accounts a void names by code).
    let mut bad_accounts: HashMap<i64, LedgerError> = HashMap::new();
    let mut by_code: HashMap<String, i64> = HashMap::new();
    for r in &account_rows {
        match account_from_row(r) {
            Ok(a) => {
                cache.rules.insert(a.id, rule_of(&a));
            }
            Err(e) => {
                bad_accounts.insert(r.get("account_id"), e.into_ledger_error());
            }
        }
    }
    for r in &target_account_rows {
        match account_from_row(r) {
            Ok(a) => {
                by_code.insert(a.code.clone(), a.id);
                cache.rules.insert(a.id, rule_of(&a));
            }
            Err(e) => {
                bad_accounts.insert(r.get("account_id"), e.into_ledger_error());
            }
        }
    }
    let mut totals = HashMap::new();
    let mut rules = HashMap::new();
    let totals_of = totals_rows
        .iter()
        .map(|r| (r.get::<_, i64>("account_id"), r))
        .chain(
            target_account_rows
                .iter()
                .map(|r| (r.get::<_, i64>("account_id"), r)),
        );
    for (id, r) in totals_of {
        if bad_accounts.contains_key(&id) {
            continue;
        }
        let rule = cache
            .rules
            .get(&id)
            .unwrap_or_else(|| panic!("account {id} has totals but no rules"))
            .clone();
        match stored_totals(r, &rule) {
            Ok(t) => {
                totals.insert(id, t);
                rules.insert(id, rule);
            }
            Err(e) => {
                bad_accounts.insert(id, e.into_ledger_error());
            }
        }
    }
    for &(i, _) in &new_idx {
        let touched = touches(&requests[i].command, &targets, &by_code, &bad_accounts);
        if let Some(e) = bad_targets.get(&touched.0).or(touched.1) {
            corrupt.push((i, e.clone()));
        }
    }
    if !corrupt.is_empty() {
        return Ok(Applied::Corrupt(corrupt));
    }
    for id in &ids {
        assert!(
            totals.contains_key(id),
            "account {id} of a validated post has no totals row"
        );
    }
    let mut engine = Engine::new(totals, rules);
    marks.push(("accounts", t0.elapsed().as_micros()));

    // Decide the new requests in order.
    let mut rows = Rows::default();
    let mut voided_now: HashMap<Uuid, Uuid> = HashMap::new();
    let mut next_sequence = last_sequence;
    for &(i, key_id) in &new_idx {
        let req = &requests[i];
        let proposal: Result<(Vec<Leg>, NewPosting), LedgerError> = match &req.command {
            Command::Post(p) => Ok((
                p.legs.clone(),
                NewPosting {
                    effective_at: p.effective_at,
                    memo: p.memo.clone(),
                    metadata: p.metadata.clone(),
                    voids: None,
                },
            )),
            Command::Void(v) => {
                let target = targets
                    .get(&v.target)
                    .unwrap_or_else(|| panic!("void target {} was checked to exist", v.target));
                if let Some(of) = target.voids_posting_id {
                    Err(LedgerError::new(
                        Reason::VoidOfVoid,
                        format!(
                            "posting {} is itself a void (of {of}); a void cannot be voided",
                            target.posting_id
                        ),
                    )
                    .with("posting_id", target.posting_id))
                } else if let Some(by) = target
                    .voided_by_posting_id
                    .or_else(|| voided_now.get(&target.posting_id).copied())
                {
                    Err(LedgerError::new(
                        Reason::AlreadyVoided,
                        format!(
                            "posting {} was already voided by posting {by}",
                            target.posting_id
                        ),
                    )
                    .with("posting_id", target.posting_id))
                } else {
                    let legs = target
                        .legs
                        .iter()
                        .map(|l| {
                            let id = by_code[&l.account];
                            let rule = &cache.rules[&id];
                            Leg {
                                account_id: id,
                                account_code: rule.code.clone(),
                                currency: rule.currency.clone(),
                                direction: l.direction.swapped(),
                                amount: l.amount,
                            }
                        })
                        .collect();
                    Ok((
                        legs,
                        NewPosting {
                            effective_at: v.effective_at,
                            memo: String::new(),
                            metadata: Metadata::new(),
                            voids: Some((target.posting_id, v.reason.clone())),
                        },
                    ))
                }
            }
        };
        let decided = proposal.and_then(|(legs, new)| {
            let effects = engine.apply(&legs)?;
            next_sequence += 1;
            let offset = next_sequence - last_sequence - 1;
            let recorded_at = base + Duration::microseconds(offset);
            let posting_id = Uuid::now_v7();
            if let Some((target, _)) = &new.voids {
                voided_now.insert(*target, posting_id);
            }
            let posting = rows.push_posting(
                next_sequence,
                posting_id,
                recorded_at,
                &req.caller,
                req.command.key(),
                key_id,
                &legs,
                &effects,
                new,
            );
            Ok(posting)
        });
        if let Err(e) = &decided {
            assert!(
                e.binds_key(),
                "writer rejection {e} must be state-dependent"
            );
            rows.push_rejection(&req.caller, req.command.key(), e);
        }
        decisions.insert(
            (req.caller.as_str(), req.command.key()),
            Decision {
                operation: std::borrow::Cow::Borrowed(req.command.operation()),
                fingerprint: std::borrow::Cow::Borrowed(req.command.fingerprint().as_slice()),
                decided_by: Some(i),
                outcome: decided,
            },
        );
    }

    // Write the batch: one statement per table, pipelined on the connection.
    let final_totals = engine.into_totals();
    marks.push(("decide", t0.elapsed().as_micros()));
    rows.write(client_ref, &final_totals, next_sequence, base)
        .await?;
    marks.push(("commit", t0.elapsed().as_micros()));
    tracing::debug!(
        batch = requests.len(),
        ?marks,
        "batch timings (µs since start)"
    );

    // Answer every request from its key's decision.
    Ok(Applied::Committed(requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let d = &decisions[&(r.caller.as_str(), r.command.key())];
            if d.decided_by == Some(i) {
                return d.outcome.clone().map(|posting| Decided { posting, replayed: false });
            }
            if d.operation != r.command.operation()
                || *d.fingerprint != *r.command.fingerprint().as_slice()
            {
                return Err(LedgerError::new(
                    Reason::IdempotencyKeyReused,
                    format!(
                        "idempotency key {:?} was already used by caller {:?} for a different {} request; send a new key for a new request",
                        r.command.key(),
                        r.caller,
                        d.operation
                    ),
                )
                .with("idempotency_key", r.command.key()));
            }
            d.outcome.clone().map(|posting| Decided { posting, replayed: true })
        })
        .collect()))
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

/// The targets of the batch's voids by id, and the refusals of those that are corrupt.
async fn load_targets(
    client: &deadpool_postgres::Client,
    ids: &[Uuid],
) -> Result<(HashMap<Uuid, Posting>, HashMap<Uuid, LedgerError>), StorageError> {
    if ids.is_empty() {
        return Ok((HashMap::new(), HashMap::new()));
    }
    let rows = client
        .query(
            "SELECT posting_id, sequence FROM postings WHERE posting_id = ANY($1)",
            &[&ids],
        )
        .await?;
    let id_of: HashMap<i64, Uuid> = rows.iter().map(|r| (r.get(1), r.get(0))).collect();
    let seqs: Vec<i64> = id_of.keys().copied().collect();
    let (good, bad) = load_postings_tolerant(client, &seqs).await?;
    let good = good.into_values().map(|p| (p.posting_id, p)).collect();
    let bad = bad.into_iter().map(|(s, e)| (id_of[&s], e)).collect();
    Ok((good, bad))
}

/// An account's stored totals; ones no writer could have left (negative, or a no-negative
/// account below zero, or more decimals than its scale) are a corrupt row.
fn stored_totals(r: &tokio_postgres::Row, rule: &Rule) -> Result<Totals, StorageError> {
    let corrupt = |e: String| StorageError::corrupt_account(&rule.code, format!("totals: {e}"));
    let t = Totals {
        debits: parse_stored(r.get("debits"), rule.scale).map_err(corrupt)?,
        credits: parse_stored(r.get("credits"), rule.scale).map_err(corrupt)?,
        version: r.get("version"),
    };
    if t.debits < 0 || t.credits < 0 || t.version < 0 {
        return Err(corrupt(format!("negative: {t:?}")));
    }
    if !rule.allow_negative && t.balance(rule.normal_balance) < 0 {
        return Err(corrupt(format!(
            "below zero, which the account forbids: {t:?}"
        )));
    }
    Ok(t)
}

/// What a new request touches: its void target (the nil id for a post) and the refusal of
/// the first corrupt account among its legs (a void's: its target's legs), if any.
fn touches<'a>(
    command: &Command,
    targets: &HashMap<Uuid, Posting>,
    by_code: &HashMap<String, i64>,
    bad_accounts: &'a HashMap<i64, LedgerError>,
) -> (Uuid, Option<&'a LedgerError>) {
    match command {
        Command::Post(p) => (
            Uuid::nil(),
            p.legs.iter().find_map(|l| bad_accounts.get(&l.account_id)),
        ),
        Command::Void(v) => (
            v.target,
            targets.get(&v.target).and_then(|t| {
                t.legs
                    .iter()
                    .filter_map(|l| by_code.get(&l.account))
                    .find_map(|id| bad_accounts.get(id))
            }),
        ),
    }
}

/// A posting being made, before it has a sequence.
struct NewPosting {
    effective_at: Option<OffsetDateTime>,
    memo: String,
    metadata: Metadata,
    voids: Option<(Uuid, String)>,
}

/// Column arrays for the batch's multi-row inserts.
#[derive(Default)]
struct Rows {
    p_seq: Vec<i64>,
    p_id: Vec<Uuid>,
    p_caller: Vec<String>,
    p_key: Vec<String>,
    p_key_id: Vec<i64>,
    p_effective: Vec<OffsetDateTime>,
    p_recorded: Vec<OffsetDateTime>,
    p_memo: Vec<String>,
    p_meta: Vec<serde_json::Value>,
    p_voids: Vec<Option<Uuid>>,
    p_reason: Vec<Option<String>>,
    e_seq: Vec<i64>,
    e_leg: Vec<i16>,
    e_account: Vec<i64>,
    e_dir: Vec<i8>,
    e_amount: Vec<String>,
    e_version: Vec<i64>,
    e_debits: Vec<String>,
    e_credits: Vec<String>,
    e_recorded: Vec<OffsetDateTime>,
    e_effective: Vec<OffsetDateTime>,
    r_caller: Vec<String>,
    r_key: Vec<String>,
    r_reason: Vec<String>,
    r_message: Vec<String>,
    r_metadata: Vec<serde_json::Value>,
    last_seq_of_account: HashMap<i64, i64>,
    scale_of_account: HashMap<i64, u8>,
}

impl Rows {
    #[allow(clippy::too_many_arguments)]
    fn push_posting(
        &mut self,
        sequence: i64,
        posting_id: Uuid,
        recorded_at: OffsetDateTime,
        caller: &str,
        key: &str,
        key_id: i64,
        legs: &[Leg],
        effects: &[crate::domain::engine::LegEffect],
        new: NewPosting,
    ) -> Posting {
        // Before the write: the posting balances and every leg has its effect.
        check_balanced(legs)
            .unwrap_or_else(|e| panic!("unbalanced posting reached the writer: {e}"));
        assert_eq!(legs.len(), effects.len());
        let effective_at = new.effective_at.unwrap_or(recorded_at);
        self.p_seq.push(sequence);
        self.p_id.push(posting_id);
        self.p_caller.push(caller.to_owned());
        self.p_key.push(key.to_owned());
        self.p_key_id.push(key_id);
        self.p_effective.push(effective_at);
        self.p_recorded.push(recorded_at);
        self.p_memo.push(new.memo.clone());
        self.p_meta.push(metadata_to_json(&new.metadata));
        self.p_voids.push(new.voids.as_ref().map(|v| v.0));
        self.p_reason.push(new.voids.as_ref().map(|v| v.1.clone()));
        for (i, (leg, eff)) in legs.iter().zip(effects).enumerate() {
            assert_eq!(leg.account_id, eff.account_id);
            let scale = leg.amount.scale();
            self.e_seq.push(sequence);
            self.e_leg.push(i as i16);
            self.e_account.push(leg.account_id);
            self.e_dir.push(direction_to_sql(leg.direction));
            self.e_amount.push(leg.amount.to_string());
            self.e_version.push(eff.after.version);
            self.e_debits
                .push(Amount::from_minor(eff.after.debits, scale).to_string());
            self.e_credits
                .push(Amount::from_minor(eff.after.credits, scale).to_string());
            self.e_recorded.push(recorded_at);
            self.e_effective.push(effective_at);
            self.last_seq_of_account.insert(leg.account_id, sequence);
            self.scale_of_account.insert(leg.account_id, scale);
        }
        let posting = Posting {
            posting_id,
            sequence: sequence as u64,
            caller: caller.to_owned(),
            idempotency_key: key.to_owned(),
            legs: legs
                .iter()
                .map(|l| PostedLeg {
                    account: l.account_code.clone(),
                    direction: l.direction,
                    amount: l.amount,
                })
                .collect(),
            effective_at,
            recorded_at,
            memo: new.memo,
            metadata: new.metadata,
            voids_posting_id: new.voids.as_ref().map(|v| v.0),
            voided_by_posting_id: None,
            void_reason: new.voids.map(|v| v.1),
        };
        posting.assert_sound();
        posting
    }

    fn push_rejection(&mut self, caller: &str, key: &str, e: &LedgerError) {
        self.r_caller.push(caller.to_owned());
        self.r_key.push(key.to_owned());
        self.r_reason.push(e.reason.as_str().to_owned());
        self.r_message.push(e.message.clone());
        self.r_metadata.push(metadata_to_json(&e.metadata));
    }

    /// Writes the batch and commits: one statement per table, prepared once per connection,
    /// sent pipelined together with `COMMIT` (one round trip). If any statement fails the
    /// transaction is aborted and the `COMMIT` becomes a rollback; the error is returned.
    async fn write(
        &self,
        client: &deadpool_postgres::Client,
        totals: &HashMap<i64, Totals>,
        last_sequence: i64,
        base: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let t_ids: Vec<i64> = self.last_seq_of_account.keys().copied().collect();
        let mut t_debits = Vec::with_capacity(t_ids.len());
        let mut t_credits = Vec::with_capacity(t_ids.len());
        let mut t_version = Vec::with_capacity(t_ids.len());
        let mut t_last = Vec::with_capacity(t_ids.len());
        for id in &t_ids {
            let t = totals[id];
            let scale = self.scale_of_account[id];
            t_debits.push(Amount::from_minor(t.debits, scale).to_string());
            t_credits.push(Amount::from_minor(t.credits, scale).to_string());
            t_version.push(t.version);
            t_last.push(self.last_seq_of_account[id]);
        }
        let (postings_st, entries_st, rejections_st, outbox_st, totals_st, state_st) = futures_util::try_join!(
            client.prepare_cached(
                "INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata, voids_posting_id, void_reason, key_id)
                 SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::text[], $8::jsonb[], $9::uuid[], $10::text[], $11::bigint[])"
            ),
            client.prepare_cached(
                "INSERT INTO entries (sequence, leg_index, account_id, direction, amount, account_version, debits_after, credits_after, recorded_at, effective_at)
                 SELECT s, l, a, d, am::numeric, v, da::numeric, ca::numeric, r, e
                 FROM unnest($1::bigint[], $2::int2[], $3::bigint[], $4::\"char\"[], $5::text[], $6::bigint[], $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[])
                      AS u(s, l, a, d, am, v, da, ca, r, e)"
            ),
            client.prepare_cached(
                "INSERT INTO rejections (caller, idempotency_key, reason, message, metadata)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[])"
            ),
            client.prepare_cached(
                "INSERT INTO outbox (sequence, posting_id, created_at)
                 SELECT s, p, $3 FROM unnest($1::bigint[], $2::uuid[]) AS u(s, p)"
            ),
            client.prepare_cached(TOTALS_UPDATE_SQL),
            client.prepare_cached(
                "UPDATE ledger_state SET last_sequence = $1, last_recorded_at = $2 WHERE ledger_id = 1"
            ),
        )?;
        let any_posting = !self.p_seq.is_empty();
        let postings = async {
            if !any_posting {
                return Ok(0);
            }
            client
                .execute(
                    &postings_st,
                    &[
                        &self.p_seq,
                        &self.p_id,
                        &self.p_caller,
                        &self.p_key,
                        &self.p_effective,
                        &self.p_recorded,
                        &self.p_memo,
                        &self.p_meta,
                        &self.p_voids,
                        &self.p_reason,
                        &self.p_key_id,
                    ],
                )
                .await
        };
        let entries = async {
            if self.e_seq.is_empty() {
                return Ok(0);
            }
            client
                .execute(
                    &entries_st,
                    &[
                        &self.e_seq,
                        &self.e_leg,
                        &self.e_account,
                        &self.e_dir,
                        &self.e_amount,
                        &self.e_version,
                        &self.e_debits,
                        &self.e_credits,
                        &self.e_recorded,
                        &self.e_effective,
                    ],
                )
                .await
        };
        let rejections = async {
            if self.r_caller.is_empty() {
                return Ok(0);
            }
            client
                .execute(
                    &rejections_st,
                    &[
                        &self.r_caller,
                        &self.r_key,
                        &self.r_reason,
                        &self.r_message,
                        &self.r_metadata,
                    ],
                )
                .await
        };
        let outbox = async {
            if !any_posting {
                return Ok(0);
            }
            client
                .execute(&outbox_st, &[&self.p_seq, &self.p_id, &base])
                .await
        };
        let totals_update = async {
            if t_ids.is_empty() {
                return Ok(0);
            }
            client
                .execute(
                    &totals_st,
                    &[&t_ids, &t_debits, &t_credits, &t_version, &t_last],
                )
                .await
        };
        let state = async {
            if !any_posting {
                return Ok(0);
            }
            let last_recorded = *self.p_recorded.last().expect("postings");
            client
                .execute(&state_st, &[&last_sequence, &last_recorded])
                .await
        };
        // The futures are polled, and so sent, in this order: first what is planned for each
        // execution, the totals update (it reads `account_totals`) and the postings insert (a
        // void's foreign key check reads `postings`, on a plan of the same mode); then the
        // other inserts and the state row on their generic plans; then COMMIT right behind
        // them. An earlier failure turns the COMMIT into a rollback and is reported below.
        let generic_plans = client.batch_execute(GENERIC_PLANS);
        let commit = client.batch_execute("COMMIT");
        let (t, p, _, e, _, o, _, _) = futures_util::try_join!(
            totals_update,
            postings,
            generic_plans,
            entries,
            rejections,
            outbox,
            state,
            commit
        )?;
        assert_eq!(p as usize, self.p_seq.len());
        assert_eq!(e as usize, self.e_seq.len());
        assert_eq!(o as usize, self.p_seq.len());
        assert_eq!(
            t as usize,
            t_ids.len(),
            "every touched account has a totals row"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::NormalBalance;

    fn rule(code: &str) -> Rule {
        Rule {
            code: code.into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: NormalBalance::Debit,
            allow_negative: false,
        }
    }

    #[test]
    fn the_account_cache_empties_only_when_a_batch_would_take_it_past_its_limit() {
        let mut cache = AccountCache::default();
        for id in 0..(ACCOUNT_CACHE_MAX as i64 - 10) {
            cache.rules.insert(id, rule("a"));
        }
        cache.make_room(10);
        assert_eq!(
            cache.rules.len(),
            ACCOUNT_CACHE_MAX - 10,
            "room enough: kept"
        );
        cache.make_room(11);
        assert!(
            cache.rules.is_empty(),
            "past the limit: emptied before the batch"
        );
    }
}
