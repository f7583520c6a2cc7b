//! The options of `ledger bench`, and the ones that could not make a run, refused by name.

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
}

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

    /// Postings per call.
    pub(super) fn per_call(&self) -> usize {
        self.batch.unwrap_or(1)
    }
}
