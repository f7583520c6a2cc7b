//! The reports' renderings as they have always been: tables, trial balances, statements at a
//! cut-off.

use super::statement::{statement_csv, statement_table};
use super::table::table;
use super::trial::{trial_balance_csv, trial_balance_table};
use ledger_client::{Balance, CurrencyTotal, Direction, Entry, TrialBalance};

#[test]
fn a_table_aligns_columns_and_rules_off_the_heading_and_totals() {
    let rows = [
        ["A".to_string(), "AMOUNT".to_string()],
        ["x".to_string(), "1.00".to_string()],
        ["longer".to_string(), "100.00".to_string()],
        ["TOTAL".to_string(), "101.00".to_string()],
    ];
    let t = table(&rows, &[false, true], Some(3));
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines,
        vec![
            "A       AMOUNT",
            "------  ------",
            "x         1.00",
            "longer  100.00",
            "------  ------",
            "TOTAL   101.00",
        ]
    );
}

use ledger_client::{Amount, Applied};
use std::time::{Duration, SystemTime};

/// 2027-01-15T08:00:00Z plus `secs`.
fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

fn eur(minor: i128) -> Amount {
    Amount::new(minor, 2)
}

fn cut() -> Applied {
    Applied {
        recorded_at: at(60),
        effective_at: at(60),
        sequence: 4,
    }
}

/// A balance of EUR minor units: debits, credits, balance, held debits, held credits,
/// available.
fn bal(account: &str, [d, c, b, hd, hc, av]: [i128; 6]) -> Balance {
    Balance {
        account: account.into(),
        currency: "EUR".into(),
        debits: eur(d),
        credits: eur(c),
        balance: eur(b),
        held_debits: eur(hd),
        held_credits: eur(hc),
        available: eur(av),
        as_of: cut(),
        last_sequence: 0,
    }
}

fn total([d, c, hd, hc]: [i128; 4]) -> CurrencyTotal {
    CurrencyTotal {
        currency: "EUR".into(),
        debits: eur(d),
        credits: eur(c),
        held_debits: eur(hd),
        held_credits: eur(hc),
    }
}

/// a:0 paid 30.25 of the 100.00 it got from w, and a pending hold of 10.00 from a:0 to w.
fn with_hold() -> TrialBalance {
    TrialBalance {
        balances: vec![
            bal("a:0", [10000, 3025, 6975, 0, 1000, 5975]),
            bal("a:1", [3025, 0, 3025, 0, 0, 3025]),
            bal("w", [0, 10000, 10000, 1000, 0, 9000]),
        ],
        totals: vec![total([13025, 13025, 1000, 1000])],
    }
}

fn entry(sequence: u64, direction: Direction, amount: i128, after: i128) -> Entry {
    Entry {
        posting_id: format!("p{sequence}"),
        sequence,
        recorded_at: at(sequence),
        effective_at: at(sequence),
        direction,
        amount: eur(amount),
        balance_after: eur(after),
    }
}

const HEAD: &str =
    "as recorded at 2027-01-15T08:01:00Z, effective at 2027-01-15T08:01:00Z (journal sequence 4)";

