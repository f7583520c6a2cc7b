//! The load step: the batch's transaction up to the snapshot its decision needs.

use super::decided::{claimed_keys, key_states};
use super::memo::{WindowDraft, WindowMemo};
use super::terms::load_windows;
use super::{BEGIN_SQL, CUSTOM_PLANS};
use crate::storage::accounts::{get_or_load_ids, Found};
use crate::storage::journal::chain_from;
use crate::storage::read::{direction_from_sql, with_state, TARGET_STATES_SQL};
use crate::storage::terms::{terms_from_row, TERMS_COLUMNS};
use crate::storage::{StorageError, LEDGER_LOCK_CLASS};
use ledger_core::account::{Account, AccountCache};
use ledger_core::amount::{parse_stored, Amount};
use ledger_core::engine::Totals;
use ledger_core::journal::Chain;
use ledger_core::ledger::{self, LedgerId};
use ledger_core::record::Posting;
use ledger_core::write::{
    distinct_keys, AccountState, Clock, Command, ExpiringHold, HeldLeg, NamedPostings, Snapshot,
    WriteRequest,
};
use ledger_core::LedgerError;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, RwLock};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

/// Claims the batch's keys: returns the position (1-based) and the key number of every key this
/// insert claimed (a posting names its key by that number), inserting in (caller, key) order
/// (a canonical order, so concurrent claims cannot deadlock).
/// A key it did not claim was decided earlier; [`DECIDED_SQL`] reads that decision.
const CLAIM_SQL: &str = "WITH u AS (
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) WITH ORDINALITY AS u(c, k, o, f, n)),
     ins AS (
        INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
        SELECT $5, c, k, o, f, clock_timestamp() FROM u ORDER BY c, k
        ON CONFLICT ON CONSTRAINT idempotency_keys_unique DO NOTHING
        RETURNING caller, idempotency_key, key_id)
     SELECT u.n, ins.key_id FROM u JOIN ins ON ins.caller = u.c AND ins.idempotency_key = u.k
     ORDER BY u.n";

/// The ledger's last committed batch and the clock, read under the lock.
const STATE_SQL: &str = "SELECT last_sequence, last_recorded_at, clock_timestamp() AS now,
       tree_size, tree_head, tree_frontier, closed_before, (SELECT code FROM ledgers l WHERE l.ledger_id = s.ledger_id) AS ledger_code,
       coalesce((SELECT f.fenced FROM ledger_fences f WHERE f.ledger_id = s.ledger_id
                 ORDER BY f.fence_no DESC LIMIT 1), false) AS fenced
     FROM ledger_state s WHERE ledger_id = $1 FOR UPDATE";

/// The totals of the accounts named by the batch's requests (ids distinct), with the version
/// of their terms in force (none: a corrupt account).
static TOTALS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT t.account_id, t.debits::text AS debits, t.credits::text AS credits, t.version,
                t.held_debits::text AS held_debits, t.held_credits::text AS held_credits,
                t.last_sequence, {TERMS_COLUMNS}
         FROM unnest($1::bigint[]) AS x(id) JOIN account_totals t ON t.account_id = x.id
         LEFT JOIN account_terms v ON v.account_id = t.account_id AND v.terms_version = t.terms_version"
    )
});

/// The accounts whose rules the cache does not hold yet (sent only when there are any).
const ACCOUNTS_SQL: &str = "SELECT a.account_id, a.ledger_id, a.code, a.currency, a.scale, a.normal_balance, a.allow_negative, a.metadata, a.created_at
     FROM unnest($1::bigint[]) AS x(id) JOIN accounts a ON a.account_id = x.id";

