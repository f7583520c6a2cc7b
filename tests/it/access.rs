//! Access: bearer tokens and roles, the ledgers each caller is granted, keys scoped per
//! caller, TLS and mutual TLS, the database's application role, limits, metrics.

use crate::support::*;
use ledger_server::access::auth::{
    auth_line, auth_line_granting, new_token, parse_grants, AuthFile, Role,
};
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use ledger_server::server::{OpsOptions, TlsPem};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::{Code, Request};

/// A request carrying `authorization: Bearer TOKEN`.
pub fn bearer<T>(msg: T, token: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ascii token"),
    );
    r
}

fn account_req(code: &str) -> pb::CreateAccountRequest {
    account_in("", code)
}

/// A request to create the account `code` in the ledger `ledger` (empty: `default`).
fn account_in(ledger: &str, code: &str) -> pb::CreateAccountRequest {
    pb::CreateAccountRequest {
        ledger: ledger.into(),
        code: code.into(),
        currency: "EUR".into(),
        scale: 2,
        normal_balance: pb::NormalBalance::Debit as i32,
        allow_negative: true,
        metadata: Default::default(),
    }
}

struct Tokens {
    writer: String,
    other_writer: String,
    reader: String,
}

async fn ledger_with_tokens() -> (TestLedger, Tokens) {
    let tokens = Tokens {
        writer: new_token(),
        other_writer: new_token(),
        reader: new_token(),
    };
    let file = [
        auth_line("svc-a", Role::Writer, &tokens.writer),
        auth_line("svc-b", Role::Writer, &tokens.other_writer),
        auth_line("finance", Role::Reader, &tokens.reader),
    ]
    .join("\n");
    let t = TestLedger::start_with(OpsOptions {
        auth: Some(AuthFile::parse(&file).unwrap()),
        ..app_role_ops()
    })
    .await;
    (t, tokens)
}

#[tokio::test]
async fn with_auth_on_each_call_is_judged_by_its_token_and_role() {
    let (t, tok) = ledger_with_tokens().await;
    let mut c = t.client.clone();
    // A writer creates two accounts and posts.
    for code in ["a", "b"] {
        c.create_account(bearer(account_req(code), &tok.writer))
            .await
            .expect("writer creates an account");
    }
    let posted = c
        .post(bearer(transfer("k1", "a", "b", "1.00"), &tok.writer))
        .await
        .expect("writer posts")
        .into_inner()
        .posting
        .unwrap();

    let void = |key: &str| pb::VoidRequest {
        ledger: String::new(),
        idempotency_key: key.into(),
        posting_id: posted.posting_id.clone(),
        reason: "r".into(),
        effective_at: None,
    };
    let get = || pb::GetAccountRequest {
        as_of: None,
        ledger: String::new(),
        code: "a".into(),
    };

    // Without a token, with an unknown one, with a malformed header: UNAUTHENTICATED.
    let e = c.get_account(get()).await.unwrap_err();
    assert_error(&e, Code::Unauthenticated, "UNAUTHENTICATED");
    let e = c
        .get_account(bearer(get(), &new_token()))
        .await
        .unwrap_err();
    assert_error(&e, Code::Unauthenticated, "UNAUTHENTICATED");
    let mut basic = Request::new(get());
    basic.metadata_mut().insert(
        "authorization",
        format!("Basic {}", tok.writer).parse().unwrap(),
    );
    let e = c.get_account(basic).await.unwrap_err();
    assert_error(&e, Code::Unauthenticated, "UNAUTHENTICATED");
    let e = c.post(transfer("k2", "a", "b", "1.00")).await.unwrap_err();
    assert_error(&e, Code::Unauthenticated, "UNAUTHENTICATED");

    // A reader reads, and may not write.
    let read = c.get_account(bearer(get(), &tok.reader)).await.unwrap();
    assert_eq!(read.into_inner().code, "a");
    c.get_balance(bearer(
        pb::GetBalanceRequest {
            ledger: String::new(),
            account: "b".into(),
            as_of: None,
        },
        &tok.reader,
    ))
    .await
    .expect("reader reads a balance");
    let e = c
        .post(bearer(transfer("k3", "a", "b", "1.00"), &tok.reader))
        .await
        .unwrap_err();
    assert_error(&e, Code::PermissionDenied, "PERMISSION_DENIED");
    let batch = pb::PostBatchRequest {
        ledger: String::new(),
        requests: vec![transfer("k4", "a", "b", "1.00")],
    };
    let e = c.post_batch(bearer(batch, &tok.reader)).await.unwrap_err();
    assert_error(&e, Code::PermissionDenied, "PERMISSION_DENIED");
    let e = c.void(bearer(void("v1"), &tok.reader)).await.unwrap_err();
    assert_error(&e, Code::PermissionDenied, "PERMISSION_DENIED");
    let e = c
        .create_account(bearer(account_req("c"), &tok.reader))
        .await
        .unwrap_err();
    assert_error(&e, Code::PermissionDenied, "PERMISSION_DENIED");
    // Nothing the refused calls asked for happened.
    assert_eq!(t.count("postings").await, 1);
    assert_eq!(t.count("accounts").await, 2);
    // A writer voids.
    c.void(bearer(void("v1"), &tok.writer))
        .await
        .expect("writer voids");
    assert_eq!(t.count("postings").await, 2);
}

