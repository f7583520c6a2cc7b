//! Bitemporal as-of: balances, trial balances and statements at recorded and effective
//! cut-offs, checked against an in-memory model that sums legs; stability under racing
//! writers and readers; page tokens.

use crate::support::*;
use ledger_server::grpc::pb;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration as StdDuration;
use time::{Duration, OffsetDateTime};
use tonic::Code;

// ---------- helpers ----------

use ledger_server::grpc::convert::time_to_pb as ts;

fn odt(t: &Option<prost_types::Timestamp>) -> OffsetDateTime {
    ledger_server::grpc::convert::time_from_pb("timestamp", t.as_ref().expect("timestamp")).unwrap()
}

fn as_of(r: Option<OffsetDateTime>, e: Option<OffsetDateTime>) -> Option<pb::AsOf> {
    Some(pb::AsOf {
        recorded_at: r.map(ts),
        effective_at: e.map(ts),
    })
}

/// Cents of a 2-decimal amount string ("12.34", "-0.50").
fn cents(s: &str) -> i64 {
    let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    let (units, frac) = s.split_once('.').expect("scale 2");
    assert_eq!(frac.len(), 2, "{s}");
    let v = units.parse::<i64>().unwrap() * 100 + frac.parse::<i64>().unwrap();
    if neg {
        -v
    } else {
        v
    }
}

fn money(c: i64) -> String {
    let sign = if c < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100)
}

fn at(p: &pb::Posting) -> (OffsetDateTime, OffsetDateTime) {
    (odt(&p.recorded_at), odt(&p.effective_at))
}

/// One leg as the model keeps it.
#[derive(Clone, Debug)]
struct MLeg {
    sequence: u64,
    leg: usize,
    posting_id: String,
    recorded: OffsetDateTime,
    effective: OffsetDateTime,
    account: String,
    debit: bool,
    cents: i64,
}

/// The model: every recorded leg, summed on demand.
#[derive(Default)]
struct Model {
    legs: Vec<MLeg>,
    credit_normal: BTreeSet<String>,
    currency: BTreeMap<String, String>,
}

impl Model {
    fn record(&mut self, p: &pb::Posting) {
        let (recorded, effective) = at(p);
        for (i, l) in p.legs.iter().enumerate() {
            self.legs.push(MLeg {
                sequence: p.sequence,
                leg: i,
                posting_id: p.posting_id.clone(),
                recorded,
                effective,
                account: l.account.clone(),
                debit: l.direction == pb::Direction::Debit as i32,
                cents: cents(&l.amount),
            });
        }
    }

    fn included(&self, r: OffsetDateTime, e: OffsetDateTime) -> impl Iterator<Item = &MLeg> {
        self.legs
            .iter()
            .filter(move |l| l.recorded <= r && l.effective <= e)
    }

    /// (debits, credits) of an account at (R, E).
    fn totals(&self, account: &str, r: OffsetDateTime, e: OffsetDateTime) -> (i64, i64) {
        self.included(r, e)
            .filter(|l| l.account == account)
            .fold((0, 0), |(d, c), l| {
                if l.debit {
                    (d + l.cents, c)
                } else {
                    (d, c + l.cents)
                }
            })
    }

    fn balance(&self, account: &str, r: OffsetDateTime, e: OffsetDateTime) -> i64 {
        let (d, c) = self.totals(account, r, e);
        if self.credit_normal.contains(account) {
            c - d
        } else {
            d - c
        }
    }

    /// The last sequence recorded by R.
    fn sequence(&self, r: OffsetDateTime) -> u64 {
        self.legs
            .iter()
            .filter(|l| l.recorded <= r)
            .map(|l| l.sequence)
            .max()
            .unwrap_or(0)
    }

    /// Accounts with a leg recorded by R.
    fn accounts(&self, r: OffsetDateTime) -> BTreeSet<String> {
        self.legs
            .iter()
            .filter(|l| l.recorded <= r)
            .map(|l| l.account.clone())
            .collect()
    }
}

fn transfer_at(
    key: &str,
    from: &str,
    to: &str,
    amount: &str,
    effective: Option<OffsetDateTime>,
) -> pb::PostRequest {
    let mut r = transfer(key, from, to, amount);
    r.effective_at = effective.map(ts);
    r
}

async fn posted(t: &mut TestLedger, req: pb::PostRequest) -> pb::Posting {
    t.post(req).await.expect("posted").posting.unwrap()
}

async fn voided(
    t: &mut TestLedger,
    key: &str,
    target: &pb::Posting,
    effective: Option<OffsetDateTime>,
) -> pb::Posting {
    t.client
        .void(pb::VoidRequest {
            ledger: String::new(),
            idempotency_key: key.into(),
            posting_id: target.posting_id.clone(),
            reason: "test".into(),
            effective_at: effective.map(ts),
        })
        .await
        .expect("voided")
        .into_inner()
        .posting
        .unwrap()
}

/// Asserts GetBalance at (R, E) against the model (debits, credits, balance, sequence, as_of).
async fn assert_balance_matches_model(
    t: &mut TestLedger,
    m: &Model,
    account: &str,
    r: OffsetDateTime,
    e: Option<OffsetDateTime>,
) -> pb::Balance {
    let b = t.balance(account, as_of(Some(r), e)).await;
    let eff = e.unwrap_or(r);
    let (d, c) = m.totals(account, r, eff);
    let what = format!("{account} at R={r} E={eff}");
    assert_eq!(b.debits, money(d), "{what}");
    assert_eq!(b.credits, money(c), "{what}");
    assert_eq!(b.balance, money(m.balance(account, r, eff)), "{what}");
    assert_eq!(b.as_of_sequence, m.sequence(r), "{what}");
    let applied = b.as_of.unwrap();
    assert_eq!(odt(&applied.recorded_at), r, "{what}");
    assert_eq!(odt(&applied.effective_at), eff, "{what}");
    b
}

async fn all_entries(
    t: &mut TestLedger,
    account: &str,
    cut: Option<pb::AsOf>,
    page_size: u32,
) -> Vec<pb::Entry> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let page = t
            .client
            .list_entries(pb::ListEntriesRequest {
                ledger: String::new(),
                account: account.into(),
                as_of: cut,
                page_size,
                page_token: token,
            })
            .await
            .expect("entries")
            .into_inner();
        assert!(page.entries.len() <= page_size as usize);
        out.extend(page.entries);
        if page.next_page_token.is_empty() {
            return out;
        }
        token = page.next_page_token;
    }
}

