//! Before the load: the run's accounts created (or found) in each of its ledgers and each
//! asset account funded.

use super::args::{BenchArgs, BENCH_DEBIT_LIMITS};
use super::load::{eur, Plan};
use ledger_client::{
    AccountUpdate, Client, DebitLimit, Error, NewAccount, NewPosting, NormalBalance,
    MAX_CACHED_ACCOUNTS,
};
use ledger_server::BoxError;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// Minor units each asset account is funded with (1,000,000.00 EUR).
const FUNDING_MINOR: i64 = 100_000_000;

/// Concurrent requests while creating and funding accounts.
const SETUP_CONCURRENCY: usize = 32;

/// A new run's id: the time in milliseconds and the process id, in hex.
fn run_id() -> Result<String, BoxError> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    Ok(format!("{ms:x}{:04x}", std::process::id() & 0xffff))
}

/// Runs `calls` with at most SETUP_CONCURRENCY in flight, over the clients in turn.
async fn in_parallel<F, Fut>(clients: &[Client], n: usize, call: F) -> Result<(), BoxError>
where
    F: Fn(Client, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>> + Send + 'static,
{
    let sem = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let permit = sem.clone().acquire_owned().await?;
        let fut = call(clients[i % clients.len()].clone(), i);
        tasks.push(tokio::spawn(async move {
            let r = fut.await;
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// What funds a ledger's asset accounts: the run, the funding account, the asset accounts.
struct Funds<'a> {
    run_id: &'a str,
    funding: &'a str,
    accounts: &'a [String],
}

/// Creates (or finds) the accounts of one ledger (`clients`: its clients) and funds each
/// asset account, under keys of the run.
async fn prepare_ledger(
    clients: &[Client],
    creates: &[NewAccount],
    f: Funds<'_>,
) -> Result<(), BoxError> {
    let ledger = clients[0].ledger_code();
    // The clients share the accounts they read: the answers to these are all they need.
    in_parallel(clients, creates.len(), |c, i| {
        let a = creates[i].clone();
        async move { c.create_account(a).await.map(drop) }
    })
    .await
    .map_err(|e| format!("creating accounts in ledger {ledger}: {e}"))?;
    in_parallel(clients, f.accounts.len(), |c, i| {
        let fund = NewPosting::new(format!("{}-fund-{i}", f.run_id))
            .debit(&f.accounts[i], eur(FUNDING_MINOR))
            .credit(f.funding, eur(FUNDING_MINOR))
            .memo("bench funding");
        async move { c.post(fund).await.map(drop) }
    })
    .await
    .map_err(|e| format!("funding accounts in ledger {ledger}: {e}"))?;
    Ok(())
}

/// Gives each of `codes` the limits of `--debit-limits` (an UpdateAccount under a key of the
/// run), unless it has exactly them already; returns how many it updated.
async fn give_debit_limits(
    clients: &[Client],
    codes: &[String],
    run_id: &str,
) -> Result<usize, BoxError> {
    let ledger = clients[0].ledger_code();
    let want: Vec<DebitLimit> = BENCH_DEBIT_LIMITS
        .iter()
        .map(|&(minor, secs)| DebitLimit::new(eur(minor), secs))
        .collect();
    let updated = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    in_parallel(clients, codes.len(), |c, i| {
        let (code, want, updated) = (codes[i].clone(), want.clone(), updated.clone());
        let key = format!("{run_id}-limits-{i}");
        async move {
            let a = c.account(&code).await?;
            if a.debit_limits == want {
                return Ok(());
            }
            let mut u = AccountUpdate::new(key, &code, a.version, "ledger bench --debit-limits");
            u.debit_limits = Some(want);
            c.update_account(u).await?;
            updated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    })
    .await
    .map_err(|e| format!("giving accounts debit limits in ledger {ledger}: {e}"))?;
    Ok(updated.load(std::sync::atomic::Ordering::Relaxed))
}

/// Creates (or reuses) the accounts in every ledger of the run (`views`: each ledger's
/// clients) and funds each asset account; returns the plan and the number of funding
/// postings made.
pub(super) async fn setup(
    args: &BenchArgs,
    views: &[Vec<Client>],
) -> Result<(Plan, u64), BoxError> {
    let run_id = run_id()?;
    let p = &args.prefix;
    let funding = format!("{p}:funding");
    let accounts: Vec<String> = (0..args.accounts)
        .map(|i| format!("{p}:acct:{i}"))
        .collect();
    let hot = args.hot_account.then(|| format!("{p}:hot"));
    let account = |code: &str, normal, allow_negative| NewAccount {
        code: code.to_owned(),
        currency: "EUR".into(),
        scale: 2,
        normal_balance: normal,
        allow_negative,
        metadata: Default::default(),
    };
    let mut creates = vec![account(&funding, NormalBalance::Credit, true)];
    creates.extend(hot.iter().map(|h| account(h, NormalBalance::Debit, false)));
    creates.extend(
        accounts
            .iter()
            .map(|a| account(a, NormalBalance::Debit, false)),
    );
    let began = Instant::now();
    let kept = views.len() * creates.len();
    if kept > MAX_CACHED_ACCOUNTS {
        eprintln!("bench: {kept} accounts over {} ledgers are more than the client keeps (MAX_CACHED_ACCOUNTS {MAX_CACHED_ACCOUNTS}): it will read some again during the load", views.len());
    }
    for clients in views {
        let funds = Funds {
            run_id: &run_id,
            funding: &funding,
            accounts: &accounts,
        };
        prepare_ledger(clients, &creates, funds).await?;
        if args.debit_limits {
            let codes: Vec<String> = creates.iter().map(|a| a.code.clone()).collect();
            let n = give_debit_limits(clients, &codes, &run_id).await?;
            eprintln!("bench: {n} of {} accounts given two debit limits (--debit-limits; the others had them)", codes.len());
        }
    }
    eprintln!(
        "bench: {} accounts ready and funded in {} ledger(s) in {:.1} s (run {run_id})",
        accounts.len(),
        views.len(),
        began.elapsed().as_secs_f64()
    );
    let plan = Plan {
        accounts,
        hot,
        legs: args.legs,
        duplicates: args.duplicates,
        holds: args.holds,
        run_id,
        per_call: args.per_call(),
    };
    Ok((plan, (args.accounts * views.len()) as u64))
}
