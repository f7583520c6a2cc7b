//! The balance sheet and the income statement from rollups: sections by their debits and
//! credits (a contra account counts against its section), the earnings, the identity's
//! difference (zero, or what the accounts outside the five tops make it), and how they render.

use super::sheets::{check_words, sheet_csv, sheet_json, sheet_table, sheets, Sheet, Sheets};
use ledger_client::{Amount, Applied, Rollup, RollupTotal, Rollups};
use std::time::{Duration, SystemTime};

fn amount(minor: i128) -> Amount {
    Amount::new(minor, 2)
}

/// A node with, per currency, its debits and credits in minor units (the other figures are
/// not what the sheets are made of: they are set to show that).
fn node(name: &str, accounts: u64, totals: &[(&str, i128, i128)]) -> Rollup {
    Rollup {
        node: name.into(),
        account_count: accounts,
        totals: totals
            .iter()
            .map(|&(currency, d, c)| RollupTotal {
                currency: currency.into(),
                debits: amount(d),
                credits: amount(c),
                balance: amount(999_999),
                held_debits: amount(0),
                held_credits: amount(0),
                available: amount(999_999),
            })
            .collect(),
    }
}

fn at() -> Applied {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    Applied {
        recorded_at: t,
        effective_at: t,
        sequence: 7,
    }
}

/// EUR: capital 1000.00 into the bank; sales of 300.00 on credit; fees of 20.00 and a
/// prepayment of 5.00 (a debit-normal, contra account under liabilities) from the bank; rent
/// of 50.00 owed. USD: 10.00 from `world`, a top outside the five. Tree order, depth 2.
fn books() -> Rollups {
    let e = "EUR";
    Rollups {
        rollups: vec![
            node("", 9, &[(e, 137_500, 137_500), ("USD", 1000, 1000)]),
            node("assets", 2, &[(e, 130_000, 2500), ("USD", 1000, 0)]),
            node("assets:bank", 1, &[(e, 100_000, 2500), ("USD", 1000, 0)]),
            node("assets:receivables", 1, &[(e, 30_000, 0)]),
            node("equity", 1, &[(e, 0, 100_000)]),
            node("equity:capital", 1, &[(e, 0, 100_000)]),
            node("expenses", 2, &[(e, 7000, 0)]),
            node("expenses:fees", 1, &[(e, 2000, 0)]),
            node("expenses:rent", 1, &[(e, 5000, 0)]),
            node("income", 1, &[(e, 0, 30_000)]),
            node("income:sales", 1, &[(e, 0, 30_000)]),
            node("liabilities", 2, &[(e, 500, 5000)]),
            node("liabilities:payables", 1, &[(e, 0, 5000)]),
            node("liabilities:prepaid", 1, &[(e, 500, 0)]),
            node("world", 1, &[("USD", 0, 1000)]),
        ],
        as_of: at(),
    }
}

/// The same books without their second level (depth 0).
fn tops_only() -> Rollups {
    let mut r = books();
    r.rollups.retain(|n| !n.node.contains(':'));
    r
}

fn sheets_of(r: &Rollups, depth: u32) -> Sheets {
    sheets(r, "default", depth).unwrap()
}

