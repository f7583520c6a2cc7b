//! The write step: a decided plan into the journal, one statement per table, and the commit.

use super::closes::{Closes, CLOSES_SQL};
use super::hashes::{Hashes, HASHES_SQL};
use super::GENERIC_PLANS;
use crate::storage::accounts::metadata_to_json;
use crate::storage::read::direction_to_sql;
use crate::storage::terms::limits_to_json;
use crate::storage::StorageError;
use ledger_core::amount::format_minor;
use ledger_core::amount::Amount;
use ledger_core::ledger::{self, LedgerId};
use ledger_core::write::{Clock, Plan};
use time::OffsetDateTime;
use uuid::Uuid;

const POSTINGS_SQL: &str = "INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata, voids_posting_id, void_reason, key_id,
                           hold, hold_expires_at, closes_hold_posting_id, close_kind)
     SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::text[], $8::jsonb[], $9::uuid[], $10::text[], $11::bigint[],
                          $12::bool[], $13::timestamptz[], $14::uuid[], $15::text[])";

/// The legs of the batch's postings that move no money (holds and releases).
const HOLD_LEGS_SQL: &str = "INSERT INTO hold_legs (sequence, leg_index, account_id, direction, amount)
     SELECT s, l, a, d, am::numeric FROM unnest($1::bigint[], $2::int2[], $3::bigint[], $4::\"char\"[], $5::text[]) AS u(s, l, a, d, am)";

const ENTRIES_SQL: &str = "INSERT INTO entries (sequence, leg_index, account_id, direction, amount, account_version, debits_after, credits_after, recorded_at, effective_at)
     SELECT s, l, a, d, am::numeric, v, da::numeric, ca::numeric, r, e
     FROM unnest($1::bigint[], $2::int2[], $3::bigint[], $4::\"char\"[], $5::text[], $6::bigint[], $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[])
          AS u(s, l, a, d, am, v, da, ca, r, e)";

/// The legs of the batch's new holds with an expiry, into the index of open expiring holds.
const EXPIRING_INSERT_SQL: &str = "INSERT INTO expiring_holds (account_id, expires_at, hold_posting_id, leg_index, direction, amount)
     SELECT a, t, h, l, d, am::numeric FROM unnest($1::bigint[], $2::timestamptz[], $3::uuid[], $4::int2[], $5::\"char\"[], $6::text[]) AS u(a, t, h, l, d, am)";

/// The holds with an expiry the batch closes, out of that index (by its primary key's prefix).
const EXPIRING_DELETE_SQL: &str = "DELETE FROM expiring_holds e
     USING unnest($1::bigint[], $2::timestamptz[], $3::uuid[]) AS u(a, t, h)
     WHERE e.account_id = u.a AND e.expires_at = u.t AND e.hold_posting_id = u.h";

const REJECTIONS_SQL: &str =
    "INSERT INTO rejections (ledger_id, caller, idempotency_key, reason, message, metadata)
     SELECT $6::integer, u.* FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[]) AS u";

const OUTBOX_SQL: &str = "INSERT INTO outbox (sequence, posting_id, created_at)
     SELECT s, p, $3 FROM unnest($1::bigint[], $2::uuid[]) AS u(s, p)";

/// The batch's new totals, one row per account touched.
const TOTALS_UPDATE_SQL: &str = "UPDATE account_totals t SET debits = u.d::numeric, credits = u.c::numeric, version = u.v, last_sequence = u.s,
                              held_debits = u.hd::numeric, held_credits = u.hc::numeric, terms_version = u.tv
     FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::bigint[]) AS u(id, d, c, v, s, hd, hc, tv)
     WHERE t.account_id = u.id";

/// The batch's new versions of accounts' terms.
const VERSIONS_SQL: &str = "INSERT INTO account_terms (account_id, terms_version, status, balance_floor, balance_ceiling, debit_limits,
                                after_sequence, recorded_at, caller, idempotency_key, reason, changed, key_id)
     SELECT a, v, st, fl::numeric, ce::numeric, dl, af, r, c, k, re, string_to_array(ch, ','), kid
     FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bigint[], $8::timestamptz[],
                 $9::text[], $10::text[], $11::text[], $12::text[], $13::bigint[])
          AS u(a, v, st, fl, ce, dl, af, r, c, k, re, ch, kid)";

/// The batch's account events, one per new version, in the plan's order (their `event_id`s
/// in that order: `WITH ORDINALITY`).
const ACCOUNT_OUTBOX_SQL: &str = "INSERT INTO account_outbox (ledger_id, account_id, terms_version, created_at)
     SELECT $1::integer, a, v, $4 FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(a, v, n) ORDER BY n";