/// The legs, on the batch's accounts (`$1`, distinct), of the open holds with an expiry due
/// by the last time the batch can record at: the later of the clock (read after the state's)
/// and the last batch, plus a microsecond per request (`$2`) and one. A range of
/// `expiring_holds`' primary key per account, whatever the statistics say.
const EXPIRING_SQL: &str = "WITH h AS (
        SELECT greatest(clock_timestamp(), last_recorded_at) + ($2::bigint + 1) * interval '1 microsecond' AS horizon
        FROM ledger_state WHERE ledger_id = $3)
     SELECT e.hold_posting_id, e.expires_at, e.account_id, e.direction, e.amount::text AS amount
     FROM h CROSS JOIN unnest($1::bigint[]) AS x(id)
     CROSS JOIN LATERAL (SELECT * FROM expiring_holds
                         WHERE account_id = x.id AND expires_at <= h.horizon
                         ORDER BY expires_at, hold_posting_id, leg_index) e";

/// The rows of the batch's first round trip.
struct FirstRows {
    claim: Vec<Row>,
    state: Row,
    totals: Vec<Row>,
    /// The state of the targets ([`TARGET_STATES_SQL`]).
    targets: Vec<Row>,
    /// The due holds' legs ([`EXPIRING_SQL`]).
    expiring: Vec<Row>,
}

/// Opens the batch's transaction and loads its [`Snapshot`]; `targets` are the postings its
/// voids, captures and expiries name, as the lane read them (their state is read here, under
/// the lock). Any error leaves the transaction to be rolled back (see [`super::rollback`]) and
/// means nothing of the batch may be assumed.
pub async fn load(
    client: &deadpool_postgres::Client,
    ledger: LedgerId,
    requests: &[WriteRequest],
    cache: &RwLock<AccountCache>,
    targets: &NamedPostings,
    windows: (&Mutex<WindowMemo>, &mut WindowDraft),
) -> Result<Snapshot, StorageError> {
    assert!(!requests.is_empty(), "empty batch");
    let firsts = distinct_keys(requests);
    let (ids, voids) = touched(requests, &firsts, targets);
    // The targets' accounts as the lane read them; the others through the account cache
    // (taken from it at once: another batch may empty it, when full, before this one is
    // decided), those it misses read in the first round trip.
    let mut found = Accounts::default();
    found.of_targets(&targets.accounts);
    let others: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|id| !found.rules.contains_key(id))
        .collect();
    let (first, accounts) = first_round_trip(
        client,
        ledger,
        requests,
        &firsts,
        (&ids, &others),
        cache,
        &voids,
    )
    .await?;
    found.read(accounts);
    unless_fenced(&first.state)?;
    let clock = clock_of(&first.state);
    let chain = chain_of(&first.state, &clock)?;
    let claimed = claimed_keys(&first.claim, firsts.len());
    let keys = key_states(client, ledger, requests, &firsts, &claimed).await?;
    let new_voids: Vec<Uuid> = firsts
        .iter()
        .zip(&claimed)
        .filter_map(|(&i, c)| c.and(requests[i].command.target()))
        .collect();
    let (targets_now, corrupt_targets) = targets_now(targets, &new_voids, &first.targets);
    found.totals(&ids, &first.totals);
    load_windows(
        client,
        (&clock, requests),
        &mut found.states,
        &mut found.corrupt,
        windows,
    )
    .await?;
    let expiring = found.expiring(&first.expiring);
    Ok(Snapshot {
        clock,
        keys,
        accounts: found.states,
        account_ids: found.ids,
        named: targets_now,
        corrupt_accounts: found.corrupt,
        corrupt_named: corrupt_targets,
        expiring,
        chain,
        closed_before: first.state.get("closed_before"),
    })
}

/// The accounts the batch's posts and captures name and those of its targets' legs (ids
/// distinct), and the targets of its voids, captures and expiries.
fn touched(
    requests: &[WriteRequest],
    firsts: &[usize],
    targets: &NamedPostings,
) -> (Vec<i64>, Vec<Uuid>) {
    let mut ids: Vec<i64> = Vec::new();
    let mut voids: Vec<Uuid> = Vec::new();
    for &i in firsts {
        let command = &requests[i].command;
        match command {
            Command::Post(p) => {
                ids.extend(p.legs.iter().map(|l| l.account_id));
                ids.extend(p.conditions.iter().map(|c| c.account_id));
            }
            Command::Capture(c) => ids.extend(c.legs.iter().map(|l| l.account_id)),
            Command::Update(u) => ids.push(u.account_id),
            Command::Void(_) | Command::Expire(_) | Command::Close(_) => {}
        }
        if let Some(target) = command.target() {
            voids.push(target);
            let legs = targets.postings.get(&target).map(|p| &p.legs);
            ids.extend(
                legs.into_iter()
                    .flatten()
                    .filter_map(|l| targets.accounts.get(&l.account))
                    .map(|a| a.id),
            );
        }
    }
    ids.sort_unstable();
    ids.dedup();
    voids.sort_unstable();
    voids.dedup();
    (ids, voids)
}

