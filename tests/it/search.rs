//! `ListPostings`' filters (metadata, recorded and effective ranges, caller, account), alone
//! and combined, against a brute-force filter of every posting; pages stable while writers run.

use crate::access::bearer;
use crate::support::*;
use ledger_server::access::auth::{auth_line, new_token, AuthFile, Role};
use ledger_server::grpc::pb;
use ledger_server::server::OpsOptions;
use pb::ledger_client::LedgerClient;
use prost_types::Timestamp;
use std::collections::HashMap;
use tonic::transport::Channel;

const ACCOUNTS: [&str; 4] = ["cash", "sales", "fees", "escrow"];

struct Book {
    t: TestLedger,
    tokens: [String; 2],
}

async fn book() -> Book {
    let tokens = [new_token(), new_token()];
    let file = [
        auth_line("svc-a", Role::Writer, &tokens[0]),
        auth_line("svc-b", Role::Writer, &tokens[1]),
    ]
    .join("\n");
    let t = TestLedger::start_with(OpsOptions {
        auth: Some(AuthFile::parse(&file).unwrap()),
        ..app_role_ops()
    })
    .await;
    let mut c = t.client.clone();
    for code in ACCOUNTS {
        let req = pb::CreateAccountRequest {
            code: code.into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: pb::NormalBalance::Debit as i32,
            allow_negative: true,
            ..Default::default()
        };
        c.create_account(bearer(req, &tokens[0])).await.unwrap();
    }
    Book { t, tokens }
}

fn ts(t: time::OffsetDateTime) -> Timestamp {
    Timestamp {
        seconds: t.unix_timestamp(),
        nanos: (t.unix_timestamp_nanos() % 1_000_000_000) as i32,
    }
}

/// Posting `n`: between two of the accounts (or a hold on `escrow`), metadata by `n`, some
/// back- or future-dated by hours, by one of the two callers.
fn posting(n: usize) -> (pb::PostRequest, usize) {
    let now = time::OffsetDateTime::now_utc();
    let (from, to) = (ACCOUNTS[n % 3], ACCOUNTS[(n + 1) % 3]);
    let mut req = transfer(&format!("p-{n}"), from, to, &format!("{}.00", 1 + n % 9));
    req.metadata = HashMap::from([
        ("order".to_owned(), format!("o-{}", n % 6)),
        ("channel".to_owned(), ["web", "shop"][n % 2].to_owned()),
    ]);
    if n.is_multiple_of(5) {
        req.metadata.insert("refund".into(), "yes".into());
    }
    req.effective_at = match n % 4 {
        0 => Some(ts(now - time::Duration::hours((n % 48) as i64 + 1))),
        1 => Some(ts(now + time::Duration::hours((n % 24) as i64 + 1))),
        _ => None,
    };
    if n.is_multiple_of(11) {
        req.legs[0].account = "escrow".into();
        req.hold = true;
    }
    (req, n % 2)
}

async fn write(b: &Book, range: std::ops::Range<usize>) {
    let mut c = b.t.client.clone();
    for n in range {
        let (req, who) = posting(n);
        c.post(bearer(req, &b.tokens[who])).await.unwrap();
    }
}

async fn list(
    c: &mut LedgerClient<Channel>,
    token: &str,
    mut req: pb::ListPostingsRequest,
) -> Result<Vec<pb::Posting>, tonic::Status> {
    let mut out = Vec::new();
    loop {
        let page = c
            .list_postings(bearer(req.clone(), token))
            .await?
            .into_inner();
        out.extend(page.postings);
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        req.page_token = page.next_page_token;
    }
}

fn within(r: &Option<pb::TimeRange>, t: &Timestamp) -> bool {
    let key = |t: &Timestamp| (t.seconds, t.nanos);
    r.as_ref().is_none_or(|r| {
        r.start.as_ref().is_none_or(|s| key(s) <= key(t))
            && r.end.as_ref().is_none_or(|e| key(t) < key(e))
    })
}

/// The brute-force filter: what each posting of `all` must satisfy.
fn keeps(req: &pb::ListPostingsRequest, p: &pb::Posting) -> bool {
    (req.account.is_empty() || p.legs.iter().any(|l| l.account == req.account))
        && req
            .metadata
            .iter()
            .all(|(k, v)| p.metadata.get(k) == Some(v))
        && within(&req.recorded, p.recorded_at.as_ref().unwrap())
        && within(&req.effective, p.effective_at.as_ref().unwrap())
        && (req.caller.is_empty() || p.caller == req.caller)
}

