//! The arguments of `ledger account update` (a new version of an account's terms) and of a
//! post's conditions (`--if-last-sequence`, `--if-available`), with their parsers: a value
//! that is not of its flag's form is refused naming the form and what is wrong, as clap's
//! value parser for that flag, so clap names the flag and nothing is sent.

use super::args::{is_decimal, Common};
use ledger_core::limits::MAX_LIMIT_WINDOW_SECONDS;
use ledger_server::grpc::pb;

/// An account's status on the command line.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusArg {
    /// Postings and holds may touch it.
    Open,
    /// New postings and holds touching it are refused (ACCOUNT_FROZEN); captures and releases
    /// of earlier holds still go through.
    Frozen,
    /// Final: every later posting and update is ACCOUNT_CLOSED; only an empty account closes
    /// (ACCOUNT_NOT_EMPTY).
    Closed,
}

impl StatusArg {
    pub fn pb(self) -> pb::AccountStatus {
        match self {
            StatusArg::Open => pb::AccountStatus::Open,
            StatusArg::Frozen => pb::AccountStatus::Frozen,
            StatusArg::Closed => pb::AccountStatus::Closed,
        }
    }
}

/// The flags an update changes, as clap's group of them: at least one is required.
pub const CHANGE_FLAGS: [&str; 7] = [
    "status",
    "floor",
    "no_floor",
    "ceiling",
    "no_ceiling",
    "debit_limits",
    "no_debit_limits",
];

/// `ledger account update`: records the account's next version, changing exactly the terms
/// given (the update_mask names them); the others stay as they are.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true).args(CHANGE_FLAGS)))]
pub struct AccountUpdateArgs {
    /// The account's code.
    pub code: String,
    /// The version you read (`ledger account get` prints it): another version recorded since
    /// refuses the update (ABORTED ACCOUNT_VERSION_MISMATCH, nothing written).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub expected_version: u64,
    /// The new status.
    #[arg(long, value_enum)]
    pub status: Option<StatusArg>,
    /// The lowest the available balance may go, on the account's normal side, at its scale
    /// ("-500.00": an overdraft of 500); above the available balance it is refused
    /// (INSUFFICIENT_FUNDS).
    #[arg(long, value_name = "AMOUNT", value_parser = parse_floor, allow_negative_numbers = true, conflicts_with = "no_floor")]
    pub floor: Option<String>,
    /// No floor at all: the balance may go as low as anything takes it.
    #[arg(long)]
    pub no_floor: bool,
    /// The highest the balance (with the open holds that would raise it) may go, at the
    /// account's scale; below the balance it is refused (BALANCE_CEILING_EXCEEDED).
    #[arg(long, value_name = "AMOUNT", value_parser = parse_ceiling, allow_negative_numbers = true, conflicts_with = "no_ceiling")]
    pub ceiling: Option<String>,
    /// No ceiling.
    #[arg(long)]
    pub no_ceiling: bool,
    /// At most AMOUNT debited over any rolling window of WINDOW_SECONDS of recorded time
    /// (1..=31622400, 366 days), e.g. `500.00/86400`; repeatable (at most 4): these replace
    /// the account's limits.
    #[arg(long = "debit-limit", value_name = "AMOUNT/WINDOW_SECONDS", value_parser = parse_debit_limit, conflicts_with = "no_debit_limits")]
    pub debit_limits: Vec<pb::DebitLimit>,
    /// No debit limits.
    #[arg(long)]
    pub no_debit_limits: bool,
    /// Why (required, 1..1,024 bytes): recorded with the version.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub reason: String,
    /// The idempotency key (required, as for `ledger post`): the same key on every retry of
    /// this update, a new key for a new one.
    #[arg(long)]
    pub key: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// A signed decimal (`-500.00`, `0`, `12.5`); the account's scale the ledger checks.
fn parse_signed_decimal(what: &str, s: &str) -> Result<String, String> {
    if is_decimal(s.strip_prefix('-').unwrap_or(s)) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not {what}: a decimal such as 500.00 or -500.00 (at the account's scale)"
        ))
    }
}

fn parse_floor(s: &str) -> Result<String, String> {
    parse_signed_decimal("a floor (--no-floor for none)", s)
}

fn parse_ceiling(s: &str) -> Result<String, String> {
    parse_signed_decimal("a ceiling (--no-ceiling for none)", s)
}

/// The form of a debit limit, for messages.
const LIMIT_FORM: &str =
    "AMOUNT/WINDOW_SECONDS (e.g. 500.00/86400: at most 500.00 debited over any 86,400 seconds)";

