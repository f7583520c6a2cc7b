//! Conversions between protobuf messages and domain types.

use super::pb;
use ledger_core::account::Metadata;
use ledger_core::amount::format_minor;
use ledger_core::hold::CaptureRequest;
use ledger_core::posting::{Check, ConditionRequest, LegRequest, PostRequest, VoidRequest};
use ledger_core::record::{
    AppliedAsOf, AsOf, Balance, CloseKind, CurrencyTotal, Entry, HoldStatus, Posting, PostingKind,
};
use ledger_core::terms::{AccountStatus, AccountVersion, UpdateRequest};
use ledger_core::write::Written;
use ledger_core::{Account, Direction, LedgerError, NormalBalance, Reason};
use prost_types::Timestamp;
use time::OffsetDateTime;

/// A protobuf timestamp as a time, truncated to microseconds (the journal's precision).
/// Anything outside the proto's own range (`TIMESTAMP_RANGE`) is refused, naming `field`.
pub fn time_from_pb(field: &str, ts: &Timestamp) -> Result<OffsetDateTime, LedgerError> {
    use ledger_core::limits::{
        MAX_TIMESTAMP_NANOS, MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS, TIMESTAMP_RANGE,
    };
    let in_range = (MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS).contains(&ts.seconds)
        && (0..=MAX_TIMESTAMP_NANOS).contains(&ts.nanos);
    let nanos = i128::from(ts.seconds) * 1_000_000_000 + i128::from(ts.nanos / 1000 * 1000);
    match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) if in_range => Ok(t),
        _ => Err(LedgerError::new(
            Reason::InvalidField,
            format!(
                "{field} ({} seconds, {} nanos) is outside {TIMESTAMP_RANGE}",
                ts.seconds, ts.nanos
            ),
        )
        .with("field", field)),
    }
}

/// A time as a protobuf timestamp.
pub fn time_to_pb(t: OffsetDateTime) -> Timestamp {
    let n = t.unix_timestamp_nanos();
    Timestamp {
        seconds: n.div_euclid(1_000_000_000) as i64,
        nanos: n.rem_euclid(1_000_000_000) as i32,
    }
}

pub fn opt_time(
    field: &str,
    ts: Option<&Timestamp>,
) -> Result<Option<OffsetDateTime>, LedgerError> {
    ts.map(|t| time_from_pb(field, t)).transpose()
}

/// A metadata map, sorted.
pub fn metadata(m: std::collections::HashMap<String, String>) -> Metadata {
    m.into_iter().collect()
}

fn metadata_to_pb(m: &Metadata) -> std::collections::HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The normal side from its enum value (`None` when unspecified or unknown).
pub fn normal_from_pb(v: i32) -> Option<NormalBalance> {
    match pb::NormalBalance::try_from(v) {
        Ok(pb::NormalBalance::Debit) => Some(NormalBalance::Debit),
        Ok(pb::NormalBalance::Credit) => Some(NormalBalance::Credit),
        Ok(pb::NormalBalance::Unspecified) | Err(_) => None,
    }
}

fn normal_to_pb(n: NormalBalance) -> i32 {
    match n {
        NormalBalance::Debit => pb::NormalBalance::Debit as i32,
        NormalBalance::Credit => pb::NormalBalance::Credit as i32,
    }
}

fn direction_from_pb(v: i32) -> Option<Direction> {
    match pb::Direction::try_from(v) {
        Ok(pb::Direction::Debit) => Some(Direction::Debit),
        Ok(pb::Direction::Credit) => Some(Direction::Credit),
        Ok(pb::Direction::Unspecified) | Err(_) => None,
    }
}

/// A direction as its enum value.
pub fn direction_to_pb(d: Direction) -> i32 {
    match d {
        Direction::Debit => pb::Direction::Debit as i32,
        Direction::Credit => pb::Direction::Credit as i32,
    }
}

