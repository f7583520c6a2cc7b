//! The retry policy: a call whose outcome is unknown (`UNAVAILABLE`, `DEADLINE_EXCEEDED`,
//! `CANCELLED`, a dropped or refused connection) is sent again as it was, with the same
//! idempotency key, which never makes a second effect. Attempts are bounded; the pause between
//! them doubles up to a cap, with jitter so that many clients that failed together do not
//! retry together.

use std::hash::BuildHasher;
use std::time::Duration;

/// Attempts of one call, at most, the first included (limit RETRY_MAX_ATTEMPTS).
pub const RETRY_MAX_ATTEMPTS: u32 = 6;
/// Pause before the second attempt (limit RETRY_FIRST_BACKOFF); doubled before each next.
pub const RETRY_FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Longest pause between two attempts (limit RETRY_MAX_BACKOFF). With the defaults a call
/// gives up about 3 s after its first failure (50 + 100 + 200 + 400 + 800 ms, jittered, and the
/// attempts themselves): longer than a server restart takes, far shorter than a caller waits.
pub const RETRY_MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Longest one attempt may take (limit ATTEMPT_TIMEOUT), sent to the server as the call's
/// deadline (`grpc-timeout`): below the server's own REQUEST_TIMEOUT (15 s), above its write
/// batch's BATCH_TIMEOUT (10 s), which answers `UNAVAILABLE` by itself first.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(12);

/// How a [`crate::Client`] retries calls whose outcome is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts at most, the first included (1: never retry).
    pub max_attempts: u32,
    /// Pause before the second attempt.
    pub first_backoff: Duration,
    /// Pause between attempts at most.
    pub max_backoff: Duration,
    /// Deadline of each attempt.
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: RETRY_MAX_ATTEMPTS,
            first_backoff: RETRY_FIRST_BACKOFF,
            max_backoff: RETRY_MAX_BACKOFF,
            attempt_timeout: ATTEMPT_TIMEOUT,
        }
    }
}

impl RetryPolicy {
    /// No retries: every failure is returned as it came.
    pub fn never() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The pause after failed attempt number `attempt` (1, 2, …): the backoff
    /// `first_backoff × 2^(attempt−1)`, at most `max_backoff`, of which a random part of up
    /// to half is taken off ("equal jitter": never zero, never above the cap).
    pub fn pause(&self, attempt: u32, random: u64) -> Duration {
        let doubling = 1u32 << attempt.saturating_sub(1).min(20);
        let backoff = self
            .first_backoff
            .saturating_mul(doubling)
            .min(self.max_backoff);
        let half = backoff / 2;
        let jitter_ns = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = match jitter_ns {
            0 => Duration::ZERO,
            n => Duration::from_nanos(random % (n + 1)),
        };
        backoff - jitter
    }
}

/// A random number for jitter: the standard library's randomly keyed hasher, fresh each time
/// (no dependency, no shared state; jitter needs no cryptography).
pub(crate) fn random() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_jitter_takes_off_at_most_half() {
        let p = RetryPolicy::default();
        for (attempt, full) in [
            (1, 50),
            (2, 100),
            (3, 200),
            (4, 400),
            (5, 800),
            (6, 1600),
            (7, 2000),
            (30, 2000),
        ] {
            let full = Duration::from_millis(full);
            assert_eq!(p.pause(attempt, 0), full, "attempt {attempt}");
            assert_eq!(
                p.pause(attempt, u64::MAX - 7).max(full / 2),
                p.pause(attempt, u64::MAX - 7)
            );
            for _ in 0..50 {
                let d = p.pause(attempt, random());
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
            }
        }
        let spread: std::collections::HashSet<Duration> =
            (0..20).map(|_| p.pause(4, random())).collect();
        assert!(spread.len() > 10, "jitter varies: {spread:?}");
        assert_eq!(RetryPolicy::never().max_attempts, 1);
    }
}
