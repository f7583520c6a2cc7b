//! `ListRollups`: the account-code tree's nodes at a cut-off equal the sums of the per-account
//! answers beneath them, on both clocks, with back- and future-dated postings and holds, and
//! an answer never changes.

use crate::support::*;
use ledger_server::grpc::pb;
use pb::ledger_client::LedgerClient;
use prost_types::Timestamp;
use std::collections::BTreeMap;
use tonic::transport::Channel;

/// The chart: (code, currency, normal side).
const CHART: &[(&str, &str, pb::NormalBalance)] = &[
    ("assets:bank:eur", "EUR", pb::NormalBalance::Debit),
    ("assets:bank:usd", "USD", pb::NormalBalance::Debit),
    ("assets:receivables", "EUR", pb::NormalBalance::Debit),
    ("assets-2", "EUR", pb::NormalBalance::Debit),
    (
        "liabilities:payables:acme",
        "EUR",
        pb::NormalBalance::Credit,
    ),
    (
        "liabilities:payables:globex",
        "EUR",
        pb::NormalBalance::Credit,
    ),
    ("liabilities:payables:usd", "USD", pb::NormalBalance::Credit),
    ("liabilities:customers", "EUR", pb::NormalBalance::Credit),
    ("income:fees", "EUR", pb::NormalBalance::Credit),
    ("expenses:cloud", "EUR", pb::NormalBalance::Debit),
    ("expenses:cloud:usd", "USD", pb::NormalBalance::Debit),
    ("equity:capital", "EUR", pb::NormalBalance::Credit),
    ("equity:capital:usd", "USD", pb::NormalBalance::Credit),
    ("unused:never", "EUR", pb::NormalBalance::Debit),
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn ts(t: time::OffsetDateTime) -> Timestamp {
    Timestamp {
        seconds: t.unix_timestamp(),
        nanos: (t.unix_timestamp_nanos() % 1_000_000_000) as i32,
    }
}

fn time_of(t: &Timestamp) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(
        i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanos),
    )
    .unwrap()
}

async fn chart(t: &mut TestLedger) {
    for &(code, currency, normal) in CHART {
        t.account(code, currency, 2, normal, true).await;
    }
}

/// One random write: a transfer (some back- or future-dated by up to a day), a hold, or a
/// capture or release of an open hold. Returns the recorded time of what it wrote.
async fn random_write(
    c: &mut LedgerClient<Channel>,
    rng: &mut Rng,
    n: usize,
    holds: &mut Vec<String>,
) -> Timestamp {
    let now = time::OffsetDateTime::now_utc();
    let currency = if rng.below(3) == 0 { "USD" } else { "EUR" };
    let mine: Vec<&str> = CHART
        .iter()
        .filter(|a| a.1 == currency && !a.0.starts_with("unused"))
        .map(|a| a.0)
        .collect();
    let from = mine[rng.below(mine.len() as u64) as usize];
    let to = loop {
        let to = mine[rng.below(mine.len() as u64) as usize];
        if to != from {
            break to;
        }
    };
    let amount = format!("{}.{:02}", 1 + rng.below(500), rng.below(100));
    let shift = time::Duration::seconds(rng.below(86_400) as i64 + 1);
    let effective_at = match rng.below(5) {
        0 => Some(ts(now - shift)),
        1 => Some(ts(now + shift)),
        _ => None,
    };
    let key = format!("w-{n}");
    let posting = match (rng.below(6), holds.pop()) {
        (0, Some(h)) => {
            let r = c
                .capture(pb::CaptureRequest {
                    idempotency_key: key,
                    hold_posting_id: h,
                    ..Default::default()
                })
                .await;
            r.expect("capture").into_inner().posting
        }
        (1, Some(h)) => {
            let r = c
                .void(pb::VoidRequest {
                    idempotency_key: key,
                    posting_id: h,
                    reason: "released".into(),
                    ..Default::default()
                })
                .await;
            r.expect("release").into_inner().posting
        }
        (k, h) => {
            holds.extend(h);
            let mut req = transfer(&key, from, to, &amount);
            req.effective_at = effective_at;
            req.hold = k == 2;
            let p = c
                .post(req)
                .await
                .expect("post")
                .into_inner()
                .posting
                .unwrap();
            if p.hold {
                holds.push(p.posting_id.clone());
            }
            Some(p)
        }
    };
    posting.unwrap().recorded_at.unwrap()
}

