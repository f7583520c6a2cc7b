//! The statement for a period: which postings it keeps, its lines and running balance in
//! either order, its check against the closing balance, and how it renders.

use super::period::{
    kept, lines, period_csv, period_json, period_table, Line, Order, PeriodStatement,
};
use ledger_client::{Amount, Applied, Direction, Leg, NormalBalance, Posting, PostingKind};
use std::time::{Duration, SystemTime};

/// 2027-01-15T08:00:00Z plus `n` days.
fn day(n: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + n * 86_400)
}

fn eur(minor: i128) -> Amount {
    Amount::new(minor, 2)
}

const BANK: &str = "assets:bank";

fn leg(account: &str, direction: Direction, minor: i128) -> Leg {
    Leg {
        account: account.into(),
        direction,
        amount: eur(minor),
    }
}

/// A posting of `kind`, sequence `seq`, effective on day `eff`, recorded on day `rec`.
fn posting(
    seq: u64,
    kind: PostingKind,
    (eff, rec): (u64, u64),
    legs: Vec<Leg>,
    memo: &str,
) -> Posting {
    Posting {
        ledger: "default".into(),
        posting_id: format!("p{seq}"),
        sequence: seq,
        idempotency_key: format!("k{seq}"),
        legs,
        effective_at: day(eff),
        recorded_at: day(rec),
        memo: memo.into(),
        metadata: Default::default(),
        voids_posting_id: None,
        voided_by_posting_id: None,
        void_reason: None,
        caller: "anonymous".into(),
        kind,
        hold: None,
        captures_hold_posting_id: None,
        releases_hold_posting_id: None,
        hash: None,
    }
}

/// The cut-off: recorded a minute after day 6, the period's end.
fn cut() -> Applied {
    Applied {
        recorded_at: day(6) + Duration::from_secs(60),
        effective_at: day(6) - Duration::from_micros(1),
        sequence: 16,
    }
}

/// The bank's postings as ListPostings might answer them without its filters: some before
/// the period, some after it, some recorded after the cut-off, a hold and a release (which
/// move nothing), a back-dated fee, and a posting with two legs on the bank.
fn journal() -> Vec<Posting> {
    use Direction::{Credit, Debit};
    use PostingKind as K;
    let world = |d, m| leg("equity:world", d, m);
    vec![
        posting(
            9,
            K::Posting,
            (0, 0),
            vec![leg(BANK, Debit, 1000), world(Credit, 1000)],
            "before",
        ),
        posting(
            10,
            K::Release,
            (2, 2),
            vec![leg(BANK, Debit, 700), world(Credit, 700)],
            "",
        ),
        posting(
            11,
            K::Posting,
            (2, 2),
            vec![leg(BANK, Debit, 10000), leg("income:sales", Credit, 10000)],
            "invoice 17, paid",
        ),
        posting(
            12,
            K::Capture,
            (4, 4),
            vec![leg("expenses:rent", Debit, 3000), leg(BANK, Credit, 3000)],
            "rent",
        ),
        posting(
            13,
            K::Posting,
            (3, 5),
            vec![leg("expenses:fees", Debit, 200), leg(BANK, Credit, 200)],
            "fee \"Q1\"\nback-dated",
        ),
        posting(
            14,
            K::Hold,
            (3, 5),
            vec![leg("expenses:rent", Debit, 900), leg(BANK, Credit, 900)],
            "",
        ),
        posting(
            15,
            K::Void,
            (4, 5),
            vec![
                leg(BANK, Debit, 500),
                world(Credit, 200),
                world(Credit, 200),
                leg(BANK, Credit, 100),
            ],
            "",
        ),
        posting(
            16,
            K::Posting,
            (6, 6),
            vec![leg(BANK, Debit, 100), world(Credit, 100)],
            "at the end",
        ),
        posting(
            17,
            K::Posting,
            (3, 7),
            vec![leg(BANK, Debit, 100), world(Credit, 100)],
            "later",
        ),
    ]
}

/// What the statement keeps of the journal, for the period [day 1, day 6).
fn period_postings() -> Vec<Posting> {
    let at = cut();
    journal()
        .into_iter()
        .filter(|p| kept(p, &at, Some(day(1)), day(6)))
        .collect()
}