async fn all_balances(
    client: &mut pb::ledger_client::LedgerClient<tonic::transport::Channel>,
    prefix: &str,
    cut: Option<pb::AsOf>,
    page_size: u32,
) -> (Vec<pb::Balance>, Vec<pb::CurrencyTotal>) {
    let mut balances = Vec::new();
    let mut totals = None;
    let mut token = String::new();
    loop {
        let page = client
            .list_balances(pb::ListBalancesRequest {
                ledger: String::new(),
                prefix: prefix.into(),
                as_of: cut,
                page_size,
                page_token: token,
            })
            .await
            .expect("balances")
            .into_inner();
        if let Some(t) = &totals {
            assert_eq!(t, &page.totals, "totals are the same on every page");
        }
        totals = Some(page.totals);
        balances.extend(page.balances);
        if page.next_page_token.is_empty() {
            return (balances, totals.unwrap());
        }
        token = page.next_page_token;
    }
}

/// Accounts `a:0`, `a:1` (EUR, debit-normal) and `w` (EUR, credit-normal), all free to go
/// negative so that any history is accepted.
async fn model_accounts(t: &mut TestLedger, m: &mut Model) {
    for (code, normal) in [
        ("a:0", pb::NormalBalance::Debit),
        ("a:1", pb::NormalBalance::Debit),
        ("w", pb::NormalBalance::Credit),
    ] {
        t.account(code, "EUR", 2, normal, true).await;
        if normal == pb::NormalBalance::Credit {
            m.credit_normal.insert(code.into());
        }
        m.currency.insert(code.into(), "EUR".into());
    }
}

// ---------- back-dated and future-dated postings against each kind of cut-off ----------

#[tokio::test]
async fn back_and_future_dated_postings_count_by_recorded_effective_and_both_cut_offs() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    let day = Duration::days(1);

    let p1 = posted(&mut t, transfer_at("p1", "w", "a:0", "10.00", None)).await;
    m.record(&p1);
    let (r1, e1) = at(&p1);
    // Recorded after p1, effective two days before it.
    let back = posted(
        &mut t,
        transfer_at("back", "w", "a:0", "2.00", Some(e1 - day * 2)),
    )
    .await;
    m.record(&back);
    let (r_back, e_back) = at(&back);
    // Recorded after both, effective a day in the future.
    let fut = posted(
        &mut t,
        transfer_at("fut", "a:0", "a:1", "3.00", Some(r1 + day)),
    )
    .await;
    m.record(&fut);
    let (r_fut, e_fut) = at(&fut);
    assert!(e_back < e1 && r1 < r_back && r_back < r_fut && e_fut > r_fut);

    // Every kind of cut-off, at every interesting instant (and a microsecond either side).
    let us = Duration::microseconds(1);
    let instants: Vec<OffsetDateTime> = [e_back, r1, r_back, r_fut, e_fut]
        .iter()
        .flat_map(|&x| [x - us, x, x + us])
        .collect();
    let now = r_fut + us;
    for account in ["a:0", "a:1", "w"] {
        for &r in instants.iter().filter(|&&r| r <= now) {
            // Recorded only.
            assert_balance_matches_model(&mut t, &m, account, r, None).await;
            for &e in &instants {
                // Both.
                assert_balance_matches_model(&mut t, &m, account, r, Some(e)).await;
            }
        }
        // Effective only: R defaults to now, so the answer is "as we know it now".
        for &e in &instants {
            let b = t.balance(account, as_of(None, Some(e))).await;
            let r = odt(&b.as_of.unwrap().recorded_at);
            assert!(r >= r_fut);
            assert_eq!(
                b.balance,
                money(m.balance(account, r, e)),
                "{account} E={e}"
            );
            assert_eq!(b.as_of_sequence, 3);
        }
    }

    // The named cases, spelled out.
    // Recorded only, before the back-dated posting was recorded: it is not known yet.
    assert_eq!(
        t.balance("a:0", as_of(Some(r1), None)).await.balance,
        "10.00"
    );
    // Effective only at its effective time: as known now, it counts, and p1 does not yet.
    assert_eq!(
        t.balance("a:0", as_of(None, Some(e_back))).await.balance,
        "2.00"
    );
    // Bitemporal: effective by then, but recorded after R, so "as known at R" excludes it.
    assert_eq!(
        t.balance("a:0", as_of(Some(r1), Some(e_back)))
            .await
            .balance,
        "0.00"
    );
    // The future-dated posting counts only from its effective time.
    assert_eq!(
        t.balance("a:1", as_of(Some(now), None)).await.balance,
        "0.00"
    );
    assert_eq!(
        t.balance("a:1", as_of(Some(now), Some(e_fut)))
            .await
            .balance,
        "3.00"
    );
    assert_eq!(t.balance("a:1", as_of(None, None)).await.balance, "0.00");
}

// ---------- voids ----------