#[test]
fn sections_are_their_debits_and_credits_on_their_side_and_the_identity_holds_in_whole_books() {
    let s = sheets_of(&books(), 1);
    let currencies: Vec<&str> = s.books.iter().map(|b| b.currency.as_str()).collect();
    assert_eq!(currencies, ["EUR", "USD"]);
    let eur = &s.books[0];
    let got = [
        &eur.assets.amount,
        &eur.liabilities.amount,
        &eur.equity.amount,
        &eur.income.amount,
        &eur.expenses.amount,
        &eur.earnings,
        &eur.difference,
    ]
    .map(|a| a.to_string());
    // Liabilities are 50.00 owed less the 5.00 prepaid (the contra account), not the sum of
    // the balances in each account's own direction.
    assert_eq!(
        got,
        ["1275.00", "45.00", "1000.00", "300.00", "70.00", "230.00", "0.00"]
    );
    let prepaid = &eur.liabilities.lines[1];
    assert_eq!(
        (prepaid.node.as_str(), prepaid.amount.to_string()),
        ("liabilities:prepaid", "-5.00".into())
    );
    assert!(eur.other.lines.is_empty());
    // USD: 10.00 of assets funded by `world`, outside the five: the difference is theirs.
    let usd = &s.books[1];
    assert_eq!(usd.assets.amount.to_string(), "10.00");
    assert_eq!(
        usd.liabilities.amount.to_string(),
        "0.00",
        "no liabilities in USD: zero"
    );
    assert_eq!(usd.other.amount.to_string(), "-10.00");
    assert_eq!(usd.difference.to_string(), "10.00");
    assert_eq!(
        check_words(usd),
        "Check USD: assets 10.00 = liabilities 0.00 + equity 0.00 + earnings 0.00; difference 10.00: the accounts outside assets, liabilities, equity, income and expenses (other) are not in the identity"
    );
    // Depth 0: the same sections, no lines.
    let flat = sheets_of(&tops_only(), 0);
    assert!(flat.books.iter().all(|b| b.assets.lines.is_empty()));
    assert_eq!(flat.books[0].earnings, eur.earnings);
    assert_eq!(flat.books[0].difference, eur.difference);
}

const HEAD: &str =
    "as recorded at 2027-01-15T08:00:00Z, effective at 2027-01-15T08:00:00Z (journal sequence 7)";