/// An account message; `ledger` is the code of its ledger.
pub fn account_to_pb(a: &Account, v: &AccountVersion, ledger: &str) -> pb::Account {
    let t = &v.terms;
    let amount = |m: Option<i128>| m.map(|m| format_minor(m, a.scale)).unwrap_or_default();
    pb::Account {
        ledger: ledger.to_owned(),
        code: a.code.clone(),
        currency: a.currency.clone(),
        scale: u32::from(a.scale),
        normal_balance: normal_to_pb(a.normal_balance),
        allow_negative: a.allow_negative,
        metadata: metadata_to_pb(&a.metadata),
        created_at: Some(time_to_pb(a.created_at)),
        version: t.version as u64,
        status: account_status_to_pb(t.status),
        balance_floor: amount(t.floor),
        balance_ceiling: amount(t.ceiling),
        debit_limits: t
            .debit_limits
            .iter()
            .map(|l| pb::DebitLimit {
                amount: format_minor(l.amount, a.scale),
                window_seconds: l.window_seconds,
            })
            .collect(),
        version_info: Some(pb::AccountVersionInfo {
            recorded_at: Some(time_to_pb(v.recorded_at)),
            after_sequence: in_ledger(v.after_sequence as u64),
            caller: v.caller.clone(),
            reason: v.reason.clone(),
            changed: v.changed.clone(),
            idempotency_key: v.idempotency_key.clone(),
        }),
    }
}

fn account_status_to_pb(s: AccountStatus) -> i32 {
    match s {
        AccountStatus::Open => pb::AccountStatus::Open as i32,
        AccountStatus::Frozen => pb::AccountStatus::Frozen as i32,
        AccountStatus::Closed => pb::AccountStatus::Closed as i32,
    }
}

fn account_status_from_pb(v: i32) -> Option<AccountStatus> {
    match pb::AccountStatus::try_from(v) {
        Ok(pb::AccountStatus::Open) => Some(AccountStatus::Open),
        Ok(pb::AccountStatus::Frozen) => Some(AccountStatus::Frozen),
        Ok(pb::AccountStatus::Closed) => Some(AccountStatus::Closed),
        _ => None,
    }
}

/// An `UpdateAccount` request in domain terms.
pub fn update_from_pb(r: pb::UpdateAccountRequest) -> UpdateRequest {
    UpdateRequest {
        idempotency_key: r.idempotency_key,
        code: r.code,
        expected_version: r.expected_version,
        update_mask: r.update_mask.map(|m| m.paths).unwrap_or_default(),
        status: account_status_from_pb(r.status),
        floor: r.balance_floor,
        ceiling: r.balance_ceiling,
        debit_limits: r
            .debit_limits
            .into_iter()
            .map(|l| (l.amount, l.window_seconds))
            .collect(),
        reason: r.reason,
    }
}

fn conditions_from_pb(c: Vec<pb::Condition>) -> Vec<ConditionRequest> {
    use pb::condition::Check as C;
    c.into_iter()
        .map(|c| ConditionRequest {
            account: c.account,
            check: c.check.map(|k| match k {
                C::LastSequence(n) => Check::LastSequence(n),
                C::AvailableAtLeast(m) => Check::AvailableAtLeast(m),
            }),
        })
        .collect()
}

fn legs_from_pb(legs: Vec<pb::Leg>) -> Vec<LegRequest> {
    legs.into_iter()
        .map(|l| LegRequest {
            account: l.account,
            direction: direction_from_pb(l.direction),
            amount: l.amount,
        })
        .collect()
}

/// A `Post` request in domain terms.
pub fn post_from_pb(r: pb::PostRequest) -> Result<PostRequest, LedgerError> {
    Ok(PostRequest {
        idempotency_key: r.idempotency_key,
        legs: legs_from_pb(r.legs),
        effective_at: opt_time("effective_at", r.effective_at.as_ref())?,
        memo: r.memo,
        metadata: metadata(r.metadata),
        hold: r.hold,
        hold_expires_at: opt_time("hold_expires_at", r.hold_expires_at.as_ref())?,
        conditions: conditions_from_pb(r.conditions),
    })
}

/// A `Capture` request in domain terms.
pub fn capture_from_pb(r: pb::CaptureRequest) -> Result<CaptureRequest, LedgerError> {
    Ok(CaptureRequest {
        idempotency_key: r.idempotency_key,
        hold_posting_id: r.hold_posting_id,
        legs: legs_from_pb(r.legs),
        effective_at: opt_time("effective_at", r.effective_at.as_ref())?,
        memo: r.memo,
        metadata: metadata(r.metadata),
    })
}

