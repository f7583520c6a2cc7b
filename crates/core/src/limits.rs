//! Every limit the ledger enforces, by name. Each error that a limit causes names the limit.

/// Legs in one posting.
pub const MAX_LEGS: usize = 100;
/// Minimum legs in one posting.
pub const MIN_LEGS: usize = 2;
/// Bytes of a posting's memo or a void's reason.
pub const MAX_MEMO_BYTES: usize = 1024;
/// Entries in a metadata map.
pub const MAX_METADATA_ENTRIES: usize = 32;
/// Bytes of one metadata key.
pub const MAX_METADATA_KEY_BYTES: usize = 64;
/// Bytes of one metadata value.
pub const MAX_METADATA_VALUE_BYTES: usize = 512;
/// Largest page a List* call returns.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// Page size when the request leaves it at 0.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// Bytes of an idempotency key.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;
/// Characters of an account code.
pub const MAX_ACCOUNT_CODE_CHARS: usize = 128;
/// Bytes of one decoded gRPC request.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Requests in one `PostBatch` call: a settlement file or a payout run goes in a few calls,
/// and one call's requests always fit one write batch (`MAX_BATCH`'s default).
pub const MAX_BATCH_REQUESTS: usize = 1000;
/// Bytes of one decoded `PostBatch` request, its own limit above [`MAX_REQUEST_BYTES`]: a
/// thousand ordinary postings (two legs, a memo, a few metadata entries: 200 bytes to 2 KiB
/// each) would not fit 1 MiB, so the batch limit of requests could never be reached. 4 MiB
/// (4 KiB a posting on average) keeps what one call makes the server decode and hold small,
/// and its answer always under the server's largest response (see
/// [`MAX_BATCH_RESPONSE_BYTES`]).
pub const MAX_BATCH_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// Bytes a `PostBatch` answer may add to its request, at most, per leg: the amount rendered
/// with the account's scale (up to 18 decimals, the point and a leading zero), and the leg's
/// longer length prefixes.
pub const BATCH_GROWTH_PER_LEG: usize = 24;
/// Bytes of one `PostBatch` result beyond its request's own, at most: a posting's id,
/// sequence, two times, caller and framing, or an error (its message quotes values cut at 80
/// characters, its `ErrorInfo` names at most an account, a key and a limit).
pub const BATCH_RESULT_OVERHEAD: usize = 2048;
/// The largest `PostBatch` answer: the request, what each leg and each result may add.
pub const MAX_BATCH_RESPONSE_BYTES: usize = MAX_BATCH_REQUEST_BYTES
    + MAX_BATCH_REQUESTS * MAX_LEGS * BATCH_GROWTH_PER_LEG
    + MAX_BATCH_REQUESTS * BATCH_RESULT_OVERHEAD;
/// Digits of one leg's amount in minor units (the integer part and the decimals together).
pub const MAX_AMOUNT_DIGITS: usize = 30;
/// Largest absolute value of an account's total debits or credits, in minor units (10^36).
pub const MAX_TOTAL_MINOR: i128 = 1_000_000_000_000_000_000_000_000_000_000_000_000;

/// Largest sum of totals a read adds up over accounts (a trial balance's per-currency totals),
/// in minor units: what 128 bits hold (±1.7·10^38, 170 accounts at [`MAX_TOTAL_MINOR`]).
/// Beyond it the read is refused naming this limit, never wrapped.
pub const MAX_SUM_MINOR: i128 = i128::MAX;

/// Adds `b` to the running sum `a` of totals, or refuses the read beyond [`MAX_SUM_MINOR`].
pub fn add_to_sum(a: &mut i128, b: i128, what: &str) -> Result<(), crate::error::LedgerError> {
    match a.checked_add(b) {
        Some(sum) => {
            *a = sum;
            Ok(())
        }
        None => Err(crate::error::LedgerError::limit(
            what,
            "MAX_SUM_MINOR",
            MAX_SUM_MINOR,
            "beyond it",
        )),
    }
}
/// Largest account scale (decimal places).
pub const MAX_SCALE: u32 = 18;
/// Bytes of a page token (base64url text). A trial balance's token carries its totals (up to
/// [`MAX_TOKEN_TOTALS`] currencies), the others a position and a cut-off.
pub const MAX_PAGE_TOKEN_BYTES: usize = 8192;
/// Bytes of one List* answer's items, at most (estimated from above, see `domain::page`): a
/// page ends early, with a next page token, when the next item would pass it. Well under the
/// server's encoding limit of 16 MiB.
pub const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;
/// Characters of a currency code.
pub const MAX_CURRENCY_CHARS: usize = 16;
/// Currencies whose totals a trial balance's page token carries, so later pages do not sum
/// every account again; a trial balance over more currencies sums them on each page.
pub const MAX_TOKEN_TOTALS: usize = 64;
/// Currencies in one trial balance (`ListBalances` totals), at most; narrow the prefix beyond.
pub const MAX_TRIAL_BALANCE_CURRENCIES: usize = 1000;
/// Segments below its prefix a `ListRollups` goes, at most (a code has at most 64).
pub const MAX_ROLLUP_DEPTH: u32 = 16;
/// Metadata entries a `ListPostings` filter may require, at most.
pub const MAX_FILTER_METADATA: usize = 16;

