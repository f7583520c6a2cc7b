//! Moving a ledger's journal to another cluster (migration 0020): the moves and their ends in
//! the directory on `main`, the fences on each cluster, the copy (one snapshot of the source
//! into one transaction of the target) and its verification (every row, by a digest of its
//! columns with the cluster's own ids replaced by the codes and keys they stand for).
//!
//! Ids that are the ledger's own (ledger id, sequences, posting ids, times, hashes) are copied
//! as they are; `account_id`, `key_id` and `event_id` are each cluster's own identities, so
//! the target allocates its own, in the source's order, and every column naming one is
//! mapped.

use super::{Conn, StorageError, LEDGER_LOCK_CLASS};
use deadpool_postgres::GenericClient;
use futures_util::{SinkExt as _, StreamExt as _};
use ledger_core::ledger::{self, LedgerId};
use uuid::Uuid;

/// A move of a ledger, as `main` records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub id: Uuid,
    pub ledger: LedgerId,
    pub from: String,
    pub to: String,
}

/// The class of the session lock on `main` that one move of a ledger holds while it runs, so
/// two movers of a ledger never interleave (a mover that dies lets go with its session).
const MOVE_LOCK_CLASS: i32 = 0x4d4f_5645;

/// Takes the move lock of `ledger` on this session of `main`; false when another session
/// holds it (a move of that ledger is running).
pub async fn try_lock(main: &Conn, ledger: LedgerId) -> Result<bool, StorageError> {
    let row = main
        .query_one(
            "SELECT pg_try_advisory_lock($1, $2)",
            &[&MOVE_LOCK_CLASS, &ledger],
        )
        .await?;
    Ok(row.get(0))
}

/// The move of `ledger` under way (started, not ended), if any.
pub async fn open_move(main: &Conn, ledger: LedgerId) -> Result<Option<Move>, StorageError> {
    let row = main
        .query_opt(
            "SELECT m.move_id, m.from_cluster, m.to_cluster FROM ledger_moves m
             WHERE m.ledger_id = $1 AND NOT EXISTS
               (SELECT 1 FROM ledger_move_ends e WHERE e.move_id = m.move_id)",
            &[&ledger],
        )
        .await?;
    Ok(row.map(|r| Move {
        id: r.get(0),
        ledger,
        from: r.get(1),
        to: r.get(2),
    }))
}

/// Records the start of a move.
pub async fn start(main: &Conn, m: &Move, caller: &str) -> Result<(), StorageError> {
    main.execute(
        "INSERT INTO ledger_moves (move_id, ledger_id, from_cluster, to_cluster, caller)
         VALUES ($1, $2, $3, $4, $5)",
        &[&m.id, &m.ledger, &m.from, &m.to, &caller],
    )
    .await?;
    Ok(())
}