/// A `Void` request in domain terms.
pub fn void_from_pb(r: pb::VoidRequest) -> Result<VoidRequest, LedgerError> {
    Ok(VoidRequest {
        idempotency_key: r.idempotency_key,
        posting_id: r.posting_id,
        reason: r.reason,
        effective_at: opt_time("effective_at", r.effective_at.as_ref())?,
    })
}

/// A posting message; `ledger` is the code of its ledger, and its sequence the one within it.
pub fn posting_to_pb(p: &Posting, ledger: &str) -> pb::Posting {
    pb::Posting {
        ledger: ledger.to_owned(),
        hash: p
            .hash
            .as_ref()
            .map(ledger_core::journal::to_hex)
            .unwrap_or_default(),
        posting_id: p.posting_id.to_string(),
        sequence: in_ledger(p.sequence),
        idempotency_key: p.idempotency_key.clone(),
        legs: p
            .legs
            .iter()
            .map(|l| pb::Leg {
                account: l.account.clone(),
                direction: direction_to_pb(l.direction),
                amount: l.amount.to_string(),
            })
            .collect(),
        effective_at: Some(time_to_pb(p.effective_at)),
        recorded_at: Some(time_to_pb(p.recorded_at)),
        memo: p.memo.clone(),
        metadata: metadata_to_pb(&p.metadata),
        voids_posting_id: p
            .voids_posting_id
            .map(|u| u.to_string())
            .unwrap_or_default(),
        voided_by_posting_id: p
            .voided_by_posting_id
            .map(|u| u.to_string())
            .unwrap_or_default(),
        void_reason: p.void_reason.clone().unwrap_or_default(),
        caller: p.caller.clone(),
        hold: p.hold.is_some(),
        hold_expires_at: p.hold.and_then(|h| h.expires_at).map(time_to_pb),
        hold_status: p
            .hold
            .map_or(pb::HoldStatus::Unspecified, |h| status_to_pb(h.status()))
            as i32,
        captured_by_posting_id: closed_by(p, |k| k == CloseKind::Capture),
        released_by_posting_id: closed_by(p, |k| k != CloseKind::Capture),
        captures_hold_posting_id: p
            .closes
            .filter(|c| c.kind == CloseKind::Capture)
            .map(|c| c.hold.to_string())
            .unwrap_or_default(),
        releases_hold_posting_id: p.releases_hold().map(|h| h.to_string()).unwrap_or_default(),
        kind: kind_to_pb(p.kind()) as i32,
    }
}

fn kind_to_pb(k: PostingKind) -> pb::PostingKind {
    match k {
        PostingKind::Posting => pb::PostingKind::Posting,
        PostingKind::Hold => pb::PostingKind::Hold,
        PostingKind::Capture => pb::PostingKind::Capture,
        PostingKind::Release => pb::PostingKind::Release,
        PostingKind::Expiry => pb::PostingKind::Expiry,
        PostingKind::Void => pb::PostingKind::Void,
    }
}

fn status_to_pb(s: HoldStatus) -> pb::HoldStatus {
    match s {
        HoldStatus::Pending => pb::HoldStatus::Pending,
        HoldStatus::Captured => pb::HoldStatus::Captured,
        HoldStatus::Released => pb::HoldStatus::Released,
        HoldStatus::Expired => pb::HoldStatus::Expired,
    }
}

/// The posting that closed a hold, when it closed it in a way `kind` accepts.
fn closed_by(p: &Posting, kind: impl Fn(CloseKind) -> bool) -> String {
    p.hold
        .and_then(|h| h.closed_by)
        .filter(|(_, k)| kind(*k))
        .map(|(by, _)| by.to_string())
        .unwrap_or_default()
}

/// One `PostBatch` result: the response, or the error exactly as `Post` would have answered
/// it (the `google.rpc.Status` a failed call carries, with its `ErrorInfo`).
pub fn batch_result_to_pb(
    outcome: Result<Written, LedgerError>,
    ledger: &str,
) -> pb::PostBatchResult {
    use pb::post_batch_result::Outcome;
    pb::PostBatchResult {
        outcome: Some(match outcome {
            Ok(w) => {
                let d = w.posted();
                Outcome::Response(pb::PostResponse {
                    posting: Some(posting_to_pb(&d.posting, ledger)),
                    replayed: d.replayed,
                })
            }
            Err(e) => Outcome::Error(super::status::to_rpc_status(e)),
        }),
    }
}