#[tokio::test]
async fn a_void_counts_from_its_own_effective_time_which_defaults_to_when_it_was_recorded() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    let week = Duration::days(7);

    // A posting back-dated by a week, then voided twice over: once with the default
    // effective time (now), once (another posting) with the void back-dated too.
    let p = posted(&mut t, transfer_at("p", "w", "a:0", "5.00", None)).await;
    m.record(&p);
    let (r_p, _) = at(&p);
    let q = posted(
        &mut t,
        transfer_at("q", "w", "a:0", "7.00", Some(r_p - week)),
    )
    .await;
    m.record(&q);
    let v = voided(&mut t, "void-p", &p, None).await;
    m.record(&v);
    let (r_v, e_v) = at(&v);
    assert_eq!(
        r_v, e_v,
        "a void is effective when recorded unless told otherwise"
    );
    let w = voided(&mut t, "void-q", &q, Some(r_p - week)).await;
    m.record(&w);
    let (r_w, e_w) = at(&w);
    assert_eq!(e_w, r_p - week);

    let us = Duration::microseconds(1);
    let mut instants = vec![
        r_p - week - us,
        r_p - week,
        r_p,
        r_v - us,
        r_v,
        r_w - us,
        r_w,
    ];
    instants.sort();
    for &r in &instants {
        assert_balance_matches_model(&mut t, &m, "a:0", r, None).await;
        for &e in &instants {
            assert_balance_matches_model(&mut t, &m, "a:0", r, Some(e)).await;
        }
    }
    // Before the void was recorded, the posting stands; after it, it is gone.
    assert_eq!(
        t.balance("a:0", as_of(Some(r_v - us), None)).await.balance,
        "12.00"
    );
    assert_eq!(
        t.balance("a:0", as_of(Some(r_v), None)).await.balance,
        "7.00"
    );
    // After the back-dated void of q was recorded, q is gone even as of its own effective time…
    assert_eq!(
        t.balance("a:0", as_of(Some(r_w), Some(r_p - week)))
            .await
            .balance,
        "0.00"
    );
    // …but as known before that void, q still stood then.
    assert_eq!(
        t.balance("a:0", as_of(Some(r_w - us), Some(r_p - week)))
            .await
            .balance,
        "7.00"
    );
    // The void of p is effective now: as of before it, p still counts, as known today.
    assert_eq!(
        t.balance("a:0", as_of(None, Some(r_v - us))).await.balance,
        "5.00"
    );
}

// ---------- statements ----------

#[tokio::test]
async fn statement_pages_cover_each_included_entry_once_in_order_with_a_running_balance() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    let hour = Duration::hours(1);
    let start = OffsetDateTime::now_utc();
    let mut posts = Vec::new();
    for i in 0..23i64 {
        // Every third posting back-dated, every fifth future-dated, one leg pair to a:0 per
        // posting, and now and then a posting with two legs on a:0 (in and out).
        let eff = match i {
            _ if i % 3 == 0 => Some(start - hour * (24 - i) as i32),
            _ if i % 5 == 0 => Some(start + hour * i as i32),
            _ => None,
        };
        let mut req = transfer_at(&format!("s{i}"), "w", "a:0", &format!("{i}.25"), eff);
        if i % 7 == 0 {
            req.legs.push(leg("a:0", pb::Direction::Credit, "0.25"));
            req.legs.push(leg("a:1", pb::Direction::Debit, "0.25"));
        }
        let p = posted(&mut t, req).await;
        m.record(&p);
        posts.push(p);
    }
    let p10 = posts[10].clone();
    let v = voided(&mut t, "void-10", &p10, None).await;
    m.record(&v);

    let (r_mid, _) = at(&posts[15]);
    let cuts = [
        (None, None),
        (Some(r_mid), None),
        (None, Some(start)),
        (Some(r_mid), Some(start - hour * 12)),
        (None, Some(start + hour * 100)),
    ];
    for (r, e) in cuts {
        for page_size in [1, 4, 1000] {
            let got = all_entries(&mut t, "a:0", as_of(r, e), page_size).await;
            let b = t.balance("a:0", as_of(r, e)).await;
            let applied = b.as_of.unwrap();
            let (ar, ae) = (odt(&applied.recorded_at), odt(&applied.effective_at));
            let want: Vec<&MLeg> = m.included(ar, ae).filter(|l| l.account == "a:0").collect();
            let what = format!("R={r:?} E={e:?} page_size={page_size}");
            assert_eq!(got.len(), want.len(), "{what}");
            // A posting is applied whole: each entry shows the balance after every leg of its
            // posting on the account.
            let mut running = 0;
            let mut after: Vec<i64> = want
                .iter()
                .map(|w| {
                    running += if w.debit { w.cents } else { -w.cents };
                    running
                })
                .collect();
            for i in (0..after.len().saturating_sub(1)).rev() {
                if want[i].sequence == want[i + 1].sequence {
                    after[i] = after[i + 1];
                }
            }
            for ((g, w), after) in got.iter().zip(&want).zip(&after) {
                assert_eq!(g.sequence, w.sequence, "{what}");
                assert_eq!(g.posting_id, w.posting_id, "{what}");
                assert_eq!(cents(&g.amount), w.cents, "{what}");
                assert_eq!(
                    g.direction == pb::Direction::Debit as i32,
                    w.debit,
                    "{what}"
                );
                assert_eq!(odt(&g.effective_at), w.effective, "{what}");
                assert_eq!(g.balance_after, money(*after), "{what}");
            }
            // In order, each (sequence, leg) once.
            let keys: Vec<(u64, usize)> = want.iter().map(|l| (l.sequence, l.leg)).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "{what}");
            // The statement ends at the balance for the same cut-off.
            let last = got
                .last()
                .map_or("0.00".to_string(), |e| e.balance_after.clone());
            assert_eq!(last, b.balance, "{what}");
        }
    }
    // The effective cut-off excluded some entries, so the statements differ in length.
    let all = all_entries(&mut t, "a:0", None, 1000).await.len();
    let early = all_entries(&mut t, "a:0", as_of(None, Some(start)), 1000)
        .await
        .len();
    assert!(early < all);
}