async fn rollups(
    c: &mut LedgerClient<Channel>,
    prefix: &str,
    depth: u32,
    as_of: Option<pb::AsOf>,
    page_size: u32,
) -> (Vec<pb::Rollup>, pb::AsOf, u64) {
    let (mut out, mut token) = (Vec::new(), String::new());
    loop {
        let r = c
            .list_rollups(pb::ListRollupsRequest {
                prefix: prefix.into(),
                depth,
                as_of,
                page_size,
                page_token: token,
                ..Default::default()
            })
            .await
            .expect("rollups")
            .into_inner();
        out.extend(r.rollups);
        if r.next_page_token.is_empty() {
            return (out, r.as_of.unwrap(), r.as_of_sequence);
        }
        token = r.next_page_token;
    }
}

fn minor(s: &str) -> i128 {
    let (whole, frac) = s.split_once('.').unwrap_or((s, "00"));
    let sign = if whole.starts_with('-') { -1 } else { 1 };
    sign * (whole.trim_start_matches('-').parse::<i128>().unwrap() * 100
        + frac.parse::<i128>().unwrap())
}

fn beneath(node: &str, code: &str) -> bool {
    node.is_empty() || code == node || code.starts_with(&format!("{node}:"))
}

/// The expected nodes: from every account's GetBalance at the applied cut-off, summed.
async fn expected(
    c: &mut LedgerClient<Channel>,
    prefix: &str,
    depth: u32,
    at: pb::AsOf,
) -> BTreeMap<String, (u64, BTreeMap<String, [i128; 6]>)> {
    let levels = prefix.split(':').filter(|s| !s.is_empty()).count() + depth as usize;
    let mut want: BTreeMap<String, (u64, BTreeMap<String, [i128; 6]>)> = BTreeMap::new();
    for &(code, currency, _) in CHART.iter().filter(|a| beneath(prefix, a.0)) {
        let b = c
            .get_balance(pb::GetBalanceRequest {
                account: code.into(),
                as_of: Some(at),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        if b.last_sequence == 0 {
            continue; // no leg by the cut-off: not in the rollup
        }
        let segs: Vec<&str> = code.split(':').collect();
        let top = prefix.split(':').filter(|s| !s.is_empty()).count();
        for l in top..=levels.min(segs.len()) {
            let node = segs[..l].join(":");
            let (count, totals) = want.entry(node).or_default();
            *count += 1;
            let t = totals.entry(currency.to_owned()).or_default();
            let got = [
                &b.debits,
                &b.credits,
                &b.balance,
                &b.held_debits,
                &b.held_credits,
                &b.available,
            ];
            for (w, v) in t.iter_mut().zip(got) {
                *w += minor(v);
            }
        }
    }
    want
}

fn as_map(nodes: &[pb::Rollup]) -> BTreeMap<String, (u64, BTreeMap<String, [i128; 6]>)> {
    nodes
        .iter()
        .map(|n| {
            let totals = n
                .totals
                .iter()
                .map(|t| {
                    let v = [
                        &t.debits,
                        &t.credits,
                        &t.balance,
                        &t.held_debits,
                        &t.held_credits,
                        &t.available,
                    ];
                    (t.currency.clone(), v.map(|s| minor(s)))
                })
                .collect();
            (n.node.clone(), (n.account_count, totals))
        })
        .collect()
}

#[tokio::test]
async fn rollups_equal_the_sums_of_get_balance_beneath_each_node_at_random_cut_offs_on_both_clocks()
{
    let mut t = TestLedger::start().await;
    chart(&mut t).await;
    let c = &mut t.client.clone();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut holds, mut times) = (Vec::new(), Vec::new());
    for n in 0..60 {
        times.push(random_write(c, &mut rng, n, &mut holds).await);
    }
    let prefixes = [
        "",
        "assets",
        "liabilities",
        "liabilities:payables",
        "expenses:cloud",
        "nothing:here",
    ];
    for round in 0..24 {
        let recorded = times[rng.below(times.len() as u64) as usize];
        let shift = time::Duration::seconds(rng.below(2 * 86_400) as i64 - 86_400);
        let effective = match round % 3 {
            0 => None,
            _ => Some(ts(time_of(&recorded) + shift)),
        };
        let as_of = (round % 4 != 0).then_some(pb::AsOf {
            recorded_at: Some(recorded),
            effective_at: effective,
        });
        let prefix = prefixes[rng.below(prefixes.len() as u64) as usize];
        let depth = rng.below(4) as u32;
        let (nodes, at, _) = rollups(c, prefix, depth, as_of, 1 + rng.below(4) as u32).await;
        let want = expected(c, prefix, depth, at).await;
        assert_eq!(
            as_map(&nodes),
            want,
            "round {round}: prefix {prefix:?} depth {depth} at {at:?}"
        );
        let order: Vec<&str> = nodes.iter().map(|n| n.node.as_str()).collect();
        let mut sorted = order.clone();
        sorted.sort_by(|a, b| a.split(':').cmp(b.split(':')));
        assert_eq!(order, sorted, "tree order");
    }
}

#[tokio::test]
async fn a_rollup_answer_at_a_cut_off_is_unchanged_after_later_and_back_dated_writes() {
    let mut t = TestLedger::start().await;
    chart(&mut t).await;
    let c = &mut t.client.clone();
    let mut rng = Rng(42);
    let mut holds = Vec::new();
    for n in 0..25 {
        random_write(c, &mut rng, n, &mut holds).await;
    }
    let effective = ts(time::OffsetDateTime::now_utc() - time::Duration::hours(1));
    let asks = [
        None,
        Some(pb::AsOf {
            recorded_at: None,
            effective_at: Some(effective),
        }),
    ];
    let mut first = Vec::new();
    for as_of in asks {
        first.push(rollups(c, "", 3, as_of, 1000).await);
    }
    for n in 25..60 {
        random_write(c, &mut rng, n, &mut holds).await; // a fifth back-dated by up to a day
    }
    for (nodes, at, sequence) in first {
        let again = rollups(c, "", 3, Some(at), 2).await;
        assert_eq!((nodes, at, sequence), again, "the answer at {at:?}");
    }
}

#[tokio::test]
async fn a_rollup_shows_the_prefixs_node_and_the_depth_asked_and_refuses_a_bad_prefix_or_depth() {
    let mut t = TestLedger::start().await;
    chart(&mut t).await;
    let c = &mut t.client.clone();
    c.post(transfer(
        "a",
        "liabilities:payables:acme",
        "assets:bank:eur",
        "10.00",
    ))
    .await
    .unwrap();
    c.post(transfer(
        "b",
        "liabilities:payables:globex",
        "assets-2",
        "2.50",
    ))
    .await
    .unwrap();
    let nodes = |r: &[pb::Rollup]| {
        r.iter()
            .map(|n| (n.node.clone(), n.account_count))
            .collect::<Vec<_>>()
    };
    let s = |v: &[(&str, u64)]| {
        v.iter()
            .map(|(a, b)| (a.to_string(), *b))
            .collect::<Vec<_>>()
    };
    assert_eq!(nodes(&rollups(c, "", 0, None, 10).await.0), s(&[("", 4)]));
    assert_eq!(
        nodes(&rollups(c, "", 1, None, 10).await.0),
        s(&[("", 4), ("assets", 1), ("assets-2", 1), ("liabilities", 2)])
    );
    let (payables, _, _) = rollups(c, "liabilities:payables", 1, None, 10).await;
    assert_eq!(
        nodes(&payables),
        s(&[
            ("liabilities:payables", 2),
            ("liabilities:payables:acme", 1),
            ("liabilities:payables:globex", 1)
        ])
    );
    let t0 = &payables[0].totals[0];
    assert_eq!(
        (
            t0.currency.as_str(),
            t0.credits.as_str(),
            t0.balance.as_str()
        ),
        ("EUR", "12.50", "12.50")
    );
    assert!(
        rollups(c, "assets:bank:eur:x", 2, None, 10)
            .await
            .0
            .is_empty(),
        "nothing beneath"
    );
    for (prefix, depth, want) in [
        ("assets:", 1, "INVALID_FIELD"),
        ("a\0", 1, "INVALID_ACCOUNT_CODE"),
        ("assets", 17, "LIMIT_EXCEEDED"),
    ] {
        let e = c
            .list_rollups(pb::ListRollupsRequest {
                prefix: prefix.into(),
                depth,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_error(&e, tonic::Code::InvalidArgument, want);
    }
    let first = c
        .list_rollups(pb::ListRollupsRequest {
            depth: 2,
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = c
        .list_rollups(pb::ListRollupsRequest {
            depth: 3,
            page_size: 1,
            page_token: first.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_error(&e, tonic::Code::InvalidArgument, "INVALID_PAGE_TOKEN");
}

/// Every way `storage::read::rollup_groups_by` may find the running totals at m and decide
/// membership, at the cut-off an answer applied: the same groups as the way the server chose.
async fn every_way_agrees(t: &TestLedger, prefix: &str, depth: u32, at: pb::AsOf, sequence: u64) {
    use ledger_server::storage::read::{rollup_groups_by, AtM, Membership};
    let applied = ledger_core::record::AppliedAsOf {
        recorded_at: time_of(at.recorded_at.as_ref().unwrap()),
        effective_at: time_of(at.effective_at.as_ref().unwrap()),
        sequence,
    };
    let req = ledger_core::rollup::RollupRequest::new(prefix, depth).unwrap();
    let pool = ledger_server::storage::pool(&t.database_url, 1).unwrap();
    let db = pool.get().await.unwrap();
    let mut answers = Vec::new();
    for at_m in [AtM::Cheapest, AtM::Probe, AtM::Early, AtM::Late] {
        for membership in [Membership::Cheapest, Membership::Probe, Membership::SetWise] {
            let mut g = rollup_groups_by(&db, 0, &req, &applied, (at_m, membership))
                .await
                .unwrap();
            g.sort_by(|a, b| {
                (&a.node, &a.currency, a.normal as u8).cmp(&(&b.node, &b.currency, b.normal as u8))
            });
            answers.push(((at_m, membership), g));
        }
    }
    let (_, first) = &answers[0];
    for (way, g) in &answers {
        assert_eq!(
            g, first,
            "{way:?} at {applied:?}, prefix {prefix:?} depth {depth}"
        );
    }
}

#[tokio::test]
async fn every_way_of_summing_a_rollup_gives_the_same_groups_at_every_cut_off() {
    let mut t = TestLedger::start().await;
    chart(&mut t).await;
    let c = &mut t.client.clone();
    let mut rng = Rng(7);
    let (mut holds, mut times) = (Vec::new(), Vec::new());
    for n in 0..40 {
        times.push(random_write(c, &mut rng, n, &mut holds).await);
    }
    let shifts = [-86_400, -1, 0, 1, 86_400];
    for (i, recorded) in times.iter().enumerate().step_by(3) {
        let shift = time::Duration::seconds(shifts[i % shifts.len()]);
        let as_of = pb::AsOf {
            recorded_at: Some(*recorded),
            effective_at: Some(ts(time_of(recorded) + shift)),
        };
        let prefix = ["", "assets", "liabilities:payables"][i % 3];
        let (_, at, sequence) = rollups(c, prefix, 2, Some(as_of), 1000).await;
        every_way_agrees(&t, prefix, 2, at, sequence).await;
    }
}