/// A requested cut-off.
/// ListPostings' filters besides the account.
pub fn posting_filter_from_pb(
    r: &pb::ListPostingsRequest,
) -> Result<ledger_core::search::PostingFilter, LedgerError> {
    let range = |field: &str, t: Option<pb::TimeRange>| -> Result<_, LedgerError> {
        let t = t.unwrap_or_default();
        Ok(ledger_core::search::TimeRange {
            start: opt_time(&format!("{field}.start"), t.start.as_ref())?,
            end: opt_time(&format!("{field}.end"), t.end.as_ref())?,
        })
    };
    Ok(ledger_core::search::PostingFilter {
        metadata: metadata(r.metadata.clone()),
        recorded: range("recorded", r.recorded)?,
        effective: range("effective", r.effective)?,
        caller: (!r.caller.is_empty()).then(|| r.caller.clone()),
    })
}

pub fn as_of_from_pb(a: Option<pb::AsOf>) -> Result<AsOf, LedgerError> {
    let a = a.unwrap_or_default();
    Ok(AsOf {
        recorded_at: opt_time("as_of.recorded_at", a.recorded_at.as_ref())?,
        effective_at: opt_time("as_of.effective_at", a.effective_at.as_ref())?,
    })
}

fn applied_to_pb(a: &AppliedAsOf) -> pb::AsOf {
    pb::AsOf {
        recorded_at: Some(time_to_pb(a.recorded_at)),
        effective_at: Some(time_to_pb(a.effective_at)),
    }
}

/// A balance message; amounts at the account's scale.
pub fn balance_to_pb(b: &Balance) -> pb::Balance {
    pb::Balance {
        account: b.account.clone(),
        currency: b.currency.clone(),
        debits: format_minor(b.debits, b.scale),
        credits: format_minor(b.credits, b.scale),
        balance: format_minor(b.balance, b.scale),
        held_debits: format_minor(b.held_debits, b.scale),
        held_credits: format_minor(b.held_credits, b.scale),
        available: format_minor(b.available, b.scale),
        as_of_sequence: in_ledger(b.as_of.sequence),
        as_of: Some(applied_to_pb(&b.as_of)),
        last_sequence: in_ledger(b.last_sequence as u64),
    }
}

/// A per-currency total.
pub fn total_to_pb(t: &CurrencyTotal) -> pb::CurrencyTotal {
    pb::CurrencyTotal {
        currency: t.currency.clone(),
        debits: format_minor(t.debits, t.scale),
        credits: format_minor(t.credits, t.scale),
        held_debits: format_minor(t.held_debits, t.scale),
        held_credits: format_minor(t.held_credits, t.scale),
    }
}

/// A rollup node; amounts at their currency's scale.
pub fn rollup_to_pb(r: &ledger_core::rollup::Rollup) -> pb::Rollup {
    let total = |t: &ledger_core::rollup::RollupTotal| pb::RollupTotal {
        currency: t.currency.clone(),
        debits: format_minor(t.debits, t.scale),
        credits: format_minor(t.credits, t.scale),
        balance: format_minor(t.balance, t.scale),
        held_debits: format_minor(t.held_debits, t.scale),
        held_credits: format_minor(t.held_credits, t.scale),
        available: format_minor(t.available, t.scale),
    };
    pb::Rollup {
        node: r.node.clone(),
        account_count: r.account_count,
        totals: r.totals.iter().map(total).collect(),
    }
}

/// ListRollups' answer: its page, the cut-off it applied, the next page's token.
pub fn rollups_to_pb(
    page: &[ledger_core::rollup::Rollup],
    at: &AppliedAsOf,
    next: String,
) -> pb::ListRollupsResponse {
    pb::ListRollupsResponse {
        rollups: page.iter().map(rollup_to_pb).collect(),
        as_of: Some(applied_to_pb(at)),
        as_of_sequence: in_ledger(at.sequence),
        next_page_token: next,
    }
}