/// A debit limit from `AMOUNT/WINDOW_SECONDS`.
pub fn parse_debit_limit(s: &str) -> Result<pb::DebitLimit, String> {
    let Some((amount, window)) = s.split_once('/') else {
        return Err(format!("{s:?} is not {LIMIT_FORM}: it has no \"/\""));
    };
    if !is_decimal(amount) {
        return Err(format!(
            "{s:?} is not {LIMIT_FORM}: its AMOUNT {amount:?} is not a positive decimal such as 500.00"
        ));
    }
    let max = MAX_LIMIT_WINDOW_SECONDS;
    let window_seconds = match window.parse::<u32>() {
        Ok(w) if (1..=max).contains(&w) => w,
        _ => {
            return Err(format!(
                "{s:?} is not {LIMIT_FORM}: its WINDOW_SECONDS {window:?} is not a whole number of seconds in 1..={max} (MAX_LIMIT_WINDOW_SECONDS)"
            ))
        }
    };
    Ok(pb::DebitLimit {
        amount: amount.to_owned(),
        window_seconds,
    })
}

/// `ACCOUNT=VALUE`, split at the last `=` (an account code holds none).
fn account_and<'a>(s: &'a str, form: &str) -> Result<(&'a str, &'a str), String> {
    match s.rsplit_once('=') {
        Some((account, value)) if !account.is_empty() => Ok((account, value)),
        Some(_) => Err(format!("{s:?} is not {form}: its ACCOUNT is empty")),
        None => Err(format!("{s:?} is not {form}: it has no \"=\"")),
    }
}

/// The form of `--if-last-sequence`, for messages.
const LAST_FORM: &str = "ACCOUNT=N (e.g. assets:bank=42: the lastSequence `ledger balance` prints, 0 when it has no posting yet)";

/// A condition from `ACCOUNT=N`: the account's last posting is still sequence N.
pub fn parse_if_last_sequence(s: &str) -> Result<pb::Condition, String> {
    let (account, n) = account_and(s, LAST_FORM)?;
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not {LAST_FORM}: {n:?} is not a sequence number"))?;
    Ok(pb::Condition {
        account: account.to_owned(),
        check: Some(pb::condition::Check::LastSequence(n)),
    })
}

/// The form of `--if-available`, for messages.
const AVAILABLE_FORM: &str =
    "ACCOUNT=AMOUNT (e.g. assets:bank=100.00: its available balance is at least 100.00)";

/// A condition from `ACCOUNT=AMOUNT`: the account's available balance is at least AMOUNT.
pub fn parse_if_available(s: &str) -> Result<pb::Condition, String> {
    let (account, amount) = account_and(s, AVAILABLE_FORM)?;
    if !is_decimal(amount.strip_prefix('-').unwrap_or(amount)) {
        return Err(format!(
            "{s:?} is not {AVAILABLE_FORM}: {amount:?} is not a decimal such as 100.00"
        ));
    }
    Ok(pb::Condition {
        account: account.to_owned(),
        check: Some(pb::condition::Check::AvailableAtLeast(amount.to_owned())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debit_limit_is_an_amount_and_a_window_of_seconds_in_range() {
        let l = parse_debit_limit("500.00/86400").unwrap();
        assert_eq!((l.amount.as_str(), l.window_seconds), ("500.00", 86400));
        let max = parse_debit_limit(&format!("1/{MAX_LIMIT_WINDOW_SECONDS}")).unwrap();
        assert_eq!(max.window_seconds, MAX_LIMIT_WINDOW_SECONDS);
        for (bad, says) in [
            ("500.00", "no \"/\""),
            ("500.00:86400", "no \"/\""),
            ("500.00/0", "WINDOW_SECONDS \"0\""),
            ("500.00/31622401", "MAX_LIMIT_WINDOW_SECONDS"),
            ("500.00/1d", "WINDOW_SECONDS \"1d\""),
            ("-5/60", "AMOUNT \"-5\""),
            ("/60", "AMOUNT \"\""),
        ] {
            let e = parse_debit_limit(bad).unwrap_err();
            assert!(e.contains(LIMIT_FORM) && e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn conditions_name_an_account_and_a_sequence_or_an_amount() {
        let c = parse_if_last_sequence("liabilities:wallet:alice=7").unwrap();
        assert_eq!(c.account, "liabilities:wallet:alice");
        assert_eq!(c.check, Some(pb::condition::Check::LastSequence(7)));
        let c = parse_if_available("acct:0=-5.00").unwrap();
        assert_eq!(
            c.check,
            Some(pb::condition::Check::AvailableAtLeast("-5.00".into()))
        );
        for (bad, says) in [
            (parse_if_last_sequence("acct:0").unwrap_err(), "no \"=\""),
            (
                parse_if_last_sequence("=3").unwrap_err(),
                "ACCOUNT is empty",
            ),
            (parse_if_last_sequence("a=x").unwrap_err(), "\"x\" is not"),
            (parse_if_available("a=1,00").unwrap_err(), "\"1,00\" is not"),
        ] {
            assert!(bad.contains(says), "{bad}");
        }
        assert!(parse_floor("-500.00").is_ok() && parse_ceiling("0").is_ok());
        assert!(parse_floor("lots").unwrap_err().contains("--no-floor"));
    }
}