#[tokio::test]
async fn every_posting_filter_alone_and_combined_keeps_exactly_what_a_brute_force_filter_keeps() {
    let b = book().await;
    write(&b, 0..90).await;
    let mut c = b.t.client.clone();
    let tok = &b.tokens[0];
    let all = list(&mut c, tok, pb::ListPostingsRequest::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 90);
    let now = time::OffsetDateTime::now_utc();
    let range =
        |s: Option<Timestamp>, e: Option<Timestamp>| Some(pb::TimeRange { start: s, end: e });
    let rec = |i: usize| all[i].recorded_at;
    let hours = |h: i64| Some(ts(now + time::Duration::hours(h)));
    let meta = |kv: &[(&str, &str)]| {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let base = pb::ListPostingsRequest::default();
    let cases: Vec<(&str, pb::ListPostingsRequest)> = vec![
        (
            "metadata",
            pb::ListPostingsRequest {
                metadata: meta(&[("order", "o-3")]),
                ..base.clone()
            },
        ),
        (
            "two metadata entries",
            pb::ListPostingsRequest {
                metadata: meta(&[("order", "o-2"), ("channel", "web")]),
                ..base.clone()
            },
        ),
        (
            "a key no posting has",
            pb::ListPostingsRequest {
                metadata: meta(&[("nope", "x")]),
                ..base.clone()
            },
        ),
        (
            "recorded",
            pb::ListPostingsRequest {
                recorded: range(rec(20), rec(61)),
                ..base.clone()
            },
        ),
        (
            "recorded from",
            pb::ListPostingsRequest {
                recorded: range(rec(70), None),
                ..base.clone()
            },
        ),
        (
            "recorded until",
            pb::ListPostingsRequest {
                recorded: range(None, rec(5)),
                ..base.clone()
            },
        ),
        (
            "effective",
            pb::ListPostingsRequest {
                effective: range(hours(-30), hours(-2)),
                ..base.clone()
            },
        ),
        (
            "effective in the future",
            pb::ListPostingsRequest {
                effective: range(hours(2), None),
                ..base.clone()
            },
        ),
        (
            "caller",
            pb::ListPostingsRequest {
                caller: "svc-b".into(),
                ..base.clone()
            },
        ),
        (
            "an unknown caller",
            pb::ListPostingsRequest {
                caller: "svc-z".into(),
                ..base.clone()
            },
        ),
        (
            "account",
            pb::ListPostingsRequest {
                account: "fees".into(),
                ..base.clone()
            },
        ),
        (
            "account with holds",
            pb::ListPostingsRequest {
                account: "escrow".into(),
                ..base.clone()
            },
        ),
        (
            "account and metadata",
            pb::ListPostingsRequest {
                account: "cash".into(),
                metadata: meta(&[("refund", "yes")]),
                ..base.clone()
            },
        ),
        (
            "all of them",
            pb::ListPostingsRequest {
                account: "sales".into(),
                metadata: meta(&[("channel", "shop")]),
                recorded: range(rec(3), rec(85)),
                effective: range(hours(-40), hours(20)),
                caller: "svc-b".into(),
                ..base.clone()
            },
        ),
        (
            "metadata, effective and caller",
            pb::ListPostingsRequest {
                metadata: meta(&[("order", "o-1")]),
                effective: range(None, hours(0)),
                caller: "svc-b".into(),
                ..base.clone()
            },
        ),
    ];
    for (what, req) in cases {
        let want: Vec<u64> = all
            .iter()
            .filter(|p| keeps(&req, p))
            .map(|p| p.sequence)
            .collect();
        for size in [1, 7, 1000] {
            let got = list(
                &mut c,
                tok,
                pb::ListPostingsRequest {
                    page_size: size,
                    ..req.clone()
                },
            )
            .await
            .unwrap();
            let got: Vec<u64> = got.iter().map(|p| p.sequence).collect();
            assert_eq!(got, want, "{what}, pages of {size}");
        }
        if what != "a key no posting has" && what != "an unknown caller" {
            assert!(
                !want.is_empty(),
                "{what} keeps something, so the test can fail"
            );
        }
    }
}

#[tokio::test]
async fn each_page_of_a_filtered_listing_stays_the_same_while_writers_add_matching_postings() {
    let b = book().await;
    write(&b, 0..40).await;
    let mut c = b.t.client.clone();
    let tok = b.tokens[0].clone();
    let req = pb::ListPostingsRequest {
        metadata: HashMap::from([("channel".to_owned(), "web".to_owned())]),
        page_size: 4,
        ..Default::default()
    };
    let want = list(&mut c, &tok, req.clone()).await.unwrap();
    let first = c
        .list_postings(bearer(req.clone(), &tok))
        .await
        .unwrap()
        .into_inner();
    let token = first.next_page_token.clone();
    let second = |c: &mut LedgerClient<Channel>| {
        let req = pb::ListPostingsRequest {
            page_token: token.clone(),
            ..req.clone()
        };
        let tok = tok.clone();
        let mut c = c.clone();
        async move {
            c.list_postings(bearer(req, &tok))
                .await
                .unwrap()
                .into_inner()
        }
    };
    let before = second(&mut c).await;
    let writers = tokio::spawn({
        let (client, tokens) = (b.t.client.clone(), b.tokens.clone());
        async move {
            let mut c = client;
            for n in 40..100 {
                let (req, who) = posting(n); // a quarter back-dated, half "web"
                c.post(bearer(req, &tokens[who])).await.unwrap();
            }
        }
    });
    let mut seen = first.postings.clone();
    let mut page = first;
    while !page.next_page_token.is_empty() {
        assert_eq!(
            second(&mut c).await,
            before,
            "the token of page 2 gives the same page"
        );
        let next = pb::ListPostingsRequest {
            page_token: page.next_page_token.clone(),
            ..req.clone()
        };
        page = c
            .list_postings(bearer(next, &tok))
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.postings.clone());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    writers.await.unwrap();
    let ids = |v: &[pb::Posting]| v.iter().map(|p| p.sequence).collect::<Vec<_>>();
    assert_eq!(
        ids(&seen),
        ids(&want),
        "the listing is the one its first page began"
    );
    assert_eq!(second(&mut c).await, before);
    let after = list(&mut c, &tok, req).await.unwrap();
    assert!(
        after.len() > want.len(),
        "a new listing sees the new postings"
    );
}

#[tokio::test]
async fn bad_filters_are_refused_naming_the_field_and_a_token_of_another_filter_is_refused() {
    let b = book().await;
    write(&b, 0..12).await;
    let mut c = b.t.client.clone();
    let tok = &b.tokens[0];
    let now = ts(time::OffsetDateTime::now_utc());
    let earlier = Timestamp {
        seconds: now.seconds - 60,
        ..now
    };
    let many = (0..17).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let cases = [
        (
            pb::ListPostingsRequest {
                effective: Some(pb::TimeRange {
                    start: Some(now),
                    end: Some(earlier),
                }),
                ..Default::default()
            },
            "INVALID_FIELD",
        ),
        (
            pb::ListPostingsRequest {
                recorded: Some(pb::TimeRange {
                    start: Some(now),
                    end: Some(earlier),
                }),
                ..Default::default()
            },
            "INVALID_FIELD",
        ),
        (
            pb::ListPostingsRequest {
                metadata: many,
                ..Default::default()
            },
            "LIMIT_EXCEEDED",
        ),
        (
            pb::ListPostingsRequest {
                caller: "x".repeat(129),
                ..Default::default()
            },
            "LIMIT_EXCEEDED",
        ),
    ];
    for (req, want) in cases {
        let e = c.list_postings(bearer(req, tok)).await.unwrap_err();
        assert_error(&e, tonic::Code::InvalidArgument, want);
    }
    let e = c
        .list_postings(bearer(
            pb::ListPostingsRequest {
                account: "nope".into(),
                ..Default::default()
            },
            tok,
        ))
        .await
        .unwrap_err();
    assert_error(&e, tonic::Code::NotFound, "ACCOUNT_NOT_FOUND");
    let web = pb::ListPostingsRequest {
        metadata: HashMap::from([("channel".to_owned(), "web".to_owned())]),
        page_size: 2,
        ..Default::default()
    };
    let page = c
        .list_postings(bearer(web.clone(), tok))
        .await
        .unwrap()
        .into_inner();
    let mut shop = web.clone();
    shop.metadata.insert("channel".into(), "shop".into());
    shop.page_token = page.next_page_token.clone();
    let e = c.list_postings(bearer(shop, tok)).await.unwrap_err();
    assert_error(&e, tonic::Code::InvalidArgument, "INVALID_PAGE_TOKEN");
    let unfiltered = pb::ListPostingsRequest {
        page_token: page.next_page_token,
        page_size: 2,
        ..Default::default()
    };
    let e = c.list_postings(bearer(unfiltered, tok)).await.unwrap_err();
    assert_error(&e, tonic::Code::InvalidArgument, "INVALID_PAGE_TOKEN");
}
