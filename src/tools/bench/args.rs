//! The options of `ledger bench`, and the ones that could not make a run, refused by name.

/// Ledgers a run spreads its load over, at most (limit MAX_BENCH_LEDGERS): each is created
/// and funded before the load, one account of each per --accounts.
pub const MAX_BENCH_LEDGERS: usize = 1000;

/// What the load consists of. Other scenarios add a value here and an arm in
/// [`run`](super::run).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Transfers between random accounts (`Post`, or `PostBatch` with --batch).
    Post,
}

/// Options of `ledger bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub client: crate::tools::ClientArgs,
    /// The ledger of a run on one ledger (--ledgers 1): its accounts and postings go there.
    #[command(flatten)]
    pub ledger: crate::tools::LedgerArg,
    /// Ledgers to spread the load over. 1: the ledger of --ledger (`default` without it),
    /// used as it is. N > 1: the ledgers bench-1 … bench-N, created (CreateLedger, which
    /// finds them on later runs; the role admin when the server authenticates), each with
    /// the same accounts, funded; the callers (or, with --rate, the calls) are spread evenly
    /// over them, and the summary gives each ledger's postings and rate besides the total.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub ledgers: usize,
    /// How long to send requests, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Concurrent callers (closed loop), or the most calls in flight (open loop).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Asset accounts to create and transfer between.
    #[arg(long, default_value_t = 1000)]
    pub accounts: usize,
    /// Every posting also touches one shared account (a fees account).
    #[arg(long)]
    pub hot_account: bool,
    /// Open loop: postings offered per second (in calls of --batch postings; latency from the
    /// intended send time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Fraction of postings that re-send an earlier posting with its key (counted as replays).
    #[arg(long, default_value_t = 0.0)]
    pub duplicates: f64,
    /// Fraction (0..=1) of the new postings sent as holds (the same legs, no expiry). The caller
    /// that sent a hold closes it once it is answered: every other one is captured whole
    /// (Capture, key `<hold's key>:capture`), the rest released (Void, key `<hold's
    /// key>:release`). Holds, captures and releases each count as one posting in `postings`
    /// and `postings_per_sec`. With --batch holds travel in the PostBatch calls and their
    /// captures and releases are Capture and Void calls of their own; with --rate the rate
    /// paces new postings and holds, and closes follow their hold's answer, unpaced.
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub holds: f64,
    /// Legs per posting (at least 2; with --hot-account one of them is the hot account).
    #[arg(long, default_value_t = 2)]
    pub legs: usize,
    /// Send PostBatch calls of N postings (1..=1000, MAX_BATCH_REQUESTS) instead of Post.
    #[arg(long, value_name = "N", conflicts_with = "client_coalesce")]
    pub batch: Option<usize>,
    /// Send single posts through the client's coalescing: concurrent posts travel together
    /// in PostBatch calls of at most N postings.
    #[arg(long, value_name = "N")]
    pub client_coalesce: Option<usize>,
    /// What to send.
    #[arg(long, value_enum, default_value_t = Scenario::Post)]
    pub scenario: Scenario,
    /// Prefix of the account codes (accounts are reused by later runs with the same prefix).
    #[arg(long, default_value = "bench")]
    pub prefix: String,
    /// Give every account of the run two debit limits before the load (UpdateAccount, once:
    /// an account that has them already keeps its version), so that each posting pays for
    /// them: BENCH_DEBIT_LIMITS, large enough never to refuse. Accounts keep their limits
    /// after the run, so compare runs with and without on different --prefix.
    #[arg(long)]
    pub debit_limits: bool,
}

/// The limits of `--debit-limits`, (minor units of EUR, window seconds): 10,000,000,000.00
/// over a minute and over a day, far above what a run debits (its funding included).
pub const BENCH_DEBIT_LIMITS: [(i64, u32); 2] =
    [(1_000_000_000_000, 60), (1_000_000_000_000, 86_400)];

impl BenchArgs {
    /// Options that could not make a run are refused by name.
    pub(super) fn check(&self) -> Result<(), String> {
        use ledger_core::limits::{MAX_BATCH_REQUESTS, MAX_LEGS};
        if self.legs < 2 || self.legs > MAX_LEGS {
            return Err(format!(
                "--legs must be 2..={MAX_LEGS} (limit MAX_LEGS), got {}",
                self.legs
            ));
        }
        if self.accounts < 2 {
            return Err(format!(
                "--accounts must be at least 2, got {}",
                self.accounts
            ));
        }
        if !(0.0..=1.0).contains(&self.duplicates) {
            return Err(format!(
                "--duplicates must be within 0..=1, got {}",
                self.duplicates
            ));
        }
        if !(0.0..=1.0).contains(&self.holds) {
            return Err(format!(
                "--holds must be a fraction within 0..=1 (of the postings sent as holds), got {}",
                self.holds
            ));
        }
        if self.concurrency == 0 {
            return Err("--concurrency must be at least 1".into());
        }
        self.check_ledgers()?;
        if matches!(self.rate, Some(r) if !(r > 0.0 && r.is_finite())) {
            return Err("--rate must be a positive number".into());
        }
        for (flag, n) in [
            ("--batch", self.batch),
            ("--client-coalesce", self.client_coalesce),
        ] {
            if matches!(n, Some(n) if n == 0 || n > MAX_BATCH_REQUESTS) {
                return Err(format!(
                    "{flag} must be 1..={MAX_BATCH_REQUESTS} (limit MAX_BATCH_REQUESTS)"
                ));
            }
        }
        Ok(())
    }

    /// `--ledgers`: 1..=MAX_BENCH_LEDGERS, each with a caller at least (closed loop), and
    /// `--ledger` only for a run on one ledger.
    fn check_ledgers(&self) -> Result<(), String> {
        if self.ledgers == 0 || self.ledgers > MAX_BENCH_LEDGERS {
            return Err(format!(
                "--ledgers must be 1..={MAX_BENCH_LEDGERS} (limit MAX_BENCH_LEDGERS), got {}",
                self.ledgers
            ));
        }
        if self.rate.is_none() && self.concurrency < self.ledgers {
            return Err(format!(
                "--concurrency {} is less than --ledgers {}: every ledger needs a caller",
                self.concurrency, self.ledgers
            ));
        }
        if let (Some(l), true) = (self.ledger.given(), self.ledgers > 1) {
            return Err(format!(
                "--ledger {l} (or LEDGER_LEDGER) names the one ledger of a run with --ledgers 1; --ledgers {} uses bench-1 … bench-{}",
                self.ledgers, self.ledgers
            ));
        }
        Ok(())
    }

    /// The ledgers of the run, in order: the one of `--ledger`, or `bench-1` … `bench-N`.
    pub(super) fn ledger_codes(&self) -> Vec<String> {
        if self.ledgers == 1 {
            return vec![self.ledger.code()];
        }
        (1..=self.ledgers).map(|i| format!("bench-{i}")).collect()
    }

    /// Postings per call.
    pub(super) fn per_call(&self) -> usize {
        self.batch.unwrap_or(1)
    }
}