/// The targets of the keys this batch claimed, each with its state now; a state that cannot be
/// read (a closing posting of an unknown kind) is the refusal of the requests that name it.
fn targets_now(
    targets: &NamedPostings,
    claimed: &[Uuid],
    states: &[Row],
) -> (HashMap<Uuid, Posting>, HashMap<Uuid, LedgerError>) {
    let states: HashMap<Uuid, &Row> = states.iter().map(|r| (r.get("id"), r)).collect();
    let mut now = HashMap::new();
    let mut corrupt = HashMap::new();
    for id in claimed {
        let p = targets
            .postings
            .get(id)
            .unwrap_or_else(|| panic!("target {id} was read and checked by the lane"));
        let state = states
            .get(id)
            .unwrap_or_else(|| panic!("a state row for target {id}"));
        match with_state(p.clone(), state) {
            Ok(p) => {
                now.insert(*id, p);
            }
            Err(e) => {
                corrupt.insert(*id, e.into_ledger_error());
            }
        }
    }
    (now, corrupt)
}

/// One round trip: BEGIN, claim, lock, state, accounts, due holds, run in this order. The claim comes
/// before the lock, so it runs while another batch holds the lock (on another core); a key
/// that batch has inserted but not committed makes the claim wait for its commit and then
/// conflict. Keys are inserted in (caller, key) order, so two claims never wait on each other
/// in a cycle. The state and the accounts are read with snapshots taken after the lock, so
/// they see every earlier batch.
async fn first_round_trip(
    client: &deadpool_postgres::Client,
    ledger: LedgerId,
    requests: &[WriteRequest],
    firsts: &[usize],
    (ids, others): (&[i64], &[i64]),
    cache: &RwLock<AccountCache>,
    voids: &[Uuid],
) -> Result<(FirstRows, Found<i64>), StorageError> {
    let (lock_st, state_st, claim_st, totals_st, accounts_st, targets_st, expiring_st) = futures_util::try_join!(
        client.prepare_cached("SELECT pg_advisory_xact_lock($1, $2)"),
        client.prepare_cached(STATE_SQL),
        client.prepare_cached(CLAIM_SQL),
        client.prepare_cached(&TOTALS_SQL),
        client.prepare_cached(ACCOUNTS_SQL),
        client.prepare_cached(TARGET_STATES_SQL),
        client.prepare_cached(EXPIRING_SQL),
    )?;
    let (callers, keys, ops, fps) = claim_columns(requests, firsts);
    let claim_params: [&(dyn ToSql + Sync); 5] = [&callers, &keys, &ops, &fps, &ledger];
    let accounts = get_or_load_ids(cache, ledger, others, |missing| async move {
        Ok(client.query(&accounts_st, &[&missing]).await?)
    });
    let targets = async {
        if voids.is_empty() {
            return Ok(Vec::new());
        }
        client.query(&targets_st, &[&voids]).await
    };
    let lock_params: [&(dyn ToSql + Sync); 2] = [&LEDGER_LOCK_CLASS, &ledger];
    let totals_params: [&(dyn ToSql + Sync); 1] = [&ids];
    let state_params: [&(dyn ToSql + Sync); 1] = [&ledger];
    let expiring_params: [&(dyn ToSql + Sync); 3] = [&ids, &(requests.len() as i64), &ledger];
    let pipeline = async {
        Ok::<_, StorageError>(futures_util::try_join!(
            client.batch_execute(&BEGIN_SQL),
            client.query(&claim_st, &claim_params),
            client.execute(&lock_st, &lock_params),
            client.query_one(&state_st, &state_params),
            client.batch_execute(CUSTOM_PLANS),
            client.query(&totals_st, &totals_params),
            targets,
            client.query(&expiring_st, &expiring_params)
        )?)
    };
    let ((_, claim, _, state, _, totals, targets, expiring), accounts) =
        futures_util::future::try_join(pipeline, accounts).await?;
    let rows = FirstRows {
        claim,
        state,
        totals,
        targets,
        expiring,
    };
    Ok((rows, accounts))
}