fn statement(order: Order) -> PeriodStatement {
    PeriodStatement {
        ledger: "default".into(),
        account: BANK.into(),
        currency: "EUR".into(),
        at: cut(),
        from: Some(day(1)),
        to: Some(day(6)),
        order,
        opening: eur(1000),
        closing: eur(8200),
        lines: lines(
            BANK,
            NormalBalance::Debit,
            eur(1000),
            period_postings(),
            order,
        )
        .unwrap(),
    }
}

/// (sequence, balance after) of each line.
fn running(lines: &[Line]) -> Vec<(u64, String)> {
    lines
        .iter()
        .map(|l| (l.sequence, l.balance.to_string()))
        .collect()
}

#[test]
fn a_period_keeps_what_moved_money_effective_in_it_and_recorded_by_the_cut_off() {
    let in_period: Vec<u64> = period_postings().iter().map(|p| p.sequence).collect();
    assert_eq!(in_period, [11, 12, 13, 15]);
    let open_ended = journal()
        .into_iter()
        .filter(|p| kept(p, &cut(), None, day(6)))
        .map(|p| p.sequence)
        .collect::<Vec<_>>();
    assert_eq!(
        open_ended,
        [9, 11, 12, 13, 15],
        "no --from: from the beginning"
    );
}

#[test]
fn the_running_balance_follows_the_order_asked_from_the_opening_to_the_closing_balance() {
    let o = |s: &str| s.to_string();
    let cases: [(Order, Vec<(u64, String)>); 2] = [
        (
            Order::Journal,
            vec![
                (11, o("110.00")),
                (12, o("80.00")),
                (13, o("78.00")),
                (15, o("82.00")),
                (15, o("82.00")),
            ],
        ),
        (
            // The back-dated fee (13) in business time: before the rent (12).
            Order::Effective,
            vec![
                (11, o("110.00")),
                (13, o("108.00")),
                (12, o("78.00")),
                (15, o("82.00")),
                (15, o("82.00")),
            ],
        ),
    ];
    for (order, want) in cases {
        let s = statement(order);
        assert_eq!(running(&s.lines), want, "{order:?}");
        s.check()
            .expect("the last running balance is the closing balance");
    }
    // A posting's legs on the account show the balance after the whole posting, and its
    // other legs' accounts once each.
    let s = statement(Order::Journal);
    let split: Vec<&Line> = s.lines.iter().filter(|l| l.sequence == 15).collect();
    assert_eq!(split.len(), 2);
    assert!(split.iter().all(|l| l.counter == ["equity:world"]));
    // A credit-normal account grows on its credits.
    let sales = lines(
        "income:sales",
        NormalBalance::Credit,
        eur(0),
        period_postings(),
        Order::Journal,
    )
    .unwrap();
    assert_eq!(running(&sales), [(11, "100.00".to_string())]);
    assert_eq!(sales[0].counter, [BANK]);
}

#[test]
fn a_running_balance_that_misses_the_closing_balance_fails_with_exit_2_naming_both() {
    let mut s = statement(Order::Journal);
    s.closing = eur(8100);
    let e = s.check().unwrap_err();
    assert_eq!(e.exit, 2);
    let text = e.to_string();
    assert!(
        text.contains("10.00") && text.contains("82.00") && text.contains("81.00"),
        "{text}"
    );
    // No lines: the opening balance must be the closing one.
    s.lines.clear();
    s.closing = eur(1000);
    assert!(s.check().is_ok());
}