/// A case: its name, what was rendered, what should have been.
type Case = (&'static str, String, String);

fn trial_balance_cases() -> Vec<Case> {
    let mut unbalanced = with_hold();
    unbalanced.totals[0].held_credits = eur(900);
    // The ledger's largest totals (MAX_TOTAL_MINOR, 10^36 minor units), one unit apart.
    let max = 10i128.pow(36);
    let largest = TrialBalance {
        balances: vec![bal("a:0", [max, 1, max - 1, 0, 0, max - 1])],
        totals: vec![total([max, max - 1, 0, 0])],
    };
    vec![
            (
                "trial balance, csv, the ledger's largest totals, exactly",
                trial_balance_csv(&largest),
                "account,currency,debits,credits,balance,held_debits,held_credits,available
a:0,EUR,10000000000000000000000000000000000.00,0.01,9999999999999999999999999999999999.99,0.00,0.00,9999999999999999999999999999999999.99
TOTAL,EUR,10000000000000000000000000000000000.00,9999999999999999999999999999999999.99,,0.00,0.00,
"
                .into(),
            ),
            (
                "trial balance, table, the largest totals one unit apart do not balance",
                trial_balance_table(&largest, "", "default").lines().last().unwrap().into(),
                "TOTAL    EUR       10000000000000000000000000000000000.00  9999999999999999999999999999999999.99                           NOT BALANCED         0.00          0.00".into(),
            ),
            (
                "trial balance, csv",
                trial_balance_csv(&with_hold()),
                "account,currency,debits,credits,balance,held_debits,held_credits,available
a:0,EUR,100.00,30.25,69.75,0.00,10.00,59.75
a:1,EUR,30.25,0.00,30.25,0.00,0.00,30.25
w,EUR,0.00,100.00,100.00,10.00,0.00,90.00
TOTAL,EUR,130.25,130.25,,10.00,10.00,
"
                .into(),
            ),
            (
                "trial balance, table, whole ledger",
                trial_balance_table(&with_hold(), "", "default"),
                format!(
                    "Trial balance {HEAD}

ACCOUNT  CURRENCY  DEBITS  CREDITS   BALANCE  HELD_DEBITS  HELD_CREDITS  AVAILABLE
-------  --------  ------  -------  --------  -----------  ------------  ---------
a:0      EUR       100.00    30.25     69.75         0.00         10.00      59.75
a:1      EUR        30.25     0.00     30.25         0.00          0.00      30.25
w        EUR         0.00   100.00    100.00        10.00          0.00      90.00
-------  --------  ------  -------  --------  -----------  ------------  ---------
TOTAL    EUR       130.25   130.25  balanced        10.00         10.00
"
                ),
            ),
            (
                "trial balance, table, held amounts that do not balance",
                trial_balance_table(&unbalanced, "", "default"),
                format!(
                    "Trial balance {HEAD}

ACCOUNT  CURRENCY  DEBITS  CREDITS       BALANCE  HELD_DEBITS  HELD_CREDITS  AVAILABLE
-------  --------  ------  -------  ------------  -----------  ------------  ---------
a:0      EUR       100.00    30.25         69.75         0.00         10.00      59.75
a:1      EUR        30.25     0.00         30.25         0.00          0.00      30.25
w        EUR         0.00   100.00        100.00        10.00          0.00      90.00
-------  --------  ------  -------  ------------  -----------  ------------  ---------
TOTAL    EUR       130.25   130.25  NOT BALANCED        10.00          9.00
"
                ),
            ),
        ]
}

fn prefix_and_statement_cases() -> Vec<Case> {
    let statement = [
        entry(1, Direction::Debit, 10000, 10000),
        entry(3, Direction::Credit, 3025, 6975),
    ];
    let a0 = bal("a:0", [10000, 3025, 6975, 0, 1000, 5975]);
    vec![
            (
                "trial balance, table, a prefix (no mark)",
                trial_balance_table(
                    &TrialBalance {
                        balances: vec![bal("w", [0, 10000, 10000, 1000, 0, 9000])],
                        totals: vec![total([0, 10000, 1000, 0])],
                    },
                    "w",
                    "acme",
                ),
                format!(
                    "Trial balance of w* in ledger acme {HEAD}

ACCOUNT  CURRENCY  DEBITS  CREDITS  BALANCE  HELD_DEBITS  HELD_CREDITS  AVAILABLE
-------  --------  ------  -------  -------  -----------  ------------  ---------
w        EUR         0.00   100.00   100.00        10.00          0.00      90.00
-------  --------  ------  -------  -------  -----------  ------------  ---------
TOTAL    EUR         0.00   100.00                 10.00          0.00
"
                ),
            ),
            (
                "statement, csv",
                statement_csv(&a0, &statement),
                "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after,held_debits,held_credits,available
1,p1,2027-01-15T08:00:01Z,2027-01-15T08:00:01Z,100.00,,100.00,,,
3,p3,2027-01-15T08:00:03Z,2027-01-15T08:00:03Z,,30.25,69.75,,,
TOTAL,,,,100.00,30.25,69.75,0.00,10.00,59.75
"
                .into(),
            ),
            (
                "statement, table",
                statement_table("a:0 (EUR)", &a0, &statement),
                format!(
                    "Statement of a:0 (EUR) {HEAD}

SEQUENCE  RECORDED_AT           EFFECTIVE_AT          POSTING_ID   DEBIT  CREDIT  BALANCE  HELD_DEBITS  HELD_CREDITS  AVAILABLE
--------  --------------------  --------------------  ----------  ------  ------  -------  -----------  ------------  ---------
       1  2027-01-15T08:00:01Z  2027-01-15T08:00:01Z  p1          100.00           100.00
       3  2027-01-15T08:00:03Z  2027-01-15T08:00:03Z  p3                   30.25    69.75
--------  --------------------  --------------------  ----------  ------  ------  -------  -----------  ------------  ---------
   TOTAL                                              2 entries   100.00   30.25    69.75         0.00         10.00      59.75
"
                ),
            ),
            (
                "statement, csv, no entries yet",
                statement_csv(&bal("a:1", [0, 0, 0, 500, 0, 0]), &[]),
                "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after,held_debits,held_credits,available
TOTAL,,,,0.00,0.00,0.00,5.00,0.00,0.00
"
                .into(),
            ),
        ]
}

#[test]
fn reports_render_held_and_available_amounts_in_every_format() {
    for (name, got, want) in trial_balance_cases()
        .into_iter()
        .chain(prefix_and_statement_cases())
    {
        assert_eq!(got, want, "{name}:\n{got}");
    }
}