/// The ledger's clock, and its chain when the batch hashed its postings ([`Hashes`]).
const STATE_UPDATE_SQL: &str = "UPDATE ledger_state SET last_sequence = $1, last_recorded_at = $2,
       tree_size = coalesce($4, tree_size), tree_head = coalesce($5, tree_head), tree_frontier = coalesce($6, tree_frontier),
       closed_before = coalesce($7, closed_before)
     WHERE ledger_id = $3";

/// The plan as column arrays, one per column of each multi-row insert.
#[derive(Default)]
struct Columns {
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
    p_hold: Vec<bool>,
    p_hold_expires: Vec<Option<OffsetDateTime>>,
    p_closes: Vec<Option<Uuid>>,
    p_close_kind: Vec<Option<&'static str>>,
    h_seq: Vec<i64>,
    h_leg: Vec<i16>,
    h_account: Vec<i64>,
    h_dir: Vec<i8>,
    h_amount: Vec<String>,
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
    t_id: Vec<i64>,
    t_debits: Vec<String>,
    t_credits: Vec<String>,
    t_version: Vec<i64>,
    t_last: Vec<i64>,
    t_held_debits: Vec<String>,
    t_held_credits: Vec<String>,
    x_account: Vec<i64>,
    x_expires: Vec<OffsetDateTime>,
    x_hold: Vec<Uuid>,
    x_leg: Vec<i16>,
    x_dir: Vec<i8>,
    x_amount: Vec<String>,
    xd_account: Vec<i64>,
    xd_expires: Vec<OffsetDateTime>,
    xd_hold: Vec<Uuid>,
    t_terms: Vec<i64>,
    v: Versions,
}

/// The columns of the versions insert.
#[derive(Default)]
struct Versions {
    account: Vec<i64>,
    version: Vec<i64>,
    status: Vec<&'static str>,
    floor: Vec<Option<String>>,
    ceiling: Vec<Option<String>>,
    limits: Vec<serde_json::Value>,
    after: Vec<i64>,
    recorded: Vec<OffsetDateTime>,
    caller: Vec<String>,
    key: Vec<String>,
    reason: Vec<String>,
    changed: Vec<String>,
    key_id: Vec<i64>,
}

impl Versions {
    fn of(plan: &Plan) -> Versions {
        let scales: std::collections::HashMap<i64, u8> = plan
            .totals
            .iter()
            .map(|t| (t.account_id, t.scale))
            .collect();
        let mut v = Versions::default();
        for p in &plan.versions {
            let (ver, scale) = (&p.version, scales[&p.version.account_id]);
            v.account.push(ver.account_id);
            v.version.push(ver.terms.version);
            v.status.push(ver.terms.status.as_str());
            v.floor
                .push(ver.terms.floor.map(|m| format_minor(m, scale)));
            v.ceiling
                .push(ver.terms.ceiling.map(|m| format_minor(m, scale)));
            v.limits
                .push(limits_to_json(&ver.terms.debit_limits, scale));
            v.after.push(ver.after_sequence);
            v.recorded.push(ver.recorded_at);
            v.caller.push(ver.caller.clone());
            v.key.push(ver.idempotency_key.clone());
            v.reason.push(ver.reason.clone());
            v.changed.push(ver.changed.join(","));
            v.key_id.push(p.key_id);
        }
        v
    }

    fn params(&self) -> [&P; 13] {
        [
            &self.account,
            &self.version,
            &self.status,
            &self.floor,
            &self.ceiling,
            &self.limits,
            &self.after,
            &self.recorded,
            &self.caller,
            &self.key,
            &self.reason,
            &self.changed,
            &self.key_id,
        ]
    }
}