/// The claim's columns: callers, keys, operations, fingerprints.
type ClaimColumns<'a> = (Vec<&'a str>, Vec<&'a str>, Vec<&'static str>, Vec<&'a [u8]>);

/// The claim's columns: each distinct key's caller, key, operation and fingerprint.
fn claim_columns<'a>(requests: &'a [WriteRequest], firsts: &[usize]) -> ClaimColumns<'a> {
    let r = |i: &usize| &requests[*i];
    (
        firsts.iter().map(|i| r(i).caller.as_str()).collect(),
        firsts.iter().map(|i| r(i).command.key()).collect(),
        firsts
            .iter()
            .map(|i| r(i).command.operation().as_str())
            .collect(),
        firsts
            .iter()
            .map(|i| r(i).command.fingerprint().as_slice())
            .collect(),
    )
}

/// A move has fenced the ledger here (read under its lock): nothing of the batch is written
/// and its keys are not bound (the transaction is rolled back), `LEDGER_MOVING`.
fn unless_fenced(state: &Row) -> Result<(), StorageError> {
    match state.get::<_, bool>("fenced") {
        true => Err(StorageError::Moving {
            ledger: state.get("ledger_code"),
        }),
        false => Ok(()),
    }
}

fn clock_of(state: &Row) -> Clock {
    Clock {
        last_sequence: state.get("last_sequence"),
        last_recorded_at: state.get("last_recorded_at"),
        now: state.get("now"),
    }
}

/// The ledger's chain from its state row: `None` while the journal is hashed only part of the
/// way (`storage::journal::hash_backlog` goes on from there). A head or frontier that cannot
/// be read fails the batch: the row was written behind the ledger's back.
fn chain_of(state: &Row, clock: &Clock) -> Result<Option<Chain>, StorageError> {
    let size: i64 = state.get("tree_size");
    if size != ledger::in_ledger(clock.last_sequence) {
        return Ok(None);
    }
    let (head, frontier): (Vec<u8>, Vec<u8>) = (state.get("tree_head"), state.get("tree_frontier"));
    let ledger = ledger::of_sequence(clock.last_sequence);
    let code: String = state.get("ledger_code");
    chain_from((ledger, &code), size, &head, &frontier).map(Some)
}

/// The accounts a snapshot holds, as they are read.
#[derive(Default)]
struct Accounts {
    states: HashMap<i64, AccountState>,
    ids: HashMap<String, i64>,
    corrupt: HashMap<i64, LedgerError>,
    /// The accounts by id: from the cache and the rows read now.
    rules: HashMap<i64, Account>,
}

impl Accounts {
    /// The rules and ids of the targets' accounts.
    fn of_targets(&mut self, targets: &HashMap<String, Account>) {
        for a in targets.values() {
            self.rules.insert(a.id, a.clone());
            self.ids.insert(a.code.clone(), a.id);
        }
    }

    /// The accounts found through the cache; one whose row cannot be read is corrupt.
    fn read(&mut self, accounts: Found<i64>) {
        for (id, a) in accounts {
            match a {
                Ok(a) => {
                    self.rules.insert(id, a);
                }
                Err(e) => {
                    self.corrupt.insert(id, e);
                }
            }
        }
    }

