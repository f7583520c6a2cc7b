//! What the batch writes of its period closes (`period_closes`, migration 0017).

use ledger_core::ledger::LedgerId;
use ledger_core::write::Plan;
use time::OffsetDateTime;

/// A statement parameter.
type P = dyn tokio_postgres::types::ToSql + Sync;

/// The batch's closes, in the order decided.
pub(super) const CLOSES_SQL: &str = "INSERT INTO period_closes (ledger_id, effective_before, after_sequence, recorded_at,
                                   caller, idempotency_key, memo, key_id)
     SELECT $1::integer, u.* FROM unnest($2::timestamptz[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[],
                                        $7::text[], $8::bigint[]) AS u";

/// The plan's closes as columns.
#[derive(Default)]
pub(super) struct Closes {
    pub before: Vec<OffsetDateTime>,
    pub after: Vec<i64>,
    pub recorded: Vec<OffsetDateTime>,
    pub caller: Vec<String>,
    pub key: Vec<String>,
    pub memo: Vec<String>,
    pub key_id: Vec<i64>,
}

impl Closes {
    pub fn of(plan: &Plan) -> Closes {
        let mut c = Closes::default();
        for p in &plan.closes {
            c.before.push(p.close.effective_before);
            c.after.push(p.close.after_sequence);
            c.recorded.push(p.close.recorded_at);
            c.caller.push(p.close.caller.clone());
            c.key.push(p.close.idempotency_key.clone());
            c.memo.push(p.close.memo.clone());
            c.key_id.push(p.key_id);
        }
        c
    }

    /// [`CLOSES_SQL`]'s parameters for the batch's ledger.
    pub fn params<'a>(&'a self, ledger: &'a LedgerId) -> [&'a P; 8] {
        [
            ledger,
            &self.before,
            &self.after,
            &self.recorded,
            &self.caller,
            &self.key,
            &self.memo,
            &self.key_id,
        ]
    }

    /// The ledger's close after the batch (`None`: it decided none).
    pub fn last(&self) -> Option<OffsetDateTime> {
        self.before.last().copied()
    }
}
