//! What the callers count: the answers, by kind, and the latencies (a histogram each).

use hdrhistogram::Histogram;
use ledger_client::{Error, Posted, Reason};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Longest latency the histograms record (two minutes, in microseconds).
const MAX_LATENCY_MICROS: u64 = 120_000_000;

/// Counters shared by the callers.
#[derive(Default)]
pub(super) struct Stats {
    /// New postings recorded: ordinary ones, holds, captures and releases.
    pub(super) postings: AtomicU64,
    pub(super) replays: AtomicU64,
    pub(super) rejected: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) first_error: Mutex<Option<String>>,
    /// Holds recorded (new), and hold posts that failed (errors; refusals for funds are
    /// `rejected`).
    pub(super) holds: AtomicU64,
    pub(super) hold_failures: AtomicU64,
    /// Holds closed by a capture or a release, and closes that failed (errors).
    pub(super) captures: AtomicU64,
    pub(super) capture_failures: AtomicU64,
    pub(super) releases: AtomicU64,
    pub(super) release_failures: AtomicU64,
    /// Closes begun: even ones capture, odd ones release.
    pub(super) closes: AtomicU64,
}

impl Stats {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            *first = Some(what);
        }
    }

    /// Counts one posting's answer (`hold`: it was sent as a hold); returns whether it is
    /// worth re-sending later (a new posting recorded).
    pub(super) fn record(
        &self,
        duplicate: bool,
        hold: bool,
        answer: &Result<Posted, Error>,
    ) -> bool {
        if hold && !duplicate {
            let counter = match answer {
                Ok(posted) if !posted.replayed => Some(&self.holds),
                // Refused for funds: `rejected`, below, like any posting.
                Err(e) if e.reason() == Some(Reason::InsufficientFunds) => None,
                _ => Some(&self.hold_failures),
            };
            if let Some(c) = counter {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        match answer {
            Ok(posted) => match (duplicate, posted.replayed) {
                (false, false) => {
                    self.postings.fetch_add(1, Ordering::Relaxed);
                    true
                }
                (true, true) => {
                    self.replays.fetch_add(1, Ordering::Relaxed);
                    false
                }
                (false, true) => {
                    self.error("a new key was answered as a replay".into());
                    false
                }
                (true, false) => {
                    self.error("a re-sent key made a second posting".into());
                    false
                }
            },
            // A state-dependent rejection (insufficient funds): decided, not an error.
            Err(e) if e.reason() == Some(Reason::InsufficientFunds) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(e) => {
                self.error(e.to_string());
                false
            }
        }
    }

    /// Counts the answer to a hold's capture (`capture`) or release: a new posting (answers
    /// true), or a failure (an error).
    pub(super) fn record_close(&self, capture: bool, answer: &Result<Posted, Error>) -> bool {
        let (what, done, failed) = if capture {
            ("capture", &self.captures, &self.capture_failures)
        } else {
            ("release", &self.releases, &self.release_failures)
        };
        let failure = match answer {
            Ok(posted) if !posted.replayed => {
                self.postings.fetch_add(1, Ordering::Relaxed);
                done.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            Ok(_) => format!("a new {what} key was answered as a replay"),
            Err(e) => format!("{what} of a hold: {e}"),
        };
        failed.fetch_add(1, Ordering::Relaxed);
        self.error(failure);
        false
    }
}

pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_MICROS, 3).expect("valid histogram bounds")
}
