//! The arguments of the client commands (clap), and the parser of a leg
//! (`ACCOUNT:DIRECTION:AMOUNT`).

use super::super::output::Format;
use super::super::{parse_ledger_code, parse_time, ClientArgs, LedgerArg};
use super::terms_args::{parse_if_available, parse_if_last_sequence, AccountUpdateArgs};
use ledger_server::grpc::pb;
use std::path::PathBuf;
use time::OffsetDateTime;

/// The options every command on accounts and postings takes: where the server is, the
/// ledger, and how to print.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub ledger: LedgerArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// The options of `ledger ledgers …`: where the server is, and how to print (each names its
/// ledger itself).
#[derive(clap::Args, Debug, Clone)]
pub struct LedgersCommon {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum PeriodCommand {
    /// Closes the ledger's period before a time (role admin): nothing is recorded effective
    /// before it afterwards (PERIOD_CLOSED); closes only move forward, there is no reopen.
    Close {
        /// The end of the closed period (RFC 3339 or a date, whose start it is); not later
        /// than now.
        #[arg(long, value_parser = parse_time)]
        before: OffsetDateTime,
        /// The idempotency key (required).
        #[arg(long)]
        key: Option<String>,
        /// A memo.
        #[arg(long)]
        memo: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// The ledger's closes, oldest first, each with its trial balance's size and digest.
    List {
        #[command(flatten)]
        common: Common,
    },
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum LedgersCommand {
    /// Creates a ledger (needs the role admin); the same attributes again answer
    /// `created: false`, others are LEDGER_CONFLICT.
    Create {
        /// The ledger's code (1..64 characters of a-z 0-9 _ -).
        #[arg(value_parser = parse_ledger_code)]
        code: String,
        /// What it is for (at most 1,024 bytes).
        #[arg(long, default_value = "")]
        description: String,
        /// Metadata entries (repeatable).
        #[arg(long = "meta", visible_alias = "metadata", value_name = "KEY=VALUE", value_parser = parse_meta)]
        metadata: Vec<(String, String)>,
        /// The PostgreSQL cluster to place it on (one the server has, `serve --cluster
        /// NAME=URL`); default `main`.
        #[arg(long, default_value = "")]
        cluster: String,
        #[command(flatten)]
        common: LedgersCommon,
    },
    /// Shows one ledger.
    Get {
        /// The ledger's code.
        #[arg(value_parser = parse_ledger_code)]
        code: String,
        #[command(flatten)]
        common: LedgersCommon,
    },
    /// Lists the ledgers you are granted, in code order (every page).
    List {
        /// Ledgers asked for per call (1..=1000); every page is listed.
        #[arg(long, default_value_t = ledger_core::limits::MAX_PAGE_SIZE, value_parser = clap::value_parser!(u32).range(1..=i64::from(ledger_core::limits::MAX_PAGE_SIZE)))]
        page_size: u32,
        #[command(flatten)]
        common: LedgersCommon,
    },
}

/// A normal balance side on the command line.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// balance = debits - credits (assets, expenses).
    Debit,
    /// balance = credits - debits (liabilities, equity, income).
    Credit,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum AccountCommand {
    /// Creates an account; the same attributes again answer `created: false`.
    Create {
        /// The account's code (1..128 characters of a-z 0-9 : _ - .).
        code: String,
        /// Its currency (2..16 characters of A-Z 0-9).
        #[arg(long)]
        currency: String,
        /// Decimal places its amounts may carry (0..18).
        #[arg(long)]
        scale: u32,
        /// The side its balance grows on.
        #[arg(long, value_enum)]
        normal: Side,
        /// Whether its balance may go below zero.
        #[arg(long)]
        allow_negative: bool,
        /// Metadata entries (repeatable).
        #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
        metadata: Vec<(String, String)>,
        #[command(flatten)]
        common: Common,
    },
    /// Shows one account: its attributes and the version of its terms in force now, or at a
    /// cut-off.
    Get {
        /// The account's code.
        code: String,
        /// Recorded cut-off: the version the ledger had recorded then (RFC 3339 or a date).
        /// Default: now.
        #[arg(long, value_parser = parse_time)]
        as_of: Option<OffsetDateTime>,
        /// Effective cut-off: a version takes effect when it is recorded, on both clocks.
        /// Default: the recorded cut-off.
        #[arg(long, value_parser = parse_time)]
        effective: Option<OffsetDateTime>,
        #[command(flatten)]
        common: Common,
    },
    /// Lists accounts by code prefix (every page).
    List {
        /// Only accounts whose code starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
        #[command(flatten)]
        common: Common,
    },
    /// Records the account's next version: a new status, floor, ceiling or debit limits
    /// (needs --expected-version, --reason and --key).
    Update(AccountUpdateArgs),
    /// Lists every version of an account's terms, oldest first, each with when, after which
    /// posting, by whom and why it was recorded and what it changed (every page).
    Versions {
        /// The account's code.
        code: String,
        #[command(flatten)]
        common: Common,
    },
}

impl AccountCommand {
    /// Its name on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            AccountCommand::Create { .. } => "create",
            AccountCommand::Get { .. } => "get",
            AccountCommand::List { .. } => "list",
            AccountCommand::Update(_) => "update",
            AccountCommand::Versions { .. } => "versions",
        }
    }
}

/// `ledger post`: one balanced posting, or a file's list of them as one `PostBatch`.
#[derive(clap::Args, Debug, Clone)]
pub struct PostArgs {
    /// The idempotency key (required, unless the --file posting carries its own
    /// `idempotencyKey`; both may be given only when they are the same): the same key on every
    /// retry of this posting, a new key for a new posting. Not with a list in --file (each
    /// request carries its own).
    #[arg(long)]
    pub key: Option<String>,
    /// Legs as ACCOUNT:DIRECTION:AMOUNT, read from the right (the account code may hold
    /// colons): DIRECTION is `debit` or `credit` (also `d`, `dr`, `c`, `cr`, in any case),
    /// AMOUNT a positive decimal (`100.00`), e.g. `assets:bank:debit:100.00
    /// equity:world:credit:100.00`.
    #[arg(value_name = "LEG", value_parser = parse_leg)]
    pub legs: Vec<pb::Leg>,
    /// The posting in the JSON grpcurl sends (a PostRequest: `idempotencyKey`, `legs`, `memo`,
    /// `effectiveAt`, `metadata`, `hold`, `holdExpiresAt`; times in full RFC 3339), or a JSON
    /// list of them (or `{"requests": [...]}`, grpcurl's PostBatch body): sent as one
    /// PostBatch, each result printed, exit 1 if any request failed. `-` reads standard
    /// input. With one posting, --memo, --effective, --hold-expires-at replace the file's
    /// and --meta, --hold, --if-last-sequence and --if-available add to it; with a list, they
    /// are refused.
    #[arg(long, conflicts_with = "legs")]
    pub file: Option<PathBuf>,
    /// A memo.
    #[arg(long)]
    pub memo: Option<String>,
    /// When it is effective (RFC 3339 or a date); default: when it is recorded.
    #[arg(long, value_parser = parse_time)]
    pub effective: Option<OffsetDateTime>,
    /// Metadata entries (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub metadata: Vec<(String, String)>,
    /// A hold: the legs reserve their amounts and move none, until `ledger capture`, a
    /// `ledger void` (the release) or the expiry.
    #[arg(long)]
    pub hold: bool,
    /// When the hold expires and the ledger releases it (RFC 3339 or a date; after now).
    /// Default: never.
    #[arg(long, value_parser = parse_time, requires = "hold")]
    pub hold_expires_at: Option<OffsetDateTime>,
    /// Post only if ACCOUNT's last posting is still sequence N when the posting is decided
    /// (the lastSequence `ledger balance` prints; 0: none yet), else FAILED_PRECONDITION
    /// CONDITION_FAILED, bound to the key. Repeatable (at most 8 conditions in all).
    #[arg(long = "if-last-sequence", value_name = "ACCOUNT=N", value_parser = parse_if_last_sequence)]
    pub if_last_sequence: Vec<pb::Condition>,
    /// Post only if ACCOUNT's available balance is still at least AMOUNT when the posting is
    /// decided, else CONDITION_FAILED, bound to the key. Repeatable.
    #[arg(long = "if-available", value_name = "ACCOUNT=AMOUNT", value_parser = parse_if_available)]
    pub if_available: Vec<pb::Condition>,
    #[command(flatten)]
    pub common: Common,
}

impl PostArgs {
    /// The conditions of its flags: the last sequences, then the available balances.
    pub fn conditions(&self) -> Vec<pb::Condition> {
        let all = self.if_last_sequence.iter().chain(&self.if_available);
        all.cloned().collect()
    }
}

/// `ledger capture`: moves a hold's money, all of it or less, and releases the rest.
#[derive(clap::Args, Debug, Clone)]
pub struct CaptureArgs {
    /// The hold to capture: its posting id.
    #[arg(
        long = "hold",
        value_name = "POSTING_ID",
        required_unless_present = "hold_key"
    )]
    pub hold_posting_id: Option<String>,
    /// Instead of its id: the hold you recorded under this idempotency key.
    #[arg(long, conflicts_with = "hold_posting_id")]
    pub hold_key: Option<String>,
    /// The idempotency key (required), as for `ledger post`.
    #[arg(long)]
    pub key: Option<String>,
    /// The legs to capture, as ACCOUNT:DIRECTION:AMOUNT (as for `ledger post`): exactly the
    /// hold's accounts and directions, in its order, each at most the held amount. None: the
    /// whole hold.
    #[arg(value_name = "LEG", value_parser = parse_leg)]
    pub legs: Vec<pb::Leg>,
    /// A memo.
    #[arg(long, default_value = "")]
    pub memo: String,
    /// When the capture is effective (RFC 3339 or a date); default: when it is recorded.
    #[arg(long, value_parser = parse_time)]
    pub effective: Option<OffsetDateTime>,
    /// Metadata entries (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub metadata: Vec<(String, String)>,
    #[command(flatten)]
    pub common: Common,
}