/// Switches the directory: the ledger's placement of the next version names the target, and
/// the move ends `done`, in one transaction.
pub async fn switch(main: &mut Conn, m: &Move) -> Result<(), StorageError> {
    let tx = main.transaction().await?;
    tx.execute(
        "INSERT INTO ledger_placements (ledger_id, version, cluster)
         SELECT $1, coalesce(max(version), 0) + 1, $2 FROM ledger_placements WHERE ledger_id = $1",
        &[&m.ledger, &m.to],
    )
    .await?;
    tx.execute(
        "INSERT INTO ledger_move_ends (move_id, outcome) VALUES ($1, 'done')",
        &[&m.id],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Ends a move `undone`: the ledger stays where the directory has it.
pub async fn end_undone(main: &Conn, m: &Move) -> Result<(), StorageError> {
    main.execute(
        "INSERT INTO ledger_move_ends (move_id, outcome) VALUES ($1, 'undone')",
        &[&m.id],
    )
    .await?;
    Ok(())
}

/// The latest fence of a ledger on this cluster: the move that set it and whether it fences.
pub async fn fence_of(
    client: &impl GenericClient,
    ledger: LedgerId,
) -> Result<Option<(Uuid, bool)>, StorageError> {
    let row = client
        .query_opt(
            "SELECT move_id, fenced FROM ledger_fences WHERE ledger_id = $1
             ORDER BY fence_no DESC LIMIT 1",
            &[&ledger],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Fences the ledger on this cluster for move `id` (`fenced`), or lifts the fence (`!fenced`),
/// under the ledger's writer lock, so every write either committed before or sees it; nothing
/// when the latest fence already says so for that move.
pub async fn set_fence(
    client: &mut Conn,
    ledger: LedgerId,
    id: Uuid,
    fenced: bool,
) -> Result<(), StorageError> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&LEDGER_LOCK_CLASS, &ledger],
    )
    .await?;
    if fence_of(&tx, ledger).await? == Some((id, fenced)) {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO ledger_fences (ledger_id, fence_no, move_id, fenced)
         SELECT $1, coalesce(max(fence_no), 0) + 1, $2, $3 FROM ledger_fences WHERE ledger_id = $1",
        &[&ledger, &id, &fenced],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The journal's tables a move copies, in an order their references allow, each with the rows
/// of the ledger: `{L}` is its id, `{LO}`..`{HI}` the range of its stored sequences.
const TABLES: &[(&str, &str)] = &[
    ("accounts", "ledger_id = {L}"),
    ("idempotency_keys", "ledger_id = {L}"),
    ("account_terms", OF_ITS_ACCOUNTS),
    ("account_totals", OF_ITS_ACCOUNTS),
    ("postings", IN_ITS_SEQUENCES),
    ("entries", IN_ITS_SEQUENCES),
    ("hold_legs", IN_ITS_SEQUENCES),
    ("expiring_holds", OF_ITS_ACCOUNTS),
    ("rejections", "ledger_id = {L}"),
    ("outbox", IN_ITS_SEQUENCES),
    ("posting_hashes", IN_ITS_SEQUENCES),
    ("period_closes", "ledger_id = {L}"),
    ("period_close_balances", "ledger_id = {L}"),
    ("period_close_trial_balances", "ledger_id = {L}"),
    ("account_outbox", "ledger_id = {L}"),
];

/// The ledger's state rows (one each), which the target has from the ledger's placement and
/// a move overwrites.
const STATE_TABLES: &[&str] = &[
    "ledger_state",
    "outbox_progress",
    "digest_progress",
    "account_outbox_progress",
];

const OF_ITS_ACCOUNTS: &str =
    "account_id IN (SELECT account_id FROM accounts WHERE ledger_id = {L})";
const IN_ITS_SEQUENCES: &str = "sequence > {LO} AND sequence < {HI}";

/// The columns naming a cluster's own identities, mapped by a move (their tables allocate
/// them again on the target).
const OWN_IDS: &[&str] = &["account_id", "key_id", "event_id"];

/// `filter` for `ledger` (its values are numbers the ledger made, written into the SQL
/// because COPY takes no parameters).
fn rows_of(filter: &str, ledger: LedgerId) -> String {
    filter
        .replace("{LO}", &ledger::stored(ledger, 0).to_string())
        .replace("{HI}", &ledger::stored(ledger + 1, 0).to_string())
        .replace("{L}", &ledger.to_string())
}

/// A table's columns, in order: (name, whether the table makes it itself: an identity it
/// always assigns or a generated column).
async fn columns(
    client: &impl GenericClient,
    table: &str,
) -> Result<Vec<(String, bool)>, StorageError> {
    let rows = client
        .query(
            "SELECT attname::text, attidentity = 'a' OR attgenerated <> '' FROM pg_attribute
             WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped
             ORDER BY attnum",
            &[&table],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Copies the ledger's journal from one snapshot of the source (fenced: nothing of it changes
/// but its outbox's delivery) into one transaction of the target, which commits only when
/// every table's rows there have the digest they have in the snapshot; the target's copy is
/// fenced for the move in the same transaction (the mark that the copy is complete). The
/// number of rows copied.
pub async fn copy(source: &mut Conn, target: &mut Conn, m: &Move) -> Result<u64, StorageError> {
    let snap = source
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let tx = target.transaction().await?;
    snap.batch_execute("SET LOCAL TimeZone = 'UTC'").await?;
    tx.batch_execute("SET LOCAL TimeZone = 'UTC'").await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&LEDGER_LOCK_CLASS, &m.ledger],
    )
    .await?;
    let state = STATE_TABLES.iter().map(|t| (*t, "ledger_id = {L}"));
    let mut copied = 0;
    for (table, filter) in TABLES.iter().copied().chain(state) {
        copied += stage(&snap, &tx, table, &rows_of(filter, m.ledger)).await?;
    }
    insert_staged(&tx).await?;
    for (table, filter) in TABLES.iter().copied() {
        let filter = rows_of(filter, m.ledger);
        let (there, here) = (
            digest(&snap, table, &filter).await?,
            digest(&tx, table, &filter).await?,
        );
        if there != here {
            return Err(StorageError::Corrupt {
                row: format!("the copy of ledger id {} on {}", m.ledger, m.to),
                sequence: None,
                detail: format!(
                    "{table}: {} rows on {} and {} on {} after the copy, or their digests differ",
                    there.0, m.from, here.0, m.to
                ),
            });
        }
    }
    tx.execute(
        "INSERT INTO ledger_fences (ledger_id, fence_no, move_id, fenced)
         SELECT $1, coalesce(max(fence_no), 0) + 1, $2, true FROM ledger_fences WHERE ledger_id = $1",
        &[&m.ledger, &m.id],
    )
    .await?;
    tx.commit().await?;
    snap.commit().await?;
    Ok(copied)
}

/// Stages a table's rows of the ledger from the source's snapshot into a temporary table of
/// the target's transaction (`move_<table>`, the same columns), by binary COPY; the rows.
async fn stage(
    snap: &deadpool_postgres::Transaction<'_>,
    tx: &deadpool_postgres::Transaction<'_>,
    table: &str,
    filter: &str,
) -> Result<u64, StorageError> {
    tx.batch_execute(&format!(
        "CREATE TEMP TABLE move_{table} (LIKE {table}) ON COMMIT DROP"
    ))
    .await?;
    let rows = snap
        .copy_out(&format!(
            "COPY (SELECT * FROM {table} WHERE {filter}) TO STDOUT (FORMAT binary)"
        ))
        .await?;
    let sink = tx
        .copy_in(&format!("COPY move_{table} FROM STDIN (FORMAT binary)"))
        .await?;
    futures_util::pin_mut!(rows, sink);
    while let Some(chunk) = rows.next().await {
        sink.send(chunk?).await?;
    }
    Ok(sink.finish().await?)
}

/// The maps of the cluster's own identities, old (the source's) to new (the target's), built
/// after their tables' rows are in, by the natural keys the rows carry.
const ID_MAPS: &[(&str, &str)] = &[
    (
        "accounts",
        "CREATE TEMP TABLE move_account_ids ON COMMIT DROP AS
         SELECT s.account_id AS old, a.account_id AS new FROM move_accounts s
         JOIN accounts a ON a.ledger_id = s.ledger_id AND a.code = s.code;
         ALTER TABLE move_account_ids ADD PRIMARY KEY (old)",
    ),
    (
        "idempotency_keys",
        "CREATE TEMP TABLE move_key_ids ON COMMIT DROP AS
         SELECT s.key_id AS old, k.key_id AS new FROM move_idempotency_keys s
         JOIN idempotency_keys k ON k.ledger_id = s.ledger_id AND k.caller = s.caller
          AND k.idempotency_key = s.idempotency_key;
         ALTER TABLE move_key_ids ADD PRIMARY KEY (old)",
    ),
    (
        "account_outbox",
        "CREATE TEMP TABLE move_event_ids ON COMMIT DROP AS
         SELECT s.event_id AS old, a.event_id AS new FROM move_account_outbox s
         JOIN move_account_ids m ON m.old = s.account_id
         JOIN account_outbox a ON a.account_id = m.new AND a.terms_version = s.terms_version;
         ALTER TABLE move_event_ids ADD PRIMARY KEY (old)",
    ),
];

/// Inserts the staged rows into the journal's tables, the cluster's own ids mapped, and
/// overwrites the ledger's state rows with the staged ones.
async fn insert_staged(tx: &deadpool_postgres::Transaction<'_>) -> Result<(), StorageError> {
    for (table, _) in TABLES {
        let cols = columns(tx, table).await?;
        let kept: Vec<&str> = cols
            .iter()
            .filter(|(_, made)| !made)
            .map(|(c, _)| c.as_str())
            .collect();
        let exprs: Vec<String> = kept.iter().map(|c| mapped(c)).collect();
        let order = match cols
            .iter()
            .find(|(c, made)| *made && OWN_IDS.contains(&c.as_str()))
        {
            Some((c, _)) => format!(" ORDER BY s.{c}"),
            None => String::new(),
        };
        tx.execute(
            &format!(
                "INSERT INTO {table} ({}) SELECT {} FROM move_{table} s{order}",
                kept.join(", "),
                exprs.join(", ")
            ),
            &[],
        )
        .await?;
        if let Some((_, map)) = ID_MAPS.iter().find(|(t, _)| t == table) {
            tx.batch_execute(map).await?;
        }
    }
    for table in STATE_TABLES {
        let cols = columns(tx, table).await?;
        let names: Vec<&str> = cols.iter().map(|(c, _)| c.as_str()).collect();
        let exprs: Vec<String> = names.iter().map(|c| mapped(c)).collect();
        let sets: Vec<String> = names
            .iter()
            .filter(|c| **c != "ledger_id")
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        tx.execute(
            &format!(
                "INSERT INTO {table} ({}) SELECT {} FROM move_{table} s
                 ON CONFLICT (ledger_id) DO UPDATE SET {}",
                names.join(", "),
                exprs.join(", "),
                sets.join(", ")
            ),
            &[],
        )
        .await?;
    }
    Ok(())
}

/// The value a staged column is inserted with: itself, or the target's id for the source's.
fn mapped(column: &str) -> String {
    match column {
        "account_id" => "(SELECT m.new FROM move_account_ids m WHERE m.old = s.account_id)".into(),
        "key_id" => "(SELECT m.new FROM move_key_ids m WHERE m.old = s.key_id)".into(),
        // Published up to the last event the source had published: just before the first one
        // it had not (events are numbered in the source's order), else everything so far.
        "published_event_id" => "coalesce((SELECT min(m.new) - 1 FROM move_event_ids m
             WHERE m.old > s.published_event_id),
             (SELECT coalesce(max(event_id), 0) FROM account_outbox))"
            .into(),
        c => format!("s.{c}"),
    }
}

/// A table's rows of the ledger: how many, and the MD5 of their columns (as JSON, in one
/// order), with each cluster's own ids replaced by what they stand for (an account by its
/// code, a key by its caller and key; an event's number left out), so the same rows on two
/// clusters have the same digest.
async fn digest(
    client: &impl GenericClient,
    table: &str,
    filter: &str,
) -> Result<(i64, String), StorageError> {
    let cols = columns(client, table).await?;
    let has = |c: &str| cols.iter().any(|(n, _)| n == c);
    let mut row = String::from(
        "(to_jsonb(s) - ARRAY['account_id', 'key_id', 'event_id', 'published_event_id'])",
    );
    if has("account_id") {
        row.push_str(
            " || jsonb_build_object('account', (SELECT a.code FROM accounts a \
             WHERE a.account_id = s.account_id))",
        );
    }
    if has("key_id") {
        row.push_str(
            " || jsonb_build_object('key', (SELECT ARRAY[k.caller, k.idempotency_key] \
             FROM idempotency_keys k WHERE k.key_id = s.key_id))",
        );
    }
    let r = client
        .query_one(
            &format!(
                "SELECT count(*), coalesce(md5(string_agg(r, E'\\n' ORDER BY r COLLATE \"C\")), '')
                 FROM (SELECT ({row})::text AS r FROM {table} s WHERE {filter}) x"
            ),
            &[],
        )
        .await?;
    Ok((r.get(0), r.get(1)))
}

/// Whether this cluster holds journal rows of the ledger (accounts or postings).
pub async fn holds_rows(
    client: &impl GenericClient,
    ledger: LedgerId,
) -> Result<bool, StorageError> {
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM accounts WHERE ledger_id = $1)
                 OR EXISTS (SELECT 1 FROM postings WHERE sequence > $2 AND sequence < $3)",
            &[
                &ledger,
                &ledger::stored(ledger, 0),
                &ledger::stored(ledger + 1, 0),
            ],
        )
        .await?;
    Ok(row.get(0))
}

/// After the switch: the source's outbox of the ledger marked delivered up to its last
/// posting, so its publisher stops there (the target's goes on from the copied progress).
pub async fn retire_source_outbox(source: &Conn, ledger: LedgerId) -> Result<(), StorageError> {
    source
        .execute(
            "UPDATE outbox_progress p SET published_sequence = s.last_sequence,
                    updated_at = clock_timestamp()
             FROM ledger_state s WHERE p.ledger_id = $1 AND s.ledger_id = $1
               AND p.published_sequence < s.last_sequence",
            &[&ledger],
        )
        .await?;
    Ok(())
}