/// A case: its name, what was rendered, what should have been.
type Case = (&'static str, String, String);

fn table_cases() -> Vec<Case> {
    let s = sheets_of(&books(), 1);
    let empty = Rollups {
        rollups: vec![],
        as_of: at(),
    };
    vec![
        (
            "balance sheet, table",
            sheet_table(&s, Sheet::BalanceSheet),
            format!(
                "Balance sheet {HEAD}

ACCOUNT                       CURRENCY   AMOUNT
----------------------------  --------  -------
assets                        EUR       1275.00
  assets:bank                 EUR        975.00
  assets:receivables          EUR        300.00
liabilities                   EUR         45.00
  liabilities:payables        EUR         50.00
  liabilities:prepaid         EUR         -5.00
equity                        EUR       1000.00
  equity:capital              EUR       1000.00
earnings (income - expenses)  EUR        230.00
  income                      EUR        300.00
  expenses                    EUR         70.00
assets                        USD         10.00
  assets:bank                 USD         10.00
liabilities                   USD          0.00
equity                        USD          0.00
earnings (income - expenses)  USD          0.00
  income                      USD          0.00
  expenses                    USD          0.00
other (debits - credits)      USD        -10.00
  world                       USD        -10.00
----------------------------  --------  -------
DIFFERENCE                    EUR          0.00
DIFFERENCE                    USD         10.00

Check EUR: assets 1275.00 = liabilities 45.00 + equity 1000.00 + earnings 230.00; difference 0.00
{}
",
                check_words(&s.books[1])
            ),
        ),
        (
            "income statement, table, in another ledger",
            sheet_table(
                &sheets(&books(), "acme", 1).unwrap(),
                Sheet::IncomeStatement,
            ),
            format!(
                "Income statement in ledger acme {HEAD}

ACCOUNT          CURRENCY  AMOUNT
---------------  --------  ------
income           EUR       300.00
  income:sales   EUR       300.00
expenses         EUR        70.00
  expenses:fees  EUR        20.00
  expenses:rent  EUR        50.00
income           USD         0.00
expenses         USD         0.00
---------------  --------  ------
NET INCOME       EUR       230.00
NET INCOME       USD         0.00
"
            ),
        ),
        (
            "balance sheet, table, no activity",
            sheet_table(&sheets_of(&empty, 1), Sheet::BalanceSheet),
            format!("Balance sheet {HEAD}\n\nNo account has activity at this cut-off.\n"),
        ),
    ]
}

fn csv_cases() -> Vec<Case> {
    let s = sheets_of(&tops_only(), 0);
    vec![
        (
            "balance sheet, csv, depth 0",
            sheet_csv(&s, Sheet::BalanceSheet),
            "section,node,currency,amount,debits,credits
assets,assets,EUR,1275.00,1300.00,25.00
liabilities,liabilities,EUR,45.00,5.00,50.00
equity,equity,EUR,1000.00,0.00,1000.00
earnings,,EUR,230.00,,
difference,,EUR,0.00,,
assets,assets,USD,10.00,10.00,0.00
liabilities,liabilities,USD,0.00,0.00,0.00
equity,equity,USD,0.00,0.00,0.00
earnings,,USD,0.00,,
other,,USD,-10.00,0.00,10.00
other,world,USD,-10.00,0.00,10.00
difference,,USD,10.00,,
"
            .into(),
        ),
        (
            "income statement, csv, depth 1",
            sheet_csv(&sheets_of(&books(), 1), Sheet::IncomeStatement),
            "section,node,currency,amount,debits,credits
income,income,EUR,300.00,0.00,300.00
income,income:sales,EUR,300.00,0.00,300.00
expenses,expenses,EUR,70.00,70.00,0.00
expenses,expenses:fees,EUR,20.00,20.00,0.00
expenses,expenses:rent,EUR,50.00,50.00,0.00
net_income,,EUR,230.00,,
income,income,USD,0.00,0.00,0.00
expenses,expenses,USD,0.00,0.00,0.00
net_income,,USD,0.00,,
"
            .into(),
        ),
    ]
}

#[test]
fn the_sheets_render_their_sections_lines_and_checks_as_tables_and_csv() {
    for (name, got, want) in table_cases().into_iter().chain(csv_cases()) {
        assert_eq!(got, want, "{name}:\n{got}");
    }
}

#[test]
fn the_sheets_as_json_give_each_currency_its_sections_and_figures() {
    let s = sheets_of(&books(), 1);
    let v = sheet_json(&s, Sheet::BalanceSheet);
    assert_eq!(v["report"], "balance-sheet");
    assert_eq!(v["depth"], 1);
    assert_eq!(v["asOf"]["sequence"], 7);
    assert_eq!(v["closedPeriod"], serde_json::Value::Null);
    let eur = &v["currencies"][0];
    assert_eq!(eur["currency"], "EUR");
    assert_eq!(
        eur["liabilities"],
        serde_json::json!({
            "amount": "45.00", "debits": "5.00", "credits": "50.00",
            "lines": [
                {"node": "liabilities:payables", "accountCount": 1, "amount": "50.00", "debits": "0.00", "credits": "50.00"},
                {"node": "liabilities:prepaid", "accountCount": 1, "amount": "-5.00", "debits": "5.00", "credits": "0.00"}
            ]
        })
    );
    assert_eq!(
        eur["earnings"],
        serde_json::json!({"amount": "230.00", "income": "300.00", "expenses": "70.00"})
    );
    assert_eq!(
        (&eur["difference"], &eur["balanced"]),
        (&"0.00".into(), &true.into())
    );
    let usd = &v["currencies"][1];
    assert_eq!(
        (&usd["difference"], &usd["balanced"]),
        (&"10.00".into(), &false.into())
    );
    assert_eq!(usd["other"]["lines"][0]["node"], "world");
    let v = sheet_json(&s, Sheet::IncomeStatement);
    assert_eq!(v["report"], "income-statement");
    assert_eq!(v["currencies"][0]["netIncome"], "230.00");
    assert_eq!(
        v["currencies"][0]["expenses"]["lines"][1]["node"],
        "expenses:rent"
    );
    assert!(v["currencies"][0].get("assets").is_none());
}