impl Columns {
    fn of(plan: &Plan) -> Columns {
        let mut c = Columns::default();
        for p in &plan.postings {
            let posting = &p.posting;
            let seq = posting.sequence as i64;
            c.p_seq.push(seq);
            c.p_id.push(posting.posting_id);
            c.p_caller.push(posting.caller.clone());
            c.p_key.push(posting.idempotency_key.clone());
            c.p_key_id.push(p.key_id);
            c.p_effective.push(posting.effective_at);
            c.p_recorded.push(posting.recorded_at);
            c.p_memo.push(posting.memo.clone());
            c.p_meta.push(metadata_to_json(&posting.metadata));
            c.p_voids.push(posting.voids_posting_id);
            c.p_reason.push(posting.void_reason.clone());
            c.p_hold.push(posting.hold.is_some());
            c.p_hold_expires
                .push(posting.hold.and_then(|h| h.expires_at));
            c.p_closes.push(posting.closes.map(|x| x.hold));
            c.p_close_kind.push(posting.closes.map(|x| x.kind.as_str()));
            c.held_legs(p);
            c.expiring(p);
            for (i, l) in p.legs.iter().enumerate() {
                let scale = l.amount.scale();
                c.e_seq.push(seq);
                c.e_leg.push(i as i16);
                c.e_account.push(l.account_id);
                c.e_dir.push(direction_to_sql(l.direction));
                c.e_amount.push(l.amount.to_string());
                c.e_version.push(l.after.version);
                c.e_debits
                    .push(Amount::from_minor(l.after.debits, scale).to_string());
                c.e_credits
                    .push(Amount::from_minor(l.after.credits, scale).to_string());
                c.e_recorded.push(posting.recorded_at);
                c.e_effective.push(posting.effective_at);
            }
        }
        c.rejections_and_totals(plan);
        c.v = Versions::of(plan);
        c
    }

    /// The legs of a posting that moves no money (a hold, a release), with the account ids
    /// its planned effects do not carry: taken from the plan's resolved legs.
    fn held_legs(&mut self, p: &ledger_core::write::PlannedPosting) {
        let seq = p.posting.sequence as i64;
        for (i, (leg, account_id)) in p.posting.legs.iter().zip(&p.held_accounts).enumerate() {
            self.h_seq.push(seq);
            self.h_leg.push(i as i16);
            self.h_account.push(*account_id);
            self.h_dir.push(direction_to_sql(leg.direction));
            self.h_amount.push(leg.amount.to_string());
        }
    }

    /// The rows of the index of open expiring holds a posting adds (a hold with an expiry)
    /// or removes (the close of one: a row per account of the hold).
    fn expiring(&mut self, p: &ledger_core::write::PlannedPosting) {
        let posting = &p.posting;
        if let Some(t) = posting.hold.and_then(|h| h.expires_at) {
            for (i, (leg, account_id)) in posting.legs.iter().zip(&p.held_accounts).enumerate() {
                self.x_account.push(*account_id);
                self.x_expires.push(t);
                self.x_hold.push(posting.posting_id);
                self.x_leg.push(i as i16);
                self.x_dir.push(direction_to_sql(leg.direction));
                self.x_amount.push(leg.amount.to_string());
            }
        }
        if let (Some((t, accounts)), Some(c)) = (&p.closes_expiring, posting.closes) {
            let mut accounts = accounts.clone();
            accounts.sort_unstable();
            accounts.dedup();
            for a in accounts {
                self.xd_account.push(a);
                self.xd_expires.push(*t);
                self.xd_hold.push(c.hold);
            }
        }
    }

    fn rejections_and_totals(&mut self, plan: &Plan) {
        for r in &plan.rejections {
            self.r_caller.push(r.caller.clone());
            self.r_key.push(r.key.clone());
            self.r_reason.push(r.error.reason.as_str().to_owned());
            self.r_message.push(r.error.message.clone());
            self.r_metadata.push(metadata_to_json(&r.error.metadata));
        }
        for t in &plan.totals {
            self.t_id.push(t.account_id);
            self.t_debits
                .push(Amount::from_minor(t.totals.debits, t.scale).to_string());
            self.t_credits
                .push(Amount::from_minor(t.totals.credits, t.scale).to_string());
            self.t_version.push(t.totals.version);
            self.t_last.push(t.last_sequence);
            self.t_held_debits
                .push(Amount::from_minor(t.totals.held_debits, t.scale).to_string());
            self.t_held_credits
                .push(Amount::from_minor(t.totals.held_credits, t.scale).to_string());
            self.t_terms.push(t.terms_version);
        }
    }
}