#[tokio::test]
async fn tampered_or_foreign_page_tokens_are_refused() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    for i in 0..4 {
        posted(&mut t, transfer(&format!("k{i}"), "w", "a:0", "1.00")).await;
    }
    let entries = t
        .client
        .list_entries(pb::ListEntriesRequest {
            ledger: String::new(),
            account: "a:0".into(),
            as_of: None,
            page_size: 1,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let balances = t
        .client
        .list_balances(pb::ListBalancesRequest {
            ledger: String::new(),
            prefix: String::new(),
            as_of: None,
            page_size: 1,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let flip = |tok: &str, i: usize| {
        let mut b = tok.as_bytes().to_vec();
        b[i] = if b[i] == b'0' { b'1' } else { b'0' };
        String::from_utf8(b).unwrap()
    };
    let et = entries.next_page_token;
    let bt = balances.next_page_token;
    assert!(!et.is_empty() && !bt.is_empty());
    let mut bad_entries = vec![
        ("a flipped first character", flip(&et, 0)),
        ("a flipped middle character", flip(&et, et.len() / 2)),
        ("a flipped last character", flip(&et, et.len() - 1)),
        ("a truncated token", et[..et.len() - 2].to_string()),
        ("a token of another query", bt.clone()),
        ("not hex", "zz".repeat(60)),
    ];
    // The running balance is in the token: raising it must not pass.
    bad_entries.push(("a changed running total", flip(&et, et.len() - 40)));
    for (what, tok) in bad_entries {
        let err = t
            .client
            .list_entries(pb::ListEntriesRequest {
                ledger: String::new(),
                account: "a:0".into(),
                as_of: None,
                page_size: 1,
                page_token: tok,
            })
            .await
            .expect_err(what);
        assert_error(&err, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
    }
    // A statement token used for another account's statement.
    let err = t
        .client
        .list_entries(pb::ListEntriesRequest {
            ledger: String::new(),
            account: "w".into(),
            as_of: None,
            page_size: 1,
            page_token: et.clone(),
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
    for (what, tok) in [
        ("a flipped character", flip(&bt, bt.len() / 3)),
        ("a statement token", et.clone()),
    ] {
        let err = t
            .client
            .list_balances(pb::ListBalancesRequest {
                ledger: String::new(),
                prefix: String::new(),
                as_of: None,
                page_size: 1,
                page_token: tok,
            })
            .await
            .expect_err(what);
        assert_error(&err, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
    }
    // A trial balance token used with another prefix.
    let err = t
        .client
        .list_balances(pb::ListBalancesRequest {
            ledger: String::new(),
            prefix: "a:".into(),
            as_of: None,
            page_size: 1,
            page_token: bt,
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
}

// ---------- stability ----------

/// A batch the writer numbered ahead of the database clock (it gives each posting of a batch
/// its own microsecond after the clock, so a large batch can commit with `recorded_at` in the
/// clock's future), simulated by appending such a posting directly.
async fn append_posting_recorded_ahead(t: &TestLedger, ahead: Duration) -> (i64, OffsetDateTime) {
    let db = t.db().await;
    let row = db
        .query_one(
            "SELECT last_sequence + 1, greatest(clock_timestamp(), last_recorded_at) + $1::text::interval
             FROM ledger_state",
            &[&format!("{} microseconds", ahead.whole_microseconds())],
        )
        .await
        .unwrap();
    let (seq, rec): (i64, OffsetDateTime) = (row.get(0), row.get(1));
    db.batch_execute(&format!(
        "BEGIN;
         INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at) VALUES (0, 'test', 'ahead', 'post', decode(repeat('ab', 32), 'hex'), clock_timestamp());
         INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata, key_id)
           SELECT {seq}, gen_random_uuid(), 'test', 'ahead', '{rec}', '{rec}', '', '{{}}', key_id
           FROM idempotency_keys WHERE caller = 'test' AND idempotency_key = 'ahead';
         INSERT INTO entries
           SELECT {seq}, i, a.account_id, d, 1.00, coalesce(t.version, 0) + 1,
                  coalesce(t.debits, 0) + CASE WHEN d = 'D' THEN 1.00 ELSE 0 END,
                  coalesce(t.credits, 0) + CASE WHEN d = 'C' THEN 1.00 ELSE 0 END,
                  '{rec}', '{rec}'
           FROM (VALUES (0, 'a:0', 'D'::\"char\"), (1, 'w', 'C'::\"char\")) AS l(i, code, d)
           JOIN accounts a USING (code) LEFT JOIN account_totals t USING (account_id);
         UPDATE ledger_state SET last_sequence = {seq}, last_recorded_at = '{rec}';
         COMMIT;",
        rec = rec.format(&time::format_description::well_known::Rfc3339).unwrap()
    ))
    .await
    .unwrap();
    (seq, rec)
}

#[tokio::test]
async fn a_posting_recorded_ahead_of_the_clock_is_seen_at_once_and_its_time_is_a_valid_cut_off() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    posted(&mut t, transfer("first", "w", "a:0", "1.00")).await;
    let (seq, rec) = append_posting_recorded_ahead(&t, Duration::seconds(30)).await;
    // Read-your-writes: the answer "now" includes every committed posting…
    let b = t.balance("a:0", None).await;
    assert_eq!(b.as_of_sequence, seq as u64);
    assert_eq!(b.balance, "2.00");
    // …and the cut-off it reports (the posting's own time) can be asked again.
    let again = t.balance("a:0", b.as_of).await;
    assert_eq!(again, b);
    assert_eq!(odt(&b.as_of.unwrap().recorded_at), rec);
    // Past the last posting and the clock is still the future.
    let err = t
        .client
        .get_balance(pb::GetBalanceRequest {
            ledger: String::new(),
            account: "a:0".into(),
            as_of: as_of(Some(rec + Duration::seconds(1)), None),
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::InvalidArgument, "AS_OF_IN_FUTURE");
    // Times in messages are RFC 3339, as callers send them.
    let asked = (rec + Duration::seconds(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    assert!(err.message().contains(&asked), "{}", err.message());
}

#[tokio::test]
async fn a_trial_balance_never_changes_once_answered_even_when_accounts_are_added_later() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    posted(&mut t, transfer("k1", "w", "a:0", "4.00")).await;
    let (first, first_totals) = all_balances(&mut t.client, "", None, 100).await;
    let cut = first[0].as_of;
    // Later: a new account, one used for the first time, one never used.
    t.account("a:2", "EUR", 2, pb::NormalBalance::Debit, true)
        .await;
    t.account("a:3", "EUR", 2, pb::NormalBalance::Debit, true)
        .await;
    posted(&mut t, transfer("k2", "w", "a:2", "1.00")).await;
    posted(&mut t, transfer("k3", "w", "a:1", "1.00")).await;
    let (again, again_totals) = all_balances(&mut t.client, "", cut, 100).await;
    assert_eq!(again, first);
    assert_eq!(again_totals, first_totals);
    let listed: Vec<&str> = first.iter().map(|b| b.account.as_str()).collect();
    assert_eq!(listed, vec!["a:0", "w"]);
    // Now the used accounts appear.
    let (now, _) = all_balances(&mut t.client, "", None, 100).await;
    let listed: Vec<&str> = now.iter().map(|b| b.account.as_str()).collect();
    assert_eq!(listed, vec!["a:0", "a:1", "a:2", "w"]);
}

/// A small deterministic generator (xorshift), enough for choosing test actions.
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

#[derive(Debug)]
enum Answer {
    Balance(String, pb::Balance),
    Trial(Vec<pb::Balance>, Vec<pb::CurrencyTotal>),
    Statement(String, Option<pb::AsOf>, Vec<pb::Entry>),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answers_taken_while_writers_race_readers_are_the_same_when_asked_again() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    let accounts = ["a:0", "a:1", "w"];
    let deadline = tokio::time::Instant::now() + StdDuration::from_millis(2500);

    let mut writers = Vec::new();
    for w in 0..4u64 {
        let mut c = t.new_client().await;
        writers.push(tokio::spawn(async move {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (w + 1));
            let mut n = 0;
            // At most 200 each: the statements below are read as one page of 1,000.
            while tokio::time::Instant::now() < deadline && n < 200 {
                let now = OffsetDateTime::now_utc();
                let minutes = Duration::minutes(1 + rng.below(600) as i64);
                let eff = match rng.below(4) {
                    0 => Some(now - minutes),
                    1 => Some(now + minutes),
                    // Just behind the clock: back-dated across the fence.
                    2 => Some(now - Duration::milliseconds(rng.below(20) as i64)),
                    _ => None,
                };
                let to = if rng.below(2) == 0 { "a:0" } else { "a:1" };
                let amount = format!("{}.{:02}", 1 + rng.below(50), rng.below(100));
                c.post(transfer_at(&format!("w{w}-{n}"), "w", to, &amount, eff))
                    .await
                    .expect("post");
                n += 1;
            }
            n
        }));
    }
    let mut readers = Vec::new();
    for r in 0..4u64 {
        let mut c = t.new_client().await;
        readers.push(tokio::spawn(async move {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (r + 7));
            let mut answers = Vec::new();
            while tokio::time::Instant::now() < deadline {
                let now = OffsetDateTime::now_utc();
                let back = Duration::milliseconds(rng.below(300) as i64);
                let wide = Duration::minutes(rng.below(600) as i64);
                // No cut-off, recorded only (often right at the clock: the fenced case),
                // effective only, both.
                let cut = match rng.below(5) {
                    0 => None,
                    1 => as_of(Some(now), None),
                    2 => as_of(Some(now - back), None),
                    3 => as_of(None, Some(now - wide)),
                    _ => as_of(Some(now - back), Some(now + wide - Duration::minutes(300))),
                };
                let account = accounts[rng.below(3) as usize].to_string();
                match rng.below(3) {
                    0 => {
                        let b = c
                            .get_balance(pb::GetBalanceRequest {
                                ledger: String::new(),
                                account: account.clone(),
                                as_of: cut,
                            })
                            .await
                            .expect("balance")
                            .into_inner();
                        answers.push(Answer::Balance(account, b));
                    }
                    1 => {
                        let (b, tot) = all_balances(&mut c, "", cut, 1000).await;
                        answers.push(Answer::Trial(b, tot));
                    }
                    _ => {
                        // A statement carries no applied cut-off: ask with an explicit one.
                        let cut = cut
                            .filter(|a| a.recorded_at.is_some())
                            .or(as_of(Some(now), None));
                        let e = c
                            .list_entries(pb::ListEntriesRequest {
                                ledger: String::new(),
                                account: account.clone(),
                                as_of: cut,
                                page_size: 1000,
                                page_token: String::new(),
                            })
                            .await
                            .expect("entries")
                            .into_inner();
                        assert!(e.next_page_token.is_empty());
                        answers.push(Answer::Statement(account, cut, e.entries));
                    }
                }
            }
            answers
        }));
    }
    let mut posts = 0;
    for w in writers {
        posts += w.await.unwrap();
    }
    let mut answers = Vec::new();
    for r in readers {
        answers.extend(r.await.unwrap());
    }
    assert!(posts > 20, "the writers made only {posts} postings");
    assert!(
        answers.len() > 40,
        "the readers got only {} answers",
        answers.len()
    );
    // Let later batches commit after every answer, then ask everything again.
    posted(&mut t, transfer("after", "w", "a:0", "1.00")).await;
    let mut client = t.new_client().await;
    let mut kinds = [0usize; 3];
    for a in &answers {
        match a {
            Answer::Balance(account, b) => {
                kinds[0] += 1;
                let again = client
                    .get_balance(pb::GetBalanceRequest {
                        ledger: String::new(),
                        account: account.clone(),
                        as_of: b.as_of,
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(&again, b);
            }
            Answer::Trial(b, tot) => {
                kinds[1] += 1;
                let cut = b.first().and_then(|b| b.as_of);
                if cut.is_none() {
                    // Nothing recorded yet at that cut-off.
                    assert!(tot.is_empty());
                    continue;
                }
                for x in b {
                    assert_eq!(x.as_of, cut, "one cut-off for the whole trial balance");
                }
                let (again, again_tot) = all_balances(&mut client, "", cut, 1000).await;
                assert_eq!(&again, b);
                assert_eq!(&again_tot, tot);
                for t in tot {
                    assert_eq!(t.debits, t.credits, "a sound ledger's trial balance");
                }
            }
            Answer::Statement(account, cut, entries) => {
                kinds[2] += 1;
                let again = client
                    .list_entries(pb::ListEntriesRequest {
                        ledger: String::new(),
                        account: account.clone(),
                        as_of: *cut,
                        page_size: 1000,
                        page_token: String::new(),
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .entries;
                assert_eq!(&again, entries);
            }
        }
    }
    assert!(kinds.iter().all(|&k| k > 0), "every kind asked: {kinds:?}");
}

// ---------- trial balance at every cut-off of a random history ----------

#[derive(Clone, Debug)]
enum Op {
    /// Transfer cents from one account to another, effective at an offset in minutes from
    /// when it is recorded (0: not given).
    Transfer {
        from: usize,
        to: usize,
        cents: u32,
        offset_minutes: i64,
    },
    /// Void the n-th posting so far (modulo), if it can be voided, back-dated by the offset.
    Void { which: usize, offset_minutes: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    let offset = prop_oneof![Just(0i64), -3000i64..3000];
    prop_oneof![
        4 => (0..5usize, 0..5usize, 1..10_000u32, offset.clone()).prop_filter_map(
            "distinct accounts",
            |(from, to, cents, offset_minutes)| (from != to).then_some(Op::Transfer {
                from,
                to,
                cents,
                offset_minutes
            })
        ),
        1 => (any::<usize>(), prop_oneof![Just(0i64), -3000i64..0]).prop_map(|(which, offset_minutes)| Op::Void { which, offset_minutes }),
    ]
}

/// EUR accounts e:0..e:2 and USD accounts u:0, u:1 (indices 3, 4), any may go negative.
const CODES: [&str; 5] = ["e:0", "e:1", "e:2", "u:0", "u:1"];

async fn run_history(ops: Vec<Op>) {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    for (i, code) in CODES.iter().enumerate() {
        let (currency, normal) = match i {
            0 => ("EUR", pb::NormalBalance::Credit),
            1 | 2 => ("EUR", pb::NormalBalance::Debit),
            3 => ("USD", pb::NormalBalance::Credit),
            _ => ("USD", pb::NormalBalance::Debit),
        };
        t.account(code, currency, 2, normal, true).await;
        if normal == pb::NormalBalance::Credit {
            m.credit_normal.insert((*code).into());
        }
        m.currency.insert((*code).into(), currency.into());
    }
    let mut postings: Vec<pb::Posting> = Vec::new();
    for (n, op) in ops.into_iter().enumerate() {
        let now = OffsetDateTime::now_utc();
        match op {
            Op::Transfer {
                from,
                to,
                cents,
                offset_minutes,
            } => {
                // Keep transfers inside one currency.
                let to = if (from < 3) == (to < 3) {
                    to
                } else if from < 3 {
                    (from + 1) % 3
                } else {
                    7 - from
                };
                let eff = (offset_minutes != 0).then(|| now + Duration::minutes(offset_minutes));
                let p = posted(
                    &mut t,
                    transfer_at(
                        &format!("op{n}"),
                        CODES[from],
                        CODES[to],
                        &money(cents.into()),
                        eff,
                    ),
                )
                .await;
                m.record(&p);
                postings.push(p);
            }
            Op::Void {
                which,
                offset_minutes,
            } => {
                let voidable: Vec<usize> = (0..postings.len())
                    .filter(|&i| {
                        postings[i].voids_posting_id.is_empty()
                            && !postings
                                .iter()
                                .any(|v| v.voids_posting_id == postings[i].posting_id)
                    })
                    .collect();
                if voidable.is_empty() {
                    continue;
                }
                let target = postings[voidable[which % voidable.len()]].clone();
                let eff = (offset_minutes != 0).then(|| now + Duration::minutes(offset_minutes));
                let v = voided(&mut t, &format!("op{n}"), &target, eff).await;
                m.record(&v);
                postings.push(v);
            }
        }
    }
    // Every recorded cut-off in the history (and just before each), against effective
    // cut-offs at every effective time (and just before each) and none.
    let us = Duration::microseconds(1);
    let mut rs: Vec<OffsetDateTime> = postings
        .iter()
        .flat_map(|p| [odt(&p.recorded_at) - us, odt(&p.recorded_at)])
        .collect();
    let mut es: Vec<Option<OffsetDateTime>> = postings
        .iter()
        .flat_map(|p| [Some(odt(&p.effective_at) - us), Some(odt(&p.effective_at))])
        .collect();
    rs.sort();
    rs.dedup();
    es.sort();
    es.dedup();
    // Keep the run short: a sample of effective cut-offs, always including none.
    let es: Vec<Option<OffsetDateTime>> = std::iter::once(None)
        .chain(es.iter().step_by(3).copied())
        .collect();
    for &r in &rs {
        for &e in &es {
            let eff = e.unwrap_or(r);
            let (balances, totals) = all_balances(&mut t.client, "", as_of(Some(r), e), 2).await;
            let listed: BTreeSet<String> = balances.iter().map(|b| b.account.clone()).collect();
            assert_eq!(listed, m.accounts(r), "accounts at R={r}");
            let mut want: BTreeMap<String, (i64, i64)> = BTreeMap::new();
            for b in &balances {
                let (d, c) = m.totals(&b.account, r, eff);
                assert_eq!(
                    (cents(&b.debits), cents(&b.credits)),
                    (d, c),
                    "{} at R={r} E={eff}",
                    b.account
                );
                assert_eq!(b.balance, money(m.balance(&b.account, r, eff)));
                assert_eq!(b.as_of_sequence, m.sequence(r));
                let w = want.entry(m.currency[&b.account].clone()).or_default();
                w.0 += d;
                w.1 += c;
            }
            let got: BTreeMap<String, (i64, i64)> = totals
                .iter()
                .map(|t| (t.currency.clone(), (cents(&t.debits), cents(&t.credits))))
                .collect();
            assert_eq!(got, want, "totals at R={r} E={eff}");
            for (currency, (d, c)) in &got {
                assert_eq!(d, c, "{currency} debits and credits at R={r} E={eff}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn trial_balance_totals_match_a_model_and_balance_at_every_cut_off(ops in prop::collection::vec(op(), 4..14)) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(run_history(ops));
    }
}

// ---------- ledger report (the real binary against a test server) ----------

async fn ledger_cli(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(args)
        .env_remove("LEDGER_SERVER")
        .output()
        .await
        .expect("ledger runs");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// A balance's held debits, held credits and available amount as the reports print them.
fn held(b: &pb::Balance) -> String {
    format!("{},{},{}", b.held_debits, b.held_credits, b.available)
}

#[tokio::test]
async fn report_commands_print_trial_balance_and_statement_as_table_and_csv() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    let day = Duration::days(1);
    let p1 = posted(&mut t, transfer("r1", "w", "a:0", "100.00")).await;
    let (r1, _) = at(&p1);
    let back = posted(
        &mut t,
        transfer_at("r2", "w", "a:1", "7.50", Some(r1 - day)),
    )
    .await;
    posted(&mut t, transfer("r3", "a:0", "a:1", "30.25")).await;
    // A pending hold of 10.00 from a:0 to a:1: held, not in the balances.
    let hold = pb::PostRequest {
        hold: true,
        ..transfer("r4", "a:0", "a:1", "10.00")
    };
    posted(&mut t, hold).await;
    let server = format!("http://{}", t.server.as_ref().unwrap().local_addr);

    report_trial_balance_csv_is_list_balances(&mut t, &server).await;
    report_trial_balance_table_aligns_with_held_columns(&mut t, &server).await;
    report_statement_csv_at_an_effective_cut_off(&server, &back, r1).await;
    report_statement_tables_close_at_the_balance(&mut t, &server, r1).await;
    report_errors_name_their_reason(&server).await;
}

/// Trial balance as CSV: the header, one line per account as ListBalances says (the hold's
/// held amounts and what it leaves available included), totals with the held totals.
async fn report_trial_balance_csv_is_list_balances(t: &mut TestLedger, server: &str) {
    let (ok, csv, err) = ledger_cli(&[
        "report",
        "trial-balance",
        "--server",
        server,
        "--format",
        "csv",
    ])
    .await;
    assert!(ok, "{err}");
    let (balances, totals) = all_balances(&mut t.client, "", None, 100).await;
    let mut want = vec![
        "account,currency,debits,credits,balance,held_debits,held_credits,available".to_string(),
    ];
    want.extend(balances.iter().map(|b| {
        format!(
            "{},{},{},{},{},{}",
            b.account,
            b.currency,
            b.debits,
            b.credits,
            b.balance,
            held(b)
        )
    }));
    want.extend(totals.iter().map(|t| {
        format!(
            "TOTAL,{},{},{},,{},{},",
            t.currency, t.debits, t.credits, t.held_debits, t.held_credits
        )
    }));
    assert_eq!(csv.lines().collect::<Vec<_>>(), want);
    assert!(
        want.contains(&"a:0,EUR,100.00,30.25,69.75,0.00,10.00,59.75".to_string())
            && want.contains(&"TOTAL,EUR,137.75,137.75,,10.00,10.00,".to_string()),
        "the hold is held, not in the balances: {want:?}"
    );
    let a0 = t.balance("a:0", None).await;
    assert!(csv.contains(&format!(",69.75,{}\n", held(&a0))), "{csv}");
}

/// The same as a table, with a prefix: aligned columns, the held ones after the balance, and
/// the whole ledger's totals balanced (money and held amounts).
async fn report_trial_balance_table_aligns_with_held_columns(t: &mut TestLedger, server: &str) {
    let (ok, table, err) = ledger_cli(&[
        "report",
        "trial-balance",
        "--server",
        server,
        "--prefix",
        "a:",
    ])
    .await;
    assert!(ok, "{err}");
    assert!(
        table.starts_with("Trial balance of a:* as recorded at"),
        "{table}"
    );
    let lines: Vec<&str> = table.lines().filter(|l| !l.is_empty()).collect();
    let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        words(lines[1]),
        [
            "ACCOUNT",
            "CURRENCY",
            "DEBITS",
            "CREDITS",
            "BALANCE",
            "HELD_DEBITS",
            "HELD_CREDITS",
            "AVAILABLE"
        ],
        "{table}"
    );
    for account in ["a:0", "a:1"] {
        let b = t.balance(account, None).await;
        let row = [&b.account, &b.currency, &b.debits, &b.credits, &b.balance]
            .into_iter()
            .chain([&b.held_debits, &b.held_credits, &b.available])
            .cloned()
            .collect::<Vec<_>>();
        assert!(lines.iter().any(|l| words(l) == row), "{row:?}: {table}");
    }
    assert!(!table.contains("\nw "), "the prefix keeps w out: {table}");
    let total = words(lines.last().unwrap());
    assert_eq!(
        total,
        ["TOTAL", "EUR", "137.75", "30.25", "10.00", "10.00"],
        "{table}"
    );
    // Every line of the body is as wide as the heading (aligned).
    let width = lines[1].len();
    assert!(lines[2..].iter().all(|l| l.len() <= width), "{table}");
    // The whole ledger balances, held amounts too.
    let (ok, table, _) = ledger_cli(&["report", "trial-balance", "--server", server]).await;
    assert!(ok);
    assert!(
        table
            .lines()
            .last()
            .unwrap()
            .ends_with("137.75  balanced        10.00         10.00"),
        "{table}"
    );
}

/// Statement as CSV at an effective cut-off before the first posting: only the back-dated
/// one, whose recorded time is after it, then the TOTAL line (nothing held at that cut-off).
async fn report_statement_csv_at_an_effective_cut_off(
    server: &str,
    back: &pb::Posting,
    r1: OffsetDateTime,
) {
    let (ok, csv, err) = ledger_cli(&[
        "report",
        "statement",
        "a:1",
        "--server",
        server,
        "--format",
        "csv",
        "--effective",
        &rfc3339(r1 - Duration::hours(1)),
    ])
    .await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after,held_debits,held_credits,available"
    );
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(
        lines[1].starts_with(&format!("{},{},", back.sequence, back.posting_id)),
        "{csv}"
    );
    assert!(lines[1].ends_with(",7.50,,7.50,,,"), "{csv}");
    assert_eq!(lines[2], "TOTAL,,,,7.50,0.00,7.50,0.00,0.00,7.50", "{csv}");
}

/// Statements as tables: as recorded right after the first posting, and now, when the TOTAL
/// line is GetBalance's (the hold's held amount and what it leaves available included).
async fn report_statement_tables_close_at_the_balance(
    t: &mut TestLedger,
    server: &str,
    r1: OffsetDateTime,
) {
    let (ok, table, err) = ledger_cli(&[
        "report",
        "statement",
        "a:0",
        "--server",
        server,
        "--as-of",
        &rfc3339(r1),
    ])
    .await;
    assert!(ok, "{err}");
    assert!(
        table.starts_with("Statement of a:0 (EUR) as recorded at"),
        "{table}"
    );
    assert!(table.contains("(journal sequence 1)"), "{table}");
    let total: Vec<&str> = table.lines().last().unwrap().split_whitespace().collect();
    assert_eq!(
        total,
        ["TOTAL", "1", "entry", "100.00", "0.00", "100.00", "0.00", "0.00", "100.00"],
        "{table}"
    );
    // Now: both entries (the hold is none), closing at the balance, with its held amounts.
    let (ok, table, _) = ledger_cli(&["report", "statement", "a:0", "--server", server]).await;
    assert!(ok);
    assert!(table.contains("2 entries"), "{table}");
    let b = t.balance("a:0", None).await;
    let total: Vec<&str> = table.lines().last().unwrap().split_whitespace().collect();
    assert_eq!(
        total[3..],
        [
            &b.debits,
            &b.credits,
            &b.balance,
            &b.held_debits,
            &b.held_credits,
            &b.available
        ]
        .map(String::as_str),
        "{table}"
    );
    assert_eq!(
        (b.held_credits.as_str(), b.available.as_str()),
        ("10.00", "59.75")
    );
}

/// Errors say what was wrong, with the reason, and exit non-zero.
async fn report_errors_name_their_reason(server: &str) {
    for (args, want) in [
        (
            vec!["report", "statement", "nope", "--server", server],
            "ACCOUNT_NOT_FOUND",
        ),
        (
            vec![
                "report",
                "trial-balance",
                "--server",
                server,
                "--as-of",
                "2999-01-01T00:00:00Z",
            ],
            "AS_OF_IN_FUTURE",
        ),
        (
            vec![
                "report",
                "trial-balance",
                "--server",
                server,
                "--as-of",
                "yesterday",
            ],
            "RFC 3339",
        ),
    ] {
        let (ok, _, err) = ledger_cli(&args).await;
        assert!(!ok && err.contains(want), "{args:?}: {err}");
    }
}

/// The no-negative rule counts every leg whatever its effective time (the contract), while
/// "the balance now" leaves out legs effective later: the refusal says which balance it
/// checked, so the two numbers never disagree without a word.
#[tokio::test]
async fn a_funds_refusal_names_the_balance_it_checked_over_all_legs_whatever_their_effective_time()
{
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("fund", "equity:world", "acct:0", "99.00"))
        .await
        .unwrap();
    let later = OffsetDateTime::now_utc() + Duration::days(30);
    t.post(transfer_at(
        "rent",
        "acct:0",
        "equity:world",
        "12.00",
        Some(later),
    ))
    .await
    .unwrap();
    assert_eq!(t.balance("acct:0", None).await.balance, "99.00");
    let e = t
        .post(transfer("spend", "acct:0", "equity:world", "95.00"))
        .await
        .unwrap_err();
    assert_error(&e, tonic::Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    let msg = e.message();
    assert!(
        msg.contains("87.00") && msg.contains("over all its legs, whatever their effective time"),
        "{msg}"
    );
    let info = tonic_types::StatusExt::get_details_error_info(&e).unwrap();
    assert_eq!(
        info.metadata.get("account").map(String::as_str),
        Some("acct:0")
    );
}

#[tokio::test]
async fn a_days_end_is_its_last_instant_on_either_clock_and_a_date_alone_its_start_and_empty_rows_show_with_all(
) {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    model_accounts(&mut t, &mut m).await;
    // Effective in the evening of the day before yesterday (UTC).
    let day = (OffsetDateTime::now_utc() - Duration::days(2)).date();
    let evening = day.with_hms(20, 0, 0).unwrap().assume_utc();
    posted(
        &mut t,
        transfer_at("eve", "w", "a:0", "4.00", Some(evening)),
    )
    .await;
    let server = format!("http://{}", t.server.as_ref().unwrap().local_addr);
    let yesterday = (OffsetDateTime::now_utc() - Duration::days(1))
        .date()
        .to_string();
    let csv = |flags: Vec<String>| {
        let server = server.clone();
        async move {
            let mut args = vec![
                "report",
                "trial-balance",
                "--server",
                &server,
                "--format",
                "csv",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
            args.extend(flags);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            ledger_cli(&refs).await
        }
    };
    let d = day.to_string();
    let (ok, start, err) = csv(vec!["--effective".into(), d.clone()]).await;
    assert!(ok, "{err}");
    assert!(
        !start.contains("a:0"),
        "the day's start sees nothing of its evening:\n{start}"
    );
    // With --all, the accounts with nothing yet by the cut-off are listed too, at zero.
    let (ok, all, err) = csv(vec!["--effective".into(), d.clone(), "--all".into()]).await;
    assert!(ok, "{err}");
    assert!(
        all.contains("a:0,EUR,0.00,0.00,0.00,0.00,0.00,0.00"),
        "{all}"
    );
    let totals = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("TOTAL"))
            .map(String::from)
            .collect()
    };
    assert_eq!(totals(&all), totals(&start), "the same totals");
    let (ok, end, err) = csv(vec!["--effective-end".into(), d.clone()]).await;
    assert!(ok, "{err}");
    assert!(
        end.contains("a:0,EUR,4.00"),
        "the day's end includes its evening:\n{end}"
    );
    // As known at the end of yesterday: recorded today, so not yet.
    let (ok, known, err) = csv(vec![
        "--as-of-end".into(),
        yesterday,
        "--effective-end".into(),
        d.clone(),
    ])
    .await;
    assert!(ok, "{err}");
    assert!(!known.contains("a:0"), "{known}");
    let (ok, _, err) = csv(vec![
        "--effective".into(),
        d.clone(),
        "--effective-end".into(),
        d,
    ])
    .await;
    assert!(!ok && err.contains("cannot be used with"), "{err}");
}

#[tokio::test]
async fn a_statement_at_a_cut_off_before_its_account_existed_says_so_instead_of_a_silent_zero() {
    let mut t = TestLedger::start().await;
    let mut m = Model::default();
    let before = rfc3339(OffsetDateTime::now_utc() - Duration::seconds(2));
    model_accounts(&mut t, &mut m).await;
    posted(&mut t, transfer_at("p", "w", "a:0", "4.00", None)).await;
    let server = format!("http://{}", t.server.as_ref().unwrap().local_addr);
    let (ok, early, err) = ledger_cli(&[
        "report",
        "statement",
        "a:0",
        "--server",
        &server,
        "--as-of",
        &before,
    ])
    .await;
    assert!(ok, "{err}");
    let line = early.lines().nth(1).unwrap_or_default();
    assert!(
        line.starts_with("ACCOUNT NOT YET CREATED: a:0 was created at"),
        "{early}"
    );
    let (ok, now, err) = ledger_cli(&["report", "statement", "a:0", "--server", &server]).await;
    assert!(ok, "{err}");
    assert!(!now.contains("NOT YET CREATED"), "{now}");
}