/// `ledger void`: the compensating posting of an earlier one.
#[derive(clap::Args, Debug, Clone)]
pub struct VoidArgs {
    /// The posting to void.
    #[arg(required_unless_present = "posting_key")]
    pub posting_id: Option<String>,
    /// Instead of its id: the posting you recorded under this idempotency key.
    #[arg(long, conflicts_with = "posting_id")]
    pub posting_key: Option<String>,
    /// The idempotency key (required), as for `ledger post`.
    #[arg(long)]
    pub key: Option<String>,
    /// Why.
    #[arg(long, default_value = "")]
    pub reason: String,
    /// When the void is effective (RFC 3339 or a date); default: when it is recorded.
    #[arg(long, value_parser = parse_time)]
    pub effective: Option<OffsetDateTime>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum PostingCommand {
    /// Shows one posting, by id or by your idempotency key.
    Get {
        /// The posting's id.
        #[arg(required_unless_present = "key")]
        posting_id: Option<String>,
        /// Your idempotency key instead of the id.
        #[arg(long, conflicts_with = "posting_id")]
        key: Option<String>,
        /// Recorded cut-off: the posting as the ledger knew it then (its void, a hold's
        /// state). Default: now.
        #[arg(long, value_parser = parse_time)]
        as_of: Option<OffsetDateTime>,
        /// Effective cut-off: the voids and closes effective by then. Default: the recorded
        /// cut-off.
        #[arg(long, value_parser = parse_time)]
        effective: Option<OffsetDateTime>,
        #[command(flatten)]
        common: Common,
    },
}

/// `ledger balance`: an account's balance at a cut-off.
#[derive(clap::Args, Debug, Clone)]
pub struct BalanceArgs {
    /// The account's code.
    pub account: String,
    /// Recorded cut-off: what the ledger knew then (RFC 3339 or a date). Default: now.
    #[arg(long, value_parser = parse_time)]
    pub as_of: Option<OffsetDateTime>,
    /// Effective cut-off: what had happened by then. Default: the recorded cut-off.
    #[arg(long, value_parser = parse_time)]
    pub effective: Option<OffsetDateTime>,
    #[command(flatten)]
    pub common: Common,
}

fn parse_meta(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// The form of a leg, for messages.
const LEG_FORM: &str = "ACCOUNT:DIRECTION:AMOUNT (e.g. assets:bank:debit:100.00; DIRECTION is debit or credit, or d, dr, c, cr)";

/// A leg from `ACCOUNT:DIRECTION:AMOUNT`, read from the right (the account code may hold
/// colons). A leg that is not of that form is refused naming the form and the part that is
/// wrong, as clap's value parser for `LEG`.
pub fn parse_leg(s: &str) -> Result<pb::Leg, String> {
    let parts: Vec<&str> = s.rsplitn(3, ':').collect();
    let &[amount, direction, account] = parts.as_slice() else {
        return Err(format!(
            "leg {s:?} is not {LEG_FORM}: it has {} part(s) separated by colons, a leg needs three",
            parts.len()
        ));
    };
    let wrong = |part: &str, why: String| format!("leg {s:?} is not {LEG_FORM}: its {part} {why}");
    if account.is_empty() {
        return Err(wrong("ACCOUNT", "is empty".into()));
    }
    if !is_decimal(amount) {
        let hint = if ["debit", "credit"]
            .iter()
            .any(|d| amount.to_ascii_lowercase().contains(d))
        {
            " (the parts are separated by colons, not dashes)"
        } else {
            ""
        };
        return Err(wrong(
            "AMOUNT (after the last colon)",
            format!("{amount:?} is not a positive decimal such as 100.00{hint}"),
        ));
    }
    let direction = match direction.to_ascii_lowercase().as_str() {
        "debit" | "d" | "dr" => pb::Direction::Debit,
        "credit" | "c" | "cr" => pb::Direction::Credit,
        _ => {
            return Err(wrong(
                "DIRECTION (between the last two colons)",
                format!("{direction:?} is not debit or credit (or d, dr, c, cr)"),
            ))
        }
    };
    Ok(pb::Leg {
        account: account.into(),
        direction: direction as i32,
        amount: amount.into(),
    })
}

/// Digits, and optionally a point and more digits: the shape the ledger reads an amount in
/// (its scale and size it checks itself).
pub(super) fn is_decimal(s: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match s.split_once('.') {
        Some((int, frac)) => digits(int) && digits(frac),
        None => digits(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legs_parse_from_the_right_so_account_codes_may_hold_colons() {
        let l = parse_leg("liabilities:wallet:alice:credit:100.00").unwrap();
        assert_eq!(
            (l.account.as_str(), l.direction, l.amount.as_str()),
            (
                "liabilities:wallet:alice",
                pb::Direction::Credit as i32,
                "100.00"
            )
        );
        for (alias, d) in [
            ("D", pb::Direction::Debit),
            ("dr", pb::Direction::Debit),
            ("Debit", pb::Direction::Debit),
            ("c", pb::Direction::Credit),
            ("CR", pb::Direction::Credit),
        ] {
            let leg = parse_leg(&format!("a:{alias}:1")).unwrap();
            assert_eq!(leg.direction, d as i32, "{alias}");
        }
    }

    #[test]
    fn a_mistyped_leg_is_refused_naming_the_form_and_the_part_that_is_wrong() {
        for (leg, part) in [
            (
                "liabilities:wallet:carol-1-debit-1.00",
                "AMOUNT (after the last colon) \"carol-1-debit-1.00\"",
            ),
            (
                "a:sideways:1",
                "DIRECTION (between the last two colons) \"sideways\"",
            ),
            (
                "assets:bank:100.00",
                "DIRECTION (between the last two colons) \"bank\"",
            ),
            ("a:debit:-1.00", "AMOUNT (after the last colon) \"-1.00\""),
            ("a:debit:1,00", "AMOUNT (after the last colon) \"1,00\""),
            (":debit:1.00", "ACCOUNT is empty"),
            ("a:1", "2 part(s)"),
            ("100", "1 part(s)"),
        ] {
            let e = parse_leg(leg).unwrap_err();
            assert!(
                e.contains(LEG_FORM) && e.contains(part) && e.contains(&format!("{leg:?}")),
                "{leg}: {e}"
            );
        }
        let e = parse_leg("liabilities:wallet:carol-1-debit-1.00").unwrap_err();
        assert!(e.contains("separated by colons, not dashes"), "{e}");
    }
}