/// A case: its name, what was rendered, what should have been.
type Case = (&'static str, String, String);

fn render_cases() -> Vec<Case> {
    let journal = statement(Order::Journal);
    let effective = statement(Order::Effective);
    let mut open = statement(Order::Journal);
    (open.from, open.to, open.opening, open.lines) = (None, None, eur(0), vec![]);
    open.closing = eur(0);
    vec![
        (
            "period statement, table, journal order",
            period_table(&journal).unwrap(),
            "Statement of assets:bank (EUR) effective from 2027-01-16T08:00:00Z (included) to 2027-01-21T08:00:00Z (excluded), as recorded at 2027-01-21T08:01:00Z (journal sequence 16)

SEQUENCE  RECORDED_AT           EFFECTIVE_AT          POSTING_ID  KIND      DEBIT  CREDIT  BALANCE  COUNTER_ACCOUNTS  MEMO
--------  --------------------  --------------------  ----------  -------  ------  ------  -------  ----------------  -------------------
 OPENING                                                                                     10.00
      11  2027-01-17T08:00:00Z  2027-01-17T08:00:00Z  p11         posting  100.00           110.00  income:sales      invoice 17, paid
      12  2027-01-19T08:00:00Z  2027-01-19T08:00:00Z  p12         capture           30.00    80.00  expenses:rent     rent
      13  2027-01-20T08:00:00Z  2027-01-18T08:00:00Z  p13         posting            2.00    78.00  expenses:fees     fee \"Q1\" back-dated
      15  2027-01-20T08:00:00Z  2027-01-19T08:00:00Z  p15         void       5.00            82.00  equity:world
      15  2027-01-20T08:00:00Z  2027-01-19T08:00:00Z  p15         void               1.00    82.00  equity:world
--------  --------------------  --------------------  ----------  -------  ------  ------  -------  ----------------  -------------------
 CLOSING                                              5 entries            105.00   33.00    82.00
".into(),
        ),
        (
            "period statement, csv, effective order (a memo quoted)",
            period_csv(&effective).unwrap(),
            "sequence,recorded_at,effective_at,posting_id,kind,debit,credit,balance,counter_accounts,memo
OPENING,,,,,,,10.00,,
11,2027-01-17T08:00:00Z,2027-01-17T08:00:00Z,p11,posting,100.00,,110.00,income:sales,\"invoice 17, paid\"
13,2027-01-20T08:00:00Z,2027-01-18T08:00:00Z,p13,posting,,2.00,108.00,expenses:fees,\"fee \"\"Q1\"\"
back-dated\"
12,2027-01-19T08:00:00Z,2027-01-19T08:00:00Z,p12,capture,,30.00,78.00,expenses:rent,rent
15,2027-01-20T08:00:00Z,2027-01-19T08:00:00Z,p15,void,5.00,,82.00,equity:world,
15,2027-01-20T08:00:00Z,2027-01-19T08:00:00Z,p15,void,,1.00,82.00,equity:world,
CLOSING,,,,,105.00,33.00,82.00,,
".into(),
        ),
        (
            "period statement, table, from the beginning to the cut-off, no lines",
            period_table(&open).unwrap(),
            "Statement of assets:bank (EUR) effective up to 2027-01-21T07:59:59.999999Z (included), as recorded at 2027-01-21T08:01:00Z (journal sequence 16)

SEQUENCE  RECORDED_AT  EFFECTIVE_AT  POSTING_ID  KIND  DEBIT  CREDIT  BALANCE  COUNTER_ACCOUNTS  MEMO
--------  -----------  ------------  ----------  ----  -----  ------  -------  ----------------  ----
 OPENING                                                                 0.00
--------  -----------  ------------  ----------  ----  -----  ------  -------  ----------------  ----
 CLOSING                             0 entries          0.00    0.00     0.00
".into(),
        ),
    ]
}

#[test]
fn a_period_statement_renders_its_opening_lines_and_closing_as_table_and_csv() {
    for (name, got, want) in render_cases() {
        assert_eq!(got, want, "{name}:\n{got}");
    }
}

#[test]
fn a_period_statement_as_json_has_its_period_order_balances_and_lines() {
    let v = period_json(&statement(Order::Effective)).unwrap();
    let want = serde_json::json!({
        "report": "statement",
        "ledger": "default",
        "account": "assets:bank",
        "currency": "EUR",
        "asOf": {
            "recordedAt": "2027-01-21T08:01:00Z",
            "effectiveAt": "2027-01-21T07:59:59.999999Z",
            "sequence": 16
        },
        "from": "2027-01-16T08:00:00Z",
        "to": "2027-01-21T08:00:00Z",
        "order": "effective",
        "openingBalance": "10.00",
        "closingBalance": "82.00",
        "debits": "105.00",
        "credits": "33.00",
    });
    for (k, w) in want.as_object().unwrap() {
        assert_eq!(&v[k], w, "{k}");
    }
    let lines = v["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 5);
    assert_eq!(
        lines[1],
        serde_json::json!({
            "sequence": 13,
            "postingId": "p13",
            "kind": "posting",
            "recordedAt": "2027-01-20T08:00:00Z",
            "effectiveAt": "2027-01-18T08:00:00Z",
            "debit": null,
            "credit": "2.00",
            "balance": "108.00",
            "counterAccounts": ["expenses:fees"],
            "memo": "fee \"Q1\"\nback-dated"
        })
    );
}