/// The earliest second of any time a request carries (`effective_at`, `hold_expires_at`,
/// `as_of`): 0001-01-01T00:00:00Z, the first of a `google.protobuf.Timestamp`. Every time
/// field of every request takes the proto's whole range, no narrower.
pub const MIN_TIMESTAMP_SECONDS: i64 = -62_135_596_800;
/// The latest second: 9999-12-31T23:59:59Z, the last of a `google.protobuf.Timestamp` (with
/// up to [`MAX_TIMESTAMP_NANOS`] more).
pub const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_799;
/// The largest `nanos` of a Timestamp (they run 0..=999,999,999; the ledger keeps
/// microseconds, so it cuts the rest).
pub const MAX_TIMESTAMP_NANOS: i32 = 999_999_999;
/// The range as people read it, for messages.
pub const TIMESTAMP_RANGE: &str = "0001-01-01T00:00:00Z ..= 9999-12-31T23:59:59.999999999Z \
    (MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS, nanos 0..=MAX_TIMESTAMP_NANOS), the range of a protobuf Timestamp";

/// Longest the ledger takes to record the release of an expired hold after its expiry time,
/// under normal load and the default expiry poll (a capture or void after the expiry time is
/// refused whether or not the release is recorded yet).
pub const HOLD_EXPIRY_LAG_MAX: std::time::Duration = std::time::Duration::from_secs(1);
/// Releases the expiry task asks for in one round, at most (the rest in the next rounds).
pub const MAX_EXPIRIES_PER_ROUND: usize = 1000;

// A round's releases are one writer job; the tuning keeps room for a job of MAX_BATCH_REQUESTS.
const _: () = assert!(MAX_EXPIRIES_PER_ROUND <= MAX_BATCH_REQUESTS);

// A token carrying the most totals stays under its limit: per currency its code (a length and
// up to 16 bytes), its scale and four totals under 10^37 (18 bytes each as zigzag varints),
// plus the cut-off and the position (a code of up to 128 bytes), in base64 (4/3).
const _: () = assert!(
    (MAX_TOKEN_TOTALS * (1 + MAX_CURRENCY_CHARS + 2 + 4 * 18)
        + 3 * 19
        + 2
        + MAX_ACCOUNT_CODE_CHARS
        + 1
        + 16)
        * 4
        / 3
        + 4
        <= MAX_PAGE_TOKEN_BYTES
);

/// Bytes of a caller name: the auth file's names are checked against it, and every answer's
/// size is bounded with it.
pub const MAX_CALLER_BYTES: usize = 128;
/// Debit limits one account version carries.
pub const MAX_DEBIT_LIMITS: usize = 4;
/// The longest window of a debit limit: 366 days, in seconds.
pub const MAX_LIMIT_WINDOW_SECONDS: u32 = 366 * 24 * 3600;
/// Conditions one posting carries.
pub const MAX_CONDITIONS: usize = 8;
/// (Account, window) pairs a writer lane remembers of one ledger's debit windows between
/// batches (`storage::batch::memo`); past it, it forgets them all and reads them again.
pub const MAX_REMEMBERED_WINDOWS: usize = 100_000;
/// Debit legs a writer lane keeps of one ledger's windows (read ahead of their cuts, see
/// `storage::batch::memo`); past it, it forgets them all and reads them again.
pub const MAX_REMEMBERED_LEGS: usize = 1_000_000;

/// Characters of a cluster's name (`serve --cluster NAME=URL`), at most.
pub const MAX_CLUSTER_NAME_CHARS: usize = 32;
/// Clusters one server routes to (`main` and those of `--cluster`), at most.
pub const MAX_CLUSTERS: usize = 16;
/// Characters of a ledger code.
pub const MAX_LEDGER_CODE_CHARS: usize = 64;
/// Bytes of a ledger's description.
pub const MAX_LEDGER_DESCRIPTION_BYTES: usize = 1024;
/// Bits of a stored sequence that count within its ledger: a ledger holds at most
/// 2^40 - 1 (about 1.1 trillion) postings (`ledger::MAX_SEQUENCE_IN_LEDGER`).
pub const SEQUENCE_BITS: u32 = 40;
/// Ledgers one database holds (their ids fill the 23 bits of a stored sequence above
/// [`SEQUENCE_BITS`]; the default ledger is id 0).
pub const MAX_LEDGERS: i32 = (1 << (63 - SEQUENCE_BITS)) - 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_of_totals_beyond_128_bits_is_refused_naming_the_limit_not_wrapped() {
        let mut sum = 0i128;
        for _ in 0..170 {
            add_to_sum(&mut sum, MAX_TOTAL_MINOR, "a total").unwrap();
        }
        assert_eq!(sum, 170 * MAX_TOTAL_MINOR);
        let e = add_to_sum(&mut sum, MAX_TOTAL_MINOR, "debits of EUR").unwrap_err();
        assert_eq!(e.metadata["limit"], "MAX_SUM_MINOR");
        assert!(e.message.contains("debits of EUR"), "{}", e.message);
        assert_eq!(sum, 170 * MAX_TOTAL_MINOR, "left as it was");
    }
}