#[tokio::test]
async fn with_auth_on_health_and_reflection_stay_open() {
    let (t, _tok) = ledger_with_tokens().await;
    let channel = Channel::from_shared(format!("http://{}", t.server.as_ref().unwrap().local_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "ledger.v1.Ledger".into(),
        })
        .await
        .expect("health answers without a token")
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    use tonic_reflection::pb::v1::{
        server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        ServerReflectionRequest,
    };
    let mut refl = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = refl
        .server_reflection_info(tokio_stream_once(req))
        .await
        .expect("reflection answers without a token")
        .into_inner();
    let answer = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected reflection answer {answer:?}");
    };
    assert!(list.service.iter().any(|s| s.name == "ledger.v1.Ledger"));
}

fn tokio_stream_once<T: Send + 'static>(item: T) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::once(async move { item })
}

#[tokio::test]
async fn the_same_key_from_two_callers_makes_two_postings_each_recording_its_caller() {
    let (t, tok) = ledger_with_tokens().await;
    let mut c = t.client.clone();
    for code in ["a", "b"] {
        c.create_account(bearer(account_req(code), &tok.writer))
            .await
            .unwrap();
    }
    let mut postings = Vec::new();
    for token in [&tok.writer, &tok.other_writer] {
        let r = c
            .post(bearer(transfer("same-key", "a", "b", "1.00"), token))
            .await
            .unwrap()
            .into_inner();
        assert!(!r.replayed);
        postings.push(r.posting.unwrap());
    }
    assert_ne!(postings[0].posting_id, postings[1].posting_id);
    assert_eq!(postings[0].caller, "svc-a");
    assert_eq!(postings[1].caller, "svc-b");
    assert_eq!(t.count("postings").await, 2);
    // Each caller's retry replays its own posting; a lookup by key sees only its own.
    let again = c
        .post(bearer(
            transfer("same-key", "a", "b", "1.00"),
            &tok.other_writer,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(again.replayed);
    assert_eq!(again.posting.unwrap().posting_id, postings[1].posting_id);
    let by_key = |token: &str| {
        bearer(
            pb::GetPostingRequest {
                ledger: String::new(),
                by: Some(pb::get_posting_request::By::IdempotencyKey(
                    "same-key".into(),
                )),
                as_of: None,
            },
            token,
        )
    };
    let seen = c
        .get_posting(by_key(&tok.writer))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(seen.posting_id, postings[0].posting_id);
    let e = c.get_posting(by_key(&tok.reader)).await.unwrap_err();
    assert_error(&e, Code::NotFound, "POSTING_NOT_FOUND");
    // The database holds the callers too.
    let rows = t
        .db()
        .await
        .query(
            "SELECT caller FROM postings WHERE idempotency_key = 'same-key' ORDER BY sequence",
            &[],
        )
        .await
        .unwrap();
    let callers: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(callers, ["svc-a", "svc-b"]);
}

#[tokio::test]
async fn the_token_command_prints_a_token_and_a_line_that_authenticates_it() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["token", "new", "svc-cli", "reader"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let (token, line) = (lines[0], lines[1]);
    assert!(token.len() >= 64, "{token}");
    assert!(!line.contains(token));
    assert!(line.starts_with("svc-cli reader sha256:"), "{line}");
    let t = TestLedger::start_with(OpsOptions {
        auth: Some(AuthFile::parse(line).unwrap()),
        ..app_role_ops()
    })
    .await;
    let mut c = t.client.clone();
    let e = c
        .get_account(bearer(
            pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: "x".into(),
            },
            token,
        ))
        .await
        .unwrap_err();
    assert_error(&e, Code::NotFound, "ACCOUNT_NOT_FOUND");
    let e = c
        .create_account(bearer(account_req("x"), token))
        .await
        .unwrap_err();
    assert_error(&e, Code::PermissionDenied, "PERMISSION_DENIED");

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["token", "new", "svc", "owner"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(bad.stdout.is_empty());
}

#[test]
fn the_token_command_prints_the_ledgers_a_line_grants_as_its_fourth_column() {
    let token_new = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
            .args(["token", "new"])
            .args(args)
            .output()
            .unwrap()
    };
    let table = [
        (
            &["svc", "admin", "--ledgers", "globex,acme"][..],
            Some("acme,globex"),
        ),
        (&["svc", "writer", "--ledgers", "*"][..], Some("*")),
        (
            &["svc", "reader", "--ledgers", "default"][..],
            Some("default"),
        ),
        (&["svc", "admin"][..], None),
    ];
    for (args, column) in table {
        let out = token_new(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let line = text.lines().nth(1).unwrap_or_else(|| panic!("{text}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[..2], args[..2], "{line}");
        assert_eq!(fields.get(3).copied(), column, "{line}");
        AuthFile::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    for bad in ["Acme", "acme,", "", "acme,*", "acme,acme"] {
        let out = token_new(&["svc", "writer", "--ledgers", bad]);
        assert!(!out.status.success(), "{bad:?}");
        assert!(out.stdout.is_empty(), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--ledgers"), "{bad:?}: {err}");
    }
}

// ---- Ledgers: the admin role and the grants of the fourth column --------------------------

/// A server whose auth file has one line per caller: its name, role and fourth column (`None`:
/// none); and each caller's token, in the same order.
async fn ledger_with_grants(callers: &[(&str, Role, Option<&str>)]) -> (TestLedger, Vec<String>) {
    let tokens: Vec<String> = callers.iter().map(|_| new_token()).collect();
    let file = callers
        .iter()
        .zip(&tokens)
        .map(|(&(name, role, ledgers), token)| match ledgers {
            Some(l) => auth_line_granting(name, role, token, &parse_grants(l).unwrap()),
            None => auth_line(name, role, token),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let t = TestLedger::start_with(OpsOptions {
        auth: Some(AuthFile::parse(&file).unwrap()),
        ..app_role_ops()
    })
    .await;
    (t, tokens)
}

async fn create_ledger(
    c: &mut LedgerClient<Channel>,
    token: &str,
    code: &str,
) -> Result<pb::CreateLedgerResponse, tonic::Status> {
    let req = pb::CreateLedgerRequest {
        code: code.into(),
        description: format!("the books of {code}"),
        metadata: Default::default(),
        ..Default::default()
    };
    c.create_ledger(bearer(req, token))
        .await
        .map(|r| r.into_inner())
}

async fn get_ledger(
    c: &mut LedgerClient<Channel>,
    token: &str,
    code: &str,
) -> Result<pb::LedgerInfo, tonic::Status> {
    let req = pb::GetLedgerRequest { code: code.into() };
    c.get_ledger(bearer(req, token))
        .await
        .map(|r| r.into_inner())
}

/// The codes `ListLedgers` shows this caller: one page of the default size, and the same
/// walked a ledger a page (the two must agree).
async fn listed_ledgers(c: &mut LedgerClient<Channel>, token: &str) -> Vec<String> {
    let list = |page_size: u32, page_token: String| pb::ListLedgersRequest {
        page_size,
        page_token,
    };
    let whole = c
        .list_ledgers(bearer(list(0, String::new()), token))
        .await
        .expect("ListLedgers")
        .into_inner();
    assert!(whole.next_page_token.is_empty(), "{whole:?}");
    let whole: Vec<String> = whole.ledgers.into_iter().map(|l| l.code).collect();
    let mut walked = Vec::new();
    let mut page_token = String::new();
    for _ in 0..=whole.len() {
        let page = c
            .list_ledgers(bearer(list(1, page_token), token))
            .await
            .expect("ListLedgers, a ledger a page")
            .into_inner();
        assert!(page.ledgers.len() <= 1, "{page:?}");
        walked.extend(page.ledgers.into_iter().map(|l| l.code));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(walked, whole, "paged one at a time");
    whole
}

#[tokio::test]
async fn create_ledger_is_refused_for_a_writer_and_a_reader_and_allowed_for_an_admin() {
    let (t, tok) = ledger_with_grants(&[
        ("ops", Role::Admin, Some("*")),
        ("svc", Role::Writer, Some("*")),
        ("finance", Role::Reader, Some("*")),
    ])
    .await;
    let mut c = t.client.clone();
    for (token, role) in [(&tok[1], "writer"), (&tok[2], "reader")] {
        let e = create_ledger(&mut c, token, "acme").await.unwrap_err();
        assert_error(&e, Code::PermissionDenied, "PERMISSION_DENIED");
        assert!(
            e.message().contains(&format!("has role {role}"))
                && e.message().ends_with("CreateLedger needs role admin"),
            "{}",
            e.message()
        );
    }
    assert_eq!(t.count("ledgers").await, 1, "only default");
    let made = create_ledger(&mut c, &tok[0], "acme").await.unwrap();
    assert!(made.created);
    assert_eq!(made.ledger.unwrap().code, "acme");
    let again = create_ledger(&mut c, &tok[0], "acme").await.unwrap();
    assert!(!again.created, "an identical second call creates nothing");
    assert_eq!(t.count("ledgers").await, 2);
    // Readers and writers still read ledgers; the writer writes in the new one.
    for token in &tok[1..] {
        assert_eq!(
            get_ledger(&mut c, token, "acme").await.unwrap().code,
            "acme"
        );
        assert_eq!(listed_ledgers(&mut c, token).await, ["acme", "default"]);
    }
    c.create_account(bearer(account_in("acme", "a"), &tok[1]))
        .await
        .expect("a writer creates an account in the new ledger");
}

#[tokio::test]
async fn a_caller_granted_acme_is_not_granted_globex_nor_a_ledger_that_does_not_exist() {
    let (t, tok) = ledger_with_grants(&[
        ("ops", Role::Admin, Some("*")),
        ("acme-svc", Role::Writer, Some("acme")),
    ])
    .await;
    let mut c = t.client.clone();
    for code in ["acme", "globex"] {
        create_ledger(&mut c, &tok[0], code).await.unwrap();
    }
    let acme = &tok[1];
    for code in ["a", "b"] {
        c.create_account(bearer(account_in("acme", code), acme))
            .await
            .expect("its own ledger");
    }
    let in_acme = pb::PostRequest {
        ledger: "acme".into(),
        ..transfer("k1", "a", "b", "1.00")
    };
    c.post(bearer(in_acme, acme)).await.expect("posts in acme");
    assert_eq!(get_ledger(&mut c, acme, "acme").await.unwrap().code, "acme");

    // globex exists, nope does not, default is not granted: all three answer alike.
    let mut messages = Vec::new();
    for code in ["globex", "nope", "default"] {
        let e = get_ledger(&mut c, acme, code).await.unwrap_err();
        assert_error(&e, Code::PermissionDenied, "LEDGER_NOT_GRANTED");
        messages.push(e.message().replace(code, "L"));
        let e = c
            .create_account(bearer(account_in(code, "a"), acme))
            .await
            .unwrap_err();
        assert_error(&e, Code::PermissionDenied, "LEDGER_NOT_GRANTED");
        let post = pb::PostRequest {
            ledger: code.into(),
            ..transfer("k2", "a", "b", "1.00")
        };
        let e = c.post(bearer(post, acme)).await.unwrap_err();
        assert_error(&e, Code::PermissionDenied, "LEDGER_NOT_GRANTED");
        let get = pb::GetAccountRequest {
            as_of: None,
            ledger: code.into(),
            code: "a".into(),
        };
        let e = c.get_account(bearer(get, acme)).await.unwrap_err();
        assert_error(&e, Code::PermissionDenied, "LEDGER_NOT_GRANTED");
    }
    assert!(
        messages.windows(2).all(|w| w[0] == w[1]),
        "the answers tell which ledgers exist: {messages:?}"
    );
    // An empty `ledger` is `default`, not granted either.
    let e = c
        .create_account(bearer(account_req("c"), acme))
        .await
        .unwrap_err();
    assert_error(&e, Code::PermissionDenied, "LEDGER_NOT_GRANTED");
    assert_eq!(t.count("accounts").await, 2);
    assert_eq!(t.count("postings").await, 1);
}

#[tokio::test]
async fn a_caller_granted_every_ledger_learns_that_one_does_not_exist() {
    let (t, tok) = ledger_with_grants(&[
        ("ops", Role::Admin, Some("*")),
        ("svc", Role::Writer, Some("*")),
    ])
    .await;
    let mut c = t.client.clone();
    create_ledger(&mut c, &tok[0], "acme").await.unwrap();
    let svc = &tok[1];
    for ledger in ["acme", "default", ""] {
        c.create_account(bearer(account_in(ledger, "a"), svc))
            .await
            .unwrap_or_else(|e| panic!("{ledger:?}: {e:?}"));
    }
    let e = get_ledger(&mut c, svc, "nope").await.unwrap_err();
    assert_error(&e, Code::NotFound, "LEDGER_NOT_FOUND");
    let e = c
        .create_account(bearer(account_in("nope", "a"), svc))
        .await
        .unwrap_err();
    assert_error(&e, Code::NotFound, "LEDGER_NOT_FOUND");
    let get = pb::GetAccountRequest {
        as_of: None,
        ledger: "nope".into(),
        code: "a".into(),
    };
    let e = c.get_account(bearer(get, svc)).await.unwrap_err();
    assert_error(&e, Code::NotFound, "LEDGER_NOT_FOUND");
    assert_eq!(t.count("accounts").await, 2, "acme:a and default:a");
}

#[tokio::test]
async fn list_ledgers_shows_each_caller_only_the_ledgers_it_is_granted() {
    let (t, tok) = ledger_with_grants(&[
        ("ops", Role::Admin, Some("*")),
        ("two", Role::Reader, Some("initech,acme,missing")),
        ("old", Role::Reader, None),
        ("globex-svc", Role::Writer, Some("globex")),
    ])
    .await;
    let mut c = t.client.clone();
    for code in ["initech", "globex", "acme"] {
        create_ledger(&mut c, &tok[0], code).await.unwrap();
    }
    let table: [(&str, &[&str]); 4] = [
        (&tok[0], &["acme", "default", "globex", "initech"]),
        (&tok[1], &["acme", "initech"]),
        (&tok[2], &["default"]),
        (&tok[3], &["globex"]),
    ];
    for (token, want) in table {
        assert_eq!(listed_ledgers(&mut c, token).await, want);
    }
}

#[tokio::test]
async fn a_line_without_a_fourth_column_may_use_the_default_ledger_only() {
    let (t, tok) = ledger_with_grants(&[
        ("ops", Role::Admin, Some("*")),
        ("legacy", Role::Writer, None),
    ])
    .await;
    let mut c = t.client.clone();
    create_ledger(&mut c, &tok[0], "acme").await.unwrap();
    let legacy = &tok[1];
    // What such a line could do before ledgers, it still can: in `default`, named or not.
    c.create_account(bearer(account_req("a"), legacy))
        .await
        .expect("an empty ledger is default");
    c.create_account(bearer(account_in("default", "b"), legacy))
        .await
        .expect("default by name");
    c.post(bearer(transfer("k1", "a", "b", "1.00"), legacy))
        .await
        .expect("posts in default");
    assert_eq!(
        get_ledger(&mut c, legacy, "default").await.unwrap().code,
        "default"
    );
    let e = get_ledger(&mut c, legacy, "acme").await.unwrap_err();
    assert_error(&e, Code::PermissionDenied, "LEDGER_NOT_GRANTED");
    let e = c
        .create_account(bearer(account_in("acme", "a"), legacy))
        .await
        .unwrap_err();
    assert_error(&e, Code::PermissionDenied, "LEDGER_NOT_GRANTED");
    let e = create_ledger(&mut c, legacy, "globex").await.unwrap_err();
    assert_error(&e, Code::PermissionDenied, "PERMISSION_DENIED");
    assert_eq!(t.count("accounts").await, 2);
}

// ---- TLS and mutual TLS ------------------------------------------------------------------

/// A test CA, a server certificate for `localhost` it signed, and client certificates.
pub(crate) struct Pki {
    pub(crate) ca_pem: String,
    pub(crate) server: TlsPem,
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "ledger test CA");
        let issuer =
            rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
        let (cert, key) = Self::leaf(&issuer, "localhost", &["localhost"]);
        Pki {
            ca_pem: issuer.pem(),
            server: TlsPem {
                cert: cert.into_bytes(),
                key: key.into_bytes(),
                client_ca: None,
            },
            issuer,
        }
    }

    fn leaf(
        issuer: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
        cn: &str,
        sans: &[&str],
    ) -> (String, String) {
        let mut p =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        if !cn.is_empty() {
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub(crate) fn client(&self, cn: &str, sans: &[&str]) -> Identity {
        let (cert, key) = Self::leaf(&self.issuer, cn, sans);
        Identity::from_pem(cert, key)
    }

    async fn connect(
        &self,
        addr: std::net::SocketAddr,
        identity: Option<Identity>,
    ) -> Result<LedgerClient<Channel>, tonic::transport::Error> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .domain_name("localhost");
        if let Some(id) = identity {
            tls = tls.identity(id);
        }
        let channel = Channel::from_shared(format!("https://localhost:{}", addr.port()))
            .unwrap()
            .tls_config(tls)?
            .connect()
            .await?;
        Ok(LedgerClient::new(channel))
    }
}

#[tokio::test]
async fn over_tls_a_client_that_trusts_the_ca_posts_and_a_plaintext_one_fails() {
    let pki = Pki::new();
    let t = TestLedger::start_with(OpsOptions {
        tls: Some(pki.server.clone()),
        ..app_role_ops()
    })
    .await;
    let addr = t.server.as_ref().unwrap().local_addr;
    let mut c = pki.connect(addr, None).await.expect("TLS connect");
    for code in ["a", "b"] {
        c.create_account(account_req(code)).await.unwrap();
    }
    let p = c
        .post(transfer("k", "a", "b", "2.00"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.posting.unwrap().caller, "anonymous");
    // Plaintext HTTP/2 to a TLS port gets no answer.
    let plain = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await;
    if let Ok(ch) = plain {
        let e = LedgerClient::new(ch)
            .get_account(pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: "a".into(),
            })
            .await
            .unwrap_err();
        assert_ne!(e.code(), Code::Ok);
    }
}

#[tokio::test]
async fn with_mutual_tls_the_client_certificate_names_the_caller_and_its_role() {
    let pki = Pki::new();
    let auth = AuthFile::parse("svc-m writer mtls\nauditor reader mtls").unwrap();
    let t = TestLedger::start_with(OpsOptions {
        auth: Some(auth),
        tls: Some(TlsPem {
            client_ca: Some(pki.ca_pem.clone().into_bytes()),
            ..pki.server.clone()
        }),
        ..app_role_ops()
    })
    .await;
    let addr = t.server.as_ref().unwrap().local_addr;

    let mut writer = pki
        .connect(addr, Some(pki.client("svc-m", &[])))
        .await
        .unwrap();
    for code in ["a", "b"] {
        writer.create_account(account_req(code)).await.unwrap();
    }
    let p = writer
        .post(transfer("k", "a", "b", "2.00"))
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    assert_eq!(p.caller, "svc-m");

    // Without a CN, the first DNS SAN is the identity.
    let mut reader = pki
        .connect(addr, Some(pki.client("", &["auditor"])))
        .await
        .unwrap();
    reader
        .get_account(pb::GetAccountRequest {
            as_of: None,
            ledger: String::new(),
            code: "a".into(),
        })
        .await
        .expect("reader reads");
    let e = reader
        .post(transfer("k2", "a", "b", "2.00"))
        .await
        .unwrap_err();
    assert_error(&e, Code::PermissionDenied, "PERMISSION_DENIED");

    let mut stranger = pki
        .connect(addr, Some(pki.client("svc-unknown", &[])))
        .await
        .unwrap();
    let e = stranger
        .get_account(pb::GetAccountRequest {
            as_of: None,
            ledger: String::new(),
            code: "a".into(),
        })
        .await
        .unwrap_err();
    assert_error(&e, Code::Unauthenticated, "UNAUTHENTICATED");

    // No client certificate: the handshake (or the first call) fails.
    let refused = match pki.connect(addr, None).await {
        Err(_) => true,
        Ok(mut c) => c
            .get_account(pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: "a".into(),
            })
            .await
            .is_err(),
    };
    assert!(refused);
    // A certificate from another CA is refused too.
    let other = Pki::new();
    let refused = match pki.connect(addr, Some(other.client("svc-m", &[]))).await {
        Err(_) => true,
        Ok(mut c) => c
            .get_account(pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: "a".into(),
            })
            .await
            .is_err(),
    };
    assert!(refused);
    assert_eq!(t.count("postings").await, 1);
}

// ---- The database's application role -----------------------------------------------------

#[tokio::test]
async fn the_application_role_cannot_update_delete_or_truncate_journal_rows() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let pool =
        ledger_server::storage::pool_as(&t.database_url, 1, Some(ledger_server::storage::APP_ROLE))
            .unwrap();
    let db = pool.get().await.unwrap();
    let who: String = db
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(who, "ledger_app");
    let attacks = [
        "UPDATE postings SET memo = 'changed'",
        "DELETE FROM postings",
        "TRUNCATE postings CASCADE",
        "UPDATE entries SET amount = 1000",
        "DELETE FROM entries",
        "UPDATE idempotency_keys SET fingerprint = '\\x00'",
        "DELETE FROM idempotency_keys",
        "UPDATE accounts SET currency = 'USD'",
        "DELETE FROM accounts",
        "UPDATE rejections SET reason = 'x'",
        "DELETE FROM rejections",
        "DELETE FROM schema_migrations",
        "RESET ROLE; DELETE FROM postings",
    ];
    for sql in attacks {
        let err = db.batch_execute(sql).await.expect_err(sql);
        let db_err = err.as_db_error().expect("a database error");
        // Refused by privileges (42501), before any trigger runs.
        assert_eq!(db_err.code().code(), "42501", "{sql}: {}", db_err.message());
        assert!(
            db_err.message().contains("permission denied"),
            "{sql}: {}",
            db_err.message()
        );
    }
    // What the service needs still works as this role (every other test runs so, too).
    db.batch_execute("BEGIN; UPDATE ledger_state SET last_sequence = last_sequence; ROLLBACK")
        .await
        .unwrap();
    assert_eq!(t.count("postings").await, 1);
    assert_eq!(t.balance("acct:0", None).await.balance, "1.00");
}