/// The sequence within its ledger of a stored sequence (what callers see).
fn in_ledger(stored: u64) -> u64 {
    ledger_core::ledger::in_ledger(stored as i64) as u64
}

/// A ledger message.
pub fn ledger_to_pb(l: &ledger_core::ledger::Ledger) -> pb::LedgerInfo {
    pb::LedgerInfo {
        code: l.code.clone(),
        description: l.description.clone(),
        metadata: metadata_to_pb(&l.metadata),
        created_at: Some(time_to_pb(l.created_at)),
        cluster: l.cluster.clone(),
    }
}

/// A statement line.
pub fn entry_to_pb(e: &Entry) -> pb::Entry {
    pb::Entry {
        posting_id: e.posting_id.to_string(),
        sequence: in_ledger(e.sequence),
        recorded_at: Some(time_to_pb(e.recorded_at)),
        effective_at: Some(time_to_pb(e.effective_at)),
        direction: direction_to_pb(e.direction),
        amount: e.amount.to_string(),
        balance_after: format_minor(e.balance_after, e.amount.scale()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger_core::amount::Amount;
    use ledger_core::page::WireSize;
    use ledger_core::record::{Closes, HoldState, PostedLeg};
    use proptest::prelude::*;

    fn text(max: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(any::<char>(), 0..max).prop_map(|c| c.into_iter().collect())
    }

    fn meta() -> impl Strategy<Value = Metadata> {
        prop::collection::btree_map(text(64), text(512), 0..32)
    }

    fn amount() -> impl Strategy<Value = Amount> {
        (1..=i128::MAX, 0u8..=18).prop_map(|(m, s)| Amount::from_minor(m, s))
    }

    fn at() -> impl Strategy<Value = OffsetDateTime> {
        (-62_000_000_000i64..250_000_000_000)
            .prop_map(|s| OffsetDateTime::from_unix_timestamp(s).unwrap())
    }

    fn posting() -> impl Strategy<Value = Posting> {
        let leg = (text(128), any::<bool>(), amount()).prop_map(|(account, d, amount)| PostedLeg {
            account,
            direction: if d {
                Direction::Debit
            } else {
                Direction::Credit
            },
            amount,
        });
        (
            prop::collection::vec(leg, 0..100),
            text(255),
            text(1024),
            meta(),
            text(1024),
            text(128),
            at(),
            any::<u64>(),
        )
            .prop_map(
                |(legs, key, memo, metadata, reason, caller, t, sequence)| Posting {
                    posting_id: uuid::Uuid::now_v7(),
                    sequence,
                    caller,
                    idempotency_key: key,
                    legs,
                    effective_at: t,
                    recorded_at: t,
                    memo,
                    metadata,
                    voids_posting_id: Some(uuid::Uuid::now_v7()),
                    voided_by_posting_id: Some(uuid::Uuid::now_v7()),
                    hash: None,
                    void_reason: Some(reason),
                    hold: Some(HoldState {
                        expires_at: Some(t),
                        closed_by: Some((uuid::Uuid::now_v7(), CloseKind::Release)),
                        lapsed: false,
                    }),
                    closes: Some(Closes {
                        hold: uuid::Uuid::now_v7(),
                        kind: CloseKind::Release,
                    }),
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The page byte limit relies on these bounds being above the real encoding (as an
        /// element of a repeated field: the encoding and its tag and length).
        #[test]
        fn wire_sizes_bound_the_real_encoding(p in posting(), code in text(128), currency in text(16), m in meta(), a in amount(), t in at()) {
            use prost::Message;
            let framed = |len: usize| len + prost::length_delimiter_len(len) + 1;
            let ledger = "l".repeat(ledger_core::limits::MAX_LEDGER_CODE_CHARS);
            prop_assert!(framed(posting_to_pb(&p, &ledger).encoded_len()) <= p.wire_size());
            let account = Account { id: 1, ledger: 1, code: code.clone(), currency: currency.clone(), scale: 18, normal_balance: NormalBalance::Credit, allow_negative: true, metadata: m, created_at: t };
            let version = AccountVersion {
                account_id: 1,
                terms: ledger_core::terms::Terms {
                    version: i64::MAX,
                    status: AccountStatus::Frozen,
                    floor: Some(-ledger_core::limits::MAX_TOTAL_MINOR),
                    ceiling: Some(ledger_core::limits::MAX_TOTAL_MINOR),
                    debit_limits: vec![ledger_core::terms::DebitLimit { amount: ledger_core::limits::MAX_TOTAL_MINOR, window_seconds: u32::MAX }; ledger_core::limits::MAX_DEBIT_LIMITS],
                },
                after_sequence: i64::MAX,
                recorded_at: t,
                caller: "c".repeat(ledger_core::limits::MAX_CALLER_BYTES),
                idempotency_key: "k".repeat(ledger_core::limits::MAX_IDEMPOTENCY_KEY_BYTES),
                reason: "r".repeat(ledger_core::limits::MAX_MEMO_BYTES),
                changed: ledger_core::terms::Field::ALL.iter().map(|f| f.path().to_owned()).collect(),
            };
            prop_assert!(framed(account_to_pb(&account, &version, &ledger).encoded_len()) <= account.wire_size());
            let at = AppliedAsOf { recorded_at: t, effective_at: t, sequence: u64::MAX };
            let b = Balance { account: code, currency: currency.clone(), scale: 18, debits: i128::MAX, credits: i128::MIN, balance: i128::MIN, held_debits: i128::MIN, held_credits: i128::MIN, available: i128::MIN, as_of: at, last_sequence: i64::MAX };
            prop_assert!(framed(balance_to_pb(&b).encoded_len()) <= b.wire_size());
            let total = CurrencyTotal { currency, scale: 18, debits: i128::MIN, credits: i128::MIN, held_debits: i128::MIN, held_credits: i128::MIN };
            prop_assert!(framed(total_to_pb(&total).encoded_len()) <= total.wire_size());
            let e = Entry { posting_id: p.posting_id, sequence: u64::MAX, recorded_at: t, effective_at: t, direction: Direction::Credit, amount: a, balance_after: i128::MIN };
            prop_assert!(framed(entry_to_pb(&e).encoded_len()) <= e.wire_size());
        }
    }

    #[test]
    fn timestamps_round_trip_at_microsecond_precision() {
        let ts = Timestamp {
            seconds: 1_700_000_000,
            nanos: 123_456_789,
        };
        let t = time_from_pb("t", &ts).unwrap();
        assert_eq!(
            time_to_pb(t),
            Timestamp {
                seconds: 1_700_000_000,
                nanos: 123_456_000
            }
        );
        assert!(time_from_pb(
            "t",
            &Timestamp {
                seconds: 0,
                nanos: -1
            }
        )
        .is_err());
        assert!(time_from_pb(
            "t",
            &Timestamp {
                seconds: i64::MAX,
                nanos: 0
            }
        )
        .is_err());
        assert!(time_from_pb(
            "t",
            &Timestamp {
                seconds: -62_200_000_000,
                nanos: 0
            }
        )
        .is_err());
    }

    #[test]
    fn the_protos_whole_timestamp_range_is_taken_and_a_value_outside_it_names_its_field() {
        use ledger_core::limits::{MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS};
        let ts = |seconds, nanos| Timestamp { seconds, nanos };
        let first = time_from_pb("f", &ts(MIN_TIMESTAMP_SECONDS, 0)).unwrap();
        assert_eq!(ledger_core::record::rfc3339(first), "0001-01-01T00:00:00Z");
        let last = time_from_pb("f", &ts(MAX_TIMESTAMP_SECONDS, 999_999_999)).unwrap();
        assert_eq!(
            ledger_core::record::rfc3339(last),
            "9999-12-31T23:59:59.999999Z"
        );
        for bad in [
            ts(MAX_TIMESTAMP_SECONDS + 1, 0),
            ts(MIN_TIMESTAMP_SECONDS - 1, 999_999_999),
            ts(0, -1),
            ts(0, 1_000_000_000),
        ] {
            let e = time_from_pb("as_of.recorded_at", &bad).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidField);
            assert_eq!(e.metadata["field"], "as_of.recorded_at");
            assert!(e.message.contains("9999-12-31T23:59:59.999999999Z"), "{e}");
        }
    }
}
