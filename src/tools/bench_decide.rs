//! `ledger bench-decide`: the pure decide step measured alone, without PostgreSQL or gRPC:
//! decisions per second for batches of 1, 64 and 1,000 postings (or the sizes given), on a
//! snapshot of accounts held in memory as storage would load them. A timed loop, repeated;
//! the median of the repetitions is reported.

use ledger_core::account::{Account, Metadata, NormalBalance};
use ledger_core::amount::Amount;
use ledger_core::engine::Totals;
use ledger_core::posting::{LegRequest, PostRequest};
use ledger_core::write::{decide, AccountState, Clock, Command, KeyState, Snapshot, WriteRequest};
use ledger_core::Direction;
use ledger_server::BoxError;
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use time::OffsetDateTime;
use uuid::Uuid;

/// `ledger bench-decide`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchDecideArgs {
    /// Batch sizes to measure (postings per batch).
    #[arg(long, value_delimiter = ',', default_value = "1,64,1000")]
    pub batches: Vec<usize>,
    /// Accounts the postings are spread over (each posting pays one to another).
    #[arg(long, default_value_t = 10_000)]
    pub accounts: usize,
    /// Seconds each repetition of each size runs.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Repetitions per size (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
}

pub fn run(args: &BenchDecideArgs) -> Result<ExitCode, BoxError> {
    if args.accounts < 2 || args.repeat == 0 || args.batches.contains(&0) {
        return Err(
            "bench-decide needs at least 2 accounts, 1 repetition and batches of 1 or more".into(),
        );
    }
    let accounts = accounts(args.accounts);
    let mut lines = Vec::new();
    for &size in &args.batches {
        let requests = posts(&accounts, size);
        let snapshot = snapshot(&accounts, &requests);
        let mut rates: Vec<f64> = (0..args.repeat)
            .map(|_| rate(&snapshot, &requests, Duration::from_secs_f64(args.seconds)))
            .collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        eprintln!(
            "batch {size:>5}: {median:>10.0} decisions/s ({:.0} batches/s; {} repetitions, {:.0}..{:.0})",
            median / size as f64,
            rates.len(),
            rates[0],
            rates[rates.len() - 1]
        );
        lines.push(format!(
            r#"{{"batch":{size},"decisions_per_s":{median:.0}}}"#
        ));
    }
    super::output::print_out(&format!(
        "{{\"scenario\":\"decide\",\"accounts\":{},\"results\":[{}]}}\n",
        args.accounts,
        lines.join(",")
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Decisions per second: whole batches decided in a loop for about `span`.
fn rate(snapshot: &Snapshot, requests: &[WriteRequest], span: Duration) -> f64 {
    let ids: Vec<Uuid> = requests.iter().map(|_| Uuid::now_v7()).collect();
    let began = Instant::now();
    let mut decided = 0usize;
    while began.elapsed() < span {
        let plan = decide(snapshot, requests, &ids);
        assert!(
            plan.unbound.is_empty() && plan.rejections.is_empty(),
            "every posting of the bench is accepted"
        );
        decided += std::hint::black_box(plan).outcomes.len();
    }
    decided as f64 / began.elapsed().as_secs_f64()
}

fn accounts(n: usize) -> HashMap<String, Account> {
    (0..n)
        .map(|i| {
            let a = Account {
                ledger: ledger_core::ledger::DEFAULT_LEDGER_ID,
                id: i as i64 + 1,
                code: format!("bench:{i}"),
                currency: "EUR".into(),
                scale: 2,
                normal_balance: if i % 2 == 0 {
                    NormalBalance::Debit
                } else {
                    NormalBalance::Credit
                },
                allow_negative: true,
                metadata: Metadata::new(),
                created_at: OffsetDateTime::UNIX_EPOCH,
            };
            (a.code.clone(), a)
        })
        .collect()
}

/// `n` two-leg posts between the accounts, each under its own key, validated as the service
/// validates them.
fn posts(accounts: &HashMap<String, Account>, n: usize) -> Vec<WriteRequest> {
    let count = accounts.len();
    (0..n)
        .map(|i| {
            let leg = |a: usize, d| LegRequest {
                account: format!("bench:{}", a % count),
                direction: Some(d),
                amount: Amount::from_minor(100 + i as i128 % 900, 2).to_string(),
            };
            let req = PostRequest {
                idempotency_key: format!("bench-decide-{i}"),
                legs: vec![
                    leg(2 * i, Direction::Debit),
                    leg(2 * i + 1, Direction::Credit),
                ],
                effective_at: None,
                memo: String::new(),
                metadata: Metadata::new(),
                hold: false,
                hold_expires_at: None,
                conditions: Vec::new(),
            };
            let valid = req.validate(accounts).expect("the bench's posts are valid");
            WriteRequest {
                caller: "bench".into(),
                command: Command::Post(valid),
            }
        })
        .collect()
}

/// The snapshot storage would load for `requests`: every key new, the totals of the accounts
/// they touch.
fn snapshot(accounts: &HashMap<String, Account>, requests: &[WriteRequest]) -> Snapshot {
    let now = OffsetDateTime::now_utc();
    let touched: std::collections::HashSet<i64> = requests
        .iter()
        .flat_map(|r| match &r.command {
            Command::Post(p) => p.legs.iter().map(|l| l.account_id).collect::<Vec<_>>(),
            _ => Vec::new(),
        })
        .collect();
    Snapshot {
        clock: Clock {
            last_sequence: 0,
            last_recorded_at: now,
            now,
        },
        keys: (1..=requests.len() as i64).map(KeyState::Claimed).collect(),
        accounts: accounts
            .values()
            .filter(|a| touched.contains(&a.id))
            .map(|a| {
                let state = AccountState::new(a.clone(), Totals::default());
                (a.id, state)
            })
            .collect(),
        account_ids: HashMap::new(),
        named: HashMap::new(),
        corrupt_accounts: HashMap::new(),
        corrupt_named: HashMap::new(),
        expiring: Vec::new(),
        // A new ledger, hashed from its first posting: decide hashes as the writer's does.
        chain: Some(ledger_core::journal::Chain::genesis("default")),
        closed_before: None,
    }
}