/// Writes the plan in the transaction [`super::load`] opened, and commits: one statement per
/// table, prepared once per connection, sent pipelined together with `COMMIT` (one round
/// trip). If any statement fails the transaction is aborted and the `COMMIT` becomes a
/// rollback; the error is returned (and the commit's fate may be unknown: the callers must
/// be told `UNAVAILABLE`). The plan is asserted sound first: the ledger never writes a plan
/// that breaks the journal's rules, it stops.
pub async fn write(
    client: &deadpool_postgres::Client,
    plan: &Plan,
    clock: &Clock,
) -> Result<(), StorageError> {
    plan.assert_sound(clock);
    let c = Columns::of(plan);
    let st = futures_util::try_join!(
        client.prepare_cached(POSTINGS_SQL),
        client.prepare_cached(ENTRIES_SQL),
        client.prepare_cached(REJECTIONS_SQL),
        client.prepare_cached(OUTBOX_SQL),
        client.prepare_cached(TOTALS_UPDATE_SQL),
        client.prepare_cached(STATE_UPDATE_SQL),
        client.prepare_cached(HOLD_LEGS_SQL),
        client.prepare_cached(EXPIRING_INSERT_SQL),
        client.prepare_cached(EXPIRING_DELETE_SQL),
    )?;
    let versions = futures_util::try_join!(
        client.prepare_cached(VERSIONS_SQL),
        client.prepare_cached(ACCOUNT_OUTBOX_SQL),
        client.prepare_cached(HASHES_SQL),
        client.prepare_cached(CLOSES_SQL),
    )?;
    let (hashes, closes) = (Hashes::of(plan), Closes::of(plan));
    let counts = send(client, (&c, &hashes, &closes), plan, clock, (st, versions)).await?;
    assert_eq!(counts.hashes as usize, hashes.sequence.len());
    assert_eq!(counts.closes as usize, closes.key.len());
    assert_eq!(counts.versions as usize, plan.versions.len());
    assert_eq!(counts.account_outbox as usize, plan.versions.len());
    assert_eq!(counts.postings as usize, c.p_seq.len());
    assert_eq!(counts.entries as usize, c.e_seq.len());
    assert_eq!(counts.hold_legs as usize, c.h_seq.len());
    assert_eq!(counts.outbox as usize, c.p_seq.len());
    assert_eq!(counts.expiring as usize, c.x_account.len());
    assert_eq!(
        counts.totals as usize,
        c.t_id.len(),
        "every touched account has a totals row"
    );
    Ok(())
}

/// The batch's prepared statements: postings, entries, rejections, outbox, totals, state,
/// hold legs, and the index of expiring holds (insert, delete).
type Statements = (
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
);

/// A statement parameter.
type P = dyn tokio_postgres::types::ToSql + Sync;

/// The statements of the batch's new versions (`account_terms`, `account_outbox`), of its
/// postings' hashes and of its period closes.
type VersionStatements = (
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
);

/// Rows each statement changed.
struct Counts {
    hashes: u64,
    closes: u64,
    versions: u64,
    account_outbox: u64,
    postings: u64,
    entries: u64,
    hold_legs: u64,
    outbox: u64,
    totals: u64,
    expiring: u64,
}

/// [`STATE_UPDATE_SQL`]'s parameters: the ledger's (last sequence, recorded time, id, close)
/// and its chain.
fn state_params<'a>(
    s: &'a (i64, OffsetDateTime, LedgerId, Option<OffsetDateTime>),
    h: &'a Hashes,
) -> [&'a P; 7] {
    [&s.0, &s.1, &s.2, &h.size, &h.head, &h.frontier, &s.3]
}

/// The ledger's last sequence and recorded time after the plan. A version or a close takes no
/// sequence, but moves the recorded clock like a posting (a reader fenced at a time before it
/// never sees it appear later).
fn clock_after(plan: &Plan, clock: &Clock, closes: &Closes) -> (i64, OffsetDateTime) {
    let (last_sequence, last_recorded) = plan.last().unwrap_or((clock.last_sequence, plan.base));
    let later = plan
        .versions
        .last()
        .map(|v| v.version.recorded_at)
        .into_iter()
        .chain(closes.recorded.last().copied());
    (
        last_sequence,
        later.fold(last_recorded, OffsetDateTime::max),
    )
}

/// Runs `st` with `c`, or nothing when there are no rows for it.
async fn maybe(
    client: &deadpool_postgres::Client,
    rows: usize,
    st: &tokio_postgres::Statement,
    params: &[&P],
) -> Result<u64, tokio_postgres::Error> {
    if rows == 0 {
        return Ok(0);
    }
    client.execute(st, params).await
}

impl Columns {
    fn totals_p(&self) -> [&P; 8] {
        [
            &self.t_id,
            &self.t_debits,
            &self.t_credits,
            &self.t_version,
            &self.t_last,
            &self.t_held_debits,
            &self.t_held_credits,
            &self.t_terms,
        ]
    }

    fn postings_p(&self) -> [&P; 15] {
        [
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
            &self.p_hold,
            &self.p_hold_expires,
            &self.p_closes,
            &self.p_close_kind,
        ]
    }

