//! Posting: validation with its reasons, the no-negative rule, and the books staying balanced.

use crate::support::*;
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::Direction::{Credit as C, Debit as D};
use proptest::prelude::*;
use std::collections::HashMap;
use tonic::Code;

fn req(key: &str, legs: Vec<pb::Leg>) -> pb::PostRequest {
    pb::PostRequest {
        idempotency_key: key.into(),
        legs,
        ..Default::default()
    }
}

#[tokio::test]
async fn invalid_posts_are_refused_with_their_reason_and_change_nothing() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.account("usd:a", "USD", 2, pb::NormalBalance::Debit, true)
        .await;
    t.account("jpy:a", "JPY", 0, pb::NormalBalance::Debit, true)
        .await;
    let ok = |a: &str| leg("acct:0", D, a);
    let many: Vec<pb::Leg> = (0..101)
        .map(|i| leg("equity:world", if i % 2 == 0 { D } else { C }, "1"))
        .collect();
    let table: Vec<(&str, pb::PostRequest, Code, &str)> = vec![
        (
            "missing key",
            req("", vec![ok("1"), leg("equity:world", C, "1")]),
            Code::InvalidArgument,
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        (
            "one leg",
            req("k", vec![ok("1")]),
            Code::InvalidArgument,
            "TOO_FEW_LEGS",
        ),
        (
            "no legs",
            req("k", vec![]),
            Code::InvalidArgument,
            "TOO_FEW_LEGS",
        ),
        (
            "101 legs",
            req("k", many),
            Code::InvalidArgument,
            "LIMIT_EXCEEDED",
        ),
        (
            "unbalanced",
            req("k", vec![ok("1"), leg("equity:world", C, "2")]),
            Code::InvalidArgument,
            "UNBALANCED",
        ),
        (
            "zero",
            req("k", vec![ok("0"), leg("equity:world", C, "0")]),
            Code::InvalidArgument,
            "INVALID_AMOUNT",
        ),
        (
            "negative",
            req("k", vec![ok("-1"), leg("equity:world", C, "-1")]),
            Code::InvalidArgument,
            "INVALID_AMOUNT",
        ),
        (
            "words",
            req("k", vec![ok("one"), leg("equity:world", C, "one")]),
            Code::InvalidArgument,
            "INVALID_AMOUNT",
        ),
        (
            "exponent",
            req("k", vec![ok("1e2"), leg("equity:world", C, "100")]),
            Code::InvalidArgument,
            "INVALID_AMOUNT",
        ),
        (
            "empty amount",
            req("k", vec![ok(""), leg("equity:world", C, "1")]),
            Code::InvalidArgument,
            "INVALID_AMOUNT",
        ),
        (
            "overflow",
            req(
                "k",
                vec![
                    ok("99999999999999999999999999999999999999999"),
                    leg(
                        "equity:world",
                        C,
                        "99999999999999999999999999999999999999999",
                    ),
                ],
            ),
            Code::InvalidArgument,
            "INVALID_AMOUNT",
        ),
        (
            "three decimals on scale 2",
            req("k", vec![ok("1.001"), leg("equity:world", C, "1.001")]),
            Code::InvalidArgument,
            "AMOUNT_SCALE",
        ),
        (
            "decimals on scale 0",
            req("k", vec![leg("jpy:a", D, "1.5"), leg("jpy:a", C, "1.5")]),
            Code::InvalidArgument,
            "AMOUNT_SCALE",
        ),
        (
            "unknown account",
            req("k", vec![ok("1"), leg("nobody", C, "1")]),
            Code::NotFound,
            "ACCOUNT_NOT_FOUND",
        ),
        (
            "malformed account code",
            req("k", vec![ok("1"), leg("Not Valid", C, "1")]),
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        (
            "currencies crossed",
            req("k", vec![ok("1"), leg("usd:a", C, "1")]),
            Code::InvalidArgument,
            "CURRENCY_MISMATCH",
        ),
        (
            "memo over 1024 bytes",
            pb::PostRequest {
                memo: "m".repeat(1025),
                ..req("k", vec![ok("1"), leg("equity:world", C, "1")])
            },
            Code::InvalidArgument,
            "LIMIT_EXCEEDED",
        ),
        (
            "direction unspecified",
            req(
                "k",
                vec![
                    pb::Leg {
                        account: "acct:0".into(),
                        direction: 0,
                        amount: "1".into(),
                    },
                    leg("equity:world", C, "1"),
                ],
            ),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
    ];
    for (name, r, code, reason_want) in table {
        let err = t.post(r).await.expect_err(name);
        assert_eq!(err.code(), code, "{name}: {err:?}");
        assert_eq!(reason(&err), reason_want, "{name}: {err:?}");
    }
    assert_eq!(t.count("postings").await, 0);
    assert_eq!(
        t.count("idempotency_keys").await,
        0,
        "validation failures bind no key"
    );
}

#[tokio::test]
async fn limit_errors_name_the_limit() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let legs: Vec<pb::Leg> = (0..101)
        .map(|i| leg("equity:world", if i % 2 == 0 { D } else { C }, "1"))
        .collect();
    let err = t.post(req("k", legs)).await.unwrap_err();
    assert!(
        err.message().contains("MAX_LEGS") && err.message().contains("100"),
        "{}",
        err.message()
    );
    let mut meta = HashMap::new();
    for i in 0..33 {
        meta.insert(format!("k{i}"), "v".to_string());
    }
    let err = t
        .post(pb::PostRequest {
            metadata: meta,
            ..transfer("k", "equity:world", "acct:0", "1")
        })
        .await
        .unwrap_err();
    assert!(
        err.message().contains("MAX_METADATA_ENTRIES"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn mixed_currencies_that_balance_per_currency_are_accepted_and_rendered_at_scale() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.account("usd:a", "USD", 2, pb::NormalBalance::Debit, true)
        .await;
    t.account("usd:b", "USD", 2, pb::NormalBalance::Debit, true)
        .await;
    let p = t
        .post(req(
            "fx",
            vec![
                leg("acct:0", D, "10"),
                leg("equity:world", C, "10.0"),
                leg("usd:a", D, "11.5"),
                leg("usd:b", C, "11.50"),
            ],
        ))
        .await
        .unwrap()
        .posting
        .unwrap();
    let amounts: Vec<&str> = p.legs.iter().map(|l| l.amount.as_str()).collect();
    assert_eq!(amounts, ["10.00", "10.00", "11.50", "11.50"]);
    assert_eq!(p.sequence, 1);
    let b = t.balance("usd:b", None).await;
    assert_eq!(
        (b.debits.as_str(), b.credits.as_str(), b.balance.as_str()),
        ("0.00", "11.50", "-11.50")
    );
}

#[tokio::test]
async fn sequences_are_gapless_and_recorded_times_strictly_increase() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let mut tasks = Vec::new();
    for i in 0..40 {
        let mut c = t.new_client().await;
        tasks.push(tokio::spawn(async move {
            c.post(transfer(&format!("k{i}"), "equity:world", "acct:0", "1"))
                .await
                .unwrap()
                .into_inner()
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (postings, _) = (
        t.client
            .list_postings(pb::ListPostingsRequest {
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .postings,
        (),
    );
    let seqs: Vec<u64> = postings.iter().map(|p| p.sequence).collect();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
    for w in postings.windows(2) {
        let a = w[0].recorded_at.as_ref().unwrap();
        let b = w[1].recorded_at.as_ref().unwrap();
        assert!(
            (a.seconds, a.nanos) < (b.seconds, b.nanos),
            "recorded_at strictly increases"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Any sequence of attempted postings: the accepted ones keep Σdebits = Σcredits per
    /// currency, every balance equals the sum of its legs, and no no-negative account is below 0.
    #[test]
    fn accepted_postings_keep_every_balance_equal_to_the_sum_of_its_legs(
        ops in prop::collection::vec((0usize..4, 0usize..4, 1u32..5000), 1..40)
    ) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let mut t = TestLedger::start().await;
            t.standard_accounts(3).await;
            let names = ["equity:world", "acct:0", "acct:1", "acct:2"];
            let mut model: HashMap<&str, (i64, i64)> = HashMap::new();
            for (i, (from, to, cents)) in ops.into_iter().enumerate() {
                if from == to { continue; }
                let amount = format!("{}.{:02}", cents / 100, cents % 100);
                match t.post(transfer(&format!("op{i}"), names[from], names[to], &amount)).await {
                    Ok(_) => {
                        model.entry(names[to]).or_default().0 += i64::from(cents);
                        model.entry(names[from]).or_default().1 += i64::from(cents);
                    }
                    Err(e) => assert_eq!(reason(&e), "INSUFFICIENT_FUNDS"),
                }
            }
            let (mut sd, mut sc) = (0i64, 0i64);
            for (i, name) in names.iter().enumerate() {
                let b = t.balance(name, None).await;
                let (d, c) = model.get(name).copied().unwrap_or_default();
                let cents = |s: &str| -> i64 { s.replace('.', "").parse().unwrap() };
                assert_eq!((cents(&b.debits), cents(&b.credits)), (d, c), "{name}");
                if i > 0 { assert!(cents(&b.balance) >= 0, "{name} below zero"); }
                sd += d; sc += c;
            }
            assert_eq!(sd, sc);
            let db = t.db().await;
            let bad: i64 = db.query_one(
                "SELECT count(*) FROM account_totals t CROSS JOIN LATERAL (
                   SELECT coalesce(sum(amount) FILTER (WHERE direction = 'D'), 0) AS d, coalesce(sum(amount) FILTER (WHERE direction = 'C'), 0) AS c
                   FROM entries e WHERE e.account_id = t.account_id) s
                 WHERE t.debits <> s.d OR t.credits <> s.c", &[]).await.unwrap().get(0);
            assert_eq!(bad, 0, "stored totals equal the sums of legs");
        });
    }
}