    /// The totals of the batch's accounts (`ids`); a missing or impossible totals row is a
    /// corrupt account.
    fn totals(&mut self, ids: &[i64], totals: &[Row]) {
        for r in totals {
            let id: i64 = r.get("account_id");
            if self.corrupt.contains_key(&id) || self.states.contains_key(&id) {
                continue;
            }
            let Some(account) = self.rules.get(&id).cloned() else {
                let e = StorageError::corrupt_account(&format!("#{id}"), "totals but no account");
                self.corrupt.insert(id, e.into_ledger_error());
                continue;
            };
            let state = stored_totals(r, &account).and_then(|totals| {
                let terms = match r.get::<_, Option<i64>>("terms_version") {
                    Some(_) => terms_from_row(r, &account)?,
                    None => {
                        return Err(StorageError::corrupt_account(
                            &account.code,
                            "no row of the version of its terms in force",
                        ))
                    }
                };
                Ok(AccountState {
                    last_sequence: r.get("last_sequence"),
                    terms,
                    windows: Vec::new(),
                    ..AccountState::new(account, totals)
                })
            });
            match state {
                Ok(state) => {
                    self.states.insert(id, state);
                }
                Err(e) => {
                    self.corrupt.insert(id, e.into_ledger_error());
                }
            }
        }
        for &id in ids {
            if !self.states.contains_key(&id) && !self.corrupt.contains_key(&id) {
                let code = self
                    .rules
                    .get(&id)
                    .map_or(format!("#{id}"), |r| r.code.clone());
                let e = StorageError::corrupt_account(&code, "no totals row");
                self.corrupt.insert(id, e.into_ledger_error());
            }
        }
    }
}

impl Accounts {
    /// The due holds from their [`EXPIRING_SQL`] rows (each account's in expiry order), in
    /// expiry order. A row that cannot be read makes the account corrupt (legs beyond what the
    /// account holds are `decide`'s to refuse).
    fn expiring(&mut self, rows: &[Row]) -> Vec<ExpiringHold> {
        let mut holds: Vec<ExpiringHold> = Vec::new();
        let mut index: HashMap<Uuid, usize> = HashMap::new();
        for r in rows {
            let id: i64 = r.get("account_id");
            let Some(state) = self.states.get(&id) else {
                continue;
            };
            let code = &state.account.code;
            let leg = parse_stored(r.get("amount"), state.account.scale)
                .map_err(|e| format!("amount: {e}"))
                .and_then(|minor| {
                    let direction = direction_from_sql(r.get("direction"))
                        .ok_or_else(|| "no direction".to_owned())?;
                    Ok(HeldLeg {
                        account_id: id,
                        direction,
                        amount: Amount::from_minor(minor, state.account.scale),
                    })
                });
            let leg = match leg {
                Ok(leg) => leg,
                Err(e) => {
                    let e = StorageError::corrupt_account(code, format!("expiring hold: {e}"));
                    self.corrupt.insert(id, e.into_ledger_error());
                    continue;
                }
            };
            let hold: Uuid = r.get("hold_posting_id");
            let i = *index.entry(hold).or_insert_with(|| {
                holds.push(ExpiringHold {
                    hold,
                    expires_at: r.get("expires_at"),
                    legs: Vec::new(),
                });
                holds.len() - 1
            });
            holds[i].legs.push(leg);
        }
        holds.sort_by_key(|h| h.expires_at);
        holds
    }
}

/// An account's stored totals, decoded at its scale; one that cannot be read is a corrupt
/// row. (Totals no writer could have left are `decide`'s to refuse: `AccountState::check`.)
fn stored_totals(r: &Row, account: &Account) -> Result<Totals, StorageError> {
    let corrupt = |e: String| StorageError::corrupt_account(&account.code, format!("totals: {e}"));
    let scale = account.scale;
    Ok(Totals {
        debits: parse_stored(r.get("debits"), scale).map_err(corrupt)?,
        credits: parse_stored(r.get("credits"), scale).map_err(corrupt)?,
        version: r.get("version"),
        held_debits: parse_stored(r.get("held_debits"), scale).map_err(corrupt)?,
        held_credits: parse_stored(r.get("held_credits"), scale).map_err(corrupt)?,
    })
}