    fn entries_p(&self) -> [&P; 10] {
        [
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
        ]
    }

    fn rejections_p<'a>(&'a self, ledger: &'a LedgerId) -> [&'a P; 6] {
        [
            &self.r_caller,
            &self.r_key,
            &self.r_reason,
            &self.r_message,
            &self.r_metadata,
            ledger,
        ]
    }

    fn expiring_p(&self) -> [&P; 6] {
        [
            &self.x_account,
            &self.x_expires,
            &self.x_hold,
            &self.x_leg,
            &self.x_dir,
            &self.x_amount,
        ]
    }

    fn unexpiring_p(&self) -> [&P; 3] {
        [&self.xd_account, &self.xd_expires, &self.xd_hold]
    }

    fn hold_legs_p(&self) -> [&P; 5] {
        [
            &self.h_seq,
            &self.h_leg,
            &self.h_account,
            &self.h_dir,
            &self.h_amount,
        ]
    }
}

/// Sends every statement and `COMMIT`, pipelined. The futures are polled, and so sent, in this
/// order: first what is planned for each execution, the totals update (it reads
/// `account_totals`), the postings insert (a void's foreign key check reads `postings`, on
/// a plan of the same mode) and the delete from the index of expiring holds; then the other
/// inserts and the state row on their generic plans; then COMMIT right behind them. An earlier failure turns the COMMIT into a rollback and is
/// reported here.
async fn send(
    client: &deadpool_postgres::Client,
    (c, h, cl): (&Columns, &Hashes, &Closes),
    plan: &Plan,
    clock: &Clock,
    (
        (
            postings_st,
            entries_st,
            rejections_st,
            outbox_st,
            totals_st,
            state_st,
            held_st,
            x_st,
            xd_st,
        ),
        (versions_st, account_outbox_st, hashes_st, closes_st),
    ): (Statements, VersionStatements),
) -> Result<Counts, StorageError> {
    let posts = c.p_seq.len();
    // The batch's ledger: the one whose state row its clock was read from.
    let ledger = ledger::of_sequence(clock.last_sequence);
    let (last_sequence, last_recorded) = clock_after(plan, clock, cl);
    let (vs, closed_before) = (plan.versions.len(), cl.last());
    let state_rows = posts + vs + cl.key.len();
    let versions_p = c.v.params();
    let account_outbox_p: [&P; 4] = [&ledger, &c.v.account, &c.v.version, &plan.base];
    let outbox_p: [&P; 3] = [&c.p_seq, &c.p_id, &plan.base];
    let state = (last_sequence, last_recorded, ledger, closed_before);
    let state_p = state_params(&state, h);
    let (closes_p, hashes_p) = (cl.params(&ledger), h.params());
    let (totals_p, postings_p, entries_p) = (c.totals_p(), c.postings_p(), c.entries_p());
    let (hold_legs_p, rejections_p) = (c.hold_legs_p(), c.rejections_p(&ledger));
    let (expiring_p, unexpiring_p) = (c.expiring_p(), c.unexpiring_p());
    let r = futures_util::try_join!(
        maybe(client, c.t_id.len(), &totals_st, &totals_p),
        maybe(client, vs, &versions_st, &versions_p),
        maybe(client, posts, &postings_st, &postings_p),
        maybe(client, c.xd_account.len(), &xd_st, &unexpiring_p),
        client.batch_execute(GENERIC_PLANS),
        maybe(client, c.e_seq.len(), &entries_st, &entries_p),
        maybe(client, c.h_seq.len(), &held_st, &hold_legs_p),
        maybe(client, c.x_account.len(), &x_st, &expiring_p),
        maybe(client, c.r_caller.len(), &rejections_st, &rejections_p),
        maybe(client, posts, &outbox_st, &outbox_p),
        maybe(client, vs, &account_outbox_st, &account_outbox_p),
        maybe(client, h.sequence.len(), &hashes_st, &hashes_p),
        maybe(client, cl.key.len(), &closes_st, &closes_p),
        maybe(client, state_rows, &state_st, &state_p),
        client.batch_execute("COMMIT")
    )?;
    let (totals, versions, postings, entries, hold_legs) = (r.0, r.1, r.2, r.5, r.6);
    let (expiring, outbox, account_outbox, hashes, closes) = (r.7, r.9, r.10, r.11, r.12);
    Ok(Counts {
        hashes,
        closes,
        totals,
        versions,
        postings,
        entries,
        hold_legs,
        expiring,
        outbox,
        account_outbox,
    })
}
