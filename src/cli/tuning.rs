//! `serve`'s operational knobs on the command line: a flag each, with its `LEDGER_*`
//! environment variable and its default (the named limit), all shown by `--help`; together
//! they build the one [`Tuning`] value the server is given.

use ledger_server::outbox::parse_duration;
use ledger_server::storage::replica::{
    ReplicaTuning, REPLICA_CONNECT_TIMEOUT, REPLICA_POOL_SIZE, REPLICA_PROBE_INTERVAL,
    REPLICA_READ_TIMEOUT, REPLICA_WAIT_TIMEOUT,
};
use ledger_server::storage::{
    PoolTuning, DB_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, POOL_WAIT_TIMEOUT,
};
use ledger_server::transport::{self, TransportLimits};
use ledger_server::tuning::{Tuning, DRAIN_TIMEOUT};
use ledger_server::writer::{
    WriterTuning, BATCH_TIMEOUT, LANE_IDLE_TIMEOUT, MAX_BATCH, MAX_WRITER_LANES, MAX_WRITE_QUEUE,
    WRITER_LANES,
};
use std::time::Duration;

/// A duration on the command line, shown as it is written (`500ms`, `30s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span(Duration);

impl std::fmt::Display for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_millis() {
            ms if ms % 1000 == 0 => write!(f, "{}s", ms / 1000),
            ms => write!(f, "{ms}ms"),
        }
    }
}

impl std::str::FromStr for Span {
    type Err = String;
    fn from_str(s: &str) -> Result<Span, String> {
        parse_duration(s).map(Span)
    }
}

/// The knobs of `serve` (durations as `500ms`, `30s`, `2m`).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Tuning")]
pub struct TuningArgs {
    /// Database connections in the pool (limit).
    #[arg(long, env = "LEDGER_POOL_SIZE", default_value_t = DEFAULT_POOL_SIZE)]
    pool_size: usize,
    /// Longest wait for a pooled connection (limit POOL_WAIT_TIMEOUT).
    #[arg(long, env = "LEDGER_POOL_WAIT_TIMEOUT", default_value_t = Span(POOL_WAIT_TIMEOUT))]
    pool_wait_timeout: Span,
    /// Longest a database connection may take to open (limit DB_CONNECT_TIMEOUT).
    #[arg(long, env = "LEDGER_DB_CONNECT_TIMEOUT", default_value_t = Span(DB_CONNECT_TIMEOUT))]
    db_connect_timeout: Span,
    /// Write batches in flight at once, each on its own connection (limit WRITER_LANES).
    #[arg(long, env = "LEDGER_WRITER_LANES", default_value_t = WRITER_LANES)]
    writer_lanes: usize,
    /// Writer lanes in the process at once, over all ledgers, each holding a pooled
    /// connection (limit MAX_WRITER_LANES).
    #[arg(long, env = "LEDGER_MAX_WRITER_LANES", default_value_t = MAX_WRITER_LANES)]
    max_writer_lanes: usize,
    /// How long a writer lane with nothing to take lives (limit LANE_IDLE_TIMEOUT).
    #[arg(long, env = "LEDGER_LANE_IDLE_TIMEOUT", default_value_t = Span(LANE_IDLE_TIMEOUT))]
    lane_idle_timeout: Span,
    /// Requests per write batch, at most (limit MAX_BATCH).
    #[arg(long, env = "LEDGER_MAX_BATCH", default_value_t = MAX_BATCH)]
    max_batch: usize,
    /// Requests waiting for the writer, at most (limit MAX_WRITE_QUEUE).
    #[arg(long, env = "LEDGER_MAX_WRITE_QUEUE", default_value_t = MAX_WRITE_QUEUE)]
    max_write_queue: usize,
    /// Longest a write batch may take (limit BATCH_TIMEOUT).
    #[arg(long, env = "LEDGER_BATCH_TIMEOUT", default_value_t = Span(BATCH_TIMEOUT))]
    batch_timeout: Span,
    /// Accounts kept in memory, at most (limit MAX_CACHED_ACCOUNTS).
    #[arg(long, env = "LEDGER_MAX_CACHED_ACCOUNTS", default_value_t = ledger_core::account::AccountCache::MAX_CACHED_ACCOUNTS)]
    max_cached_accounts: usize,
    /// Longest wait for requests in flight at shutdown (limit DRAIN_TIMEOUT).
    #[arg(long, env = "LEDGER_DRAIN_TIMEOUT", default_value_t = Span(DRAIN_TIMEOUT))]
    drain_timeout: Span,
    /// Client connections held at once, lowered to fit the open-file limit (limit MAX_CONNECTIONS).
    #[arg(long, env = "LEDGER_MAX_CONNECTIONS", default_value_t = transport::MAX_CONNECTIONS)]
    max_connections: usize,
    /// Streams one connection may have open (limit MAX_CONCURRENT_STREAMS).
    #[arg(long, env = "LEDGER_MAX_CONCURRENT_STREAMS", default_value_t = transport::MAX_CONCURRENT_STREAMS)]
    max_concurrent_streams: u32,
    /// Longest time from accepting a connection to its TLS handshake and HTTP/2 preface
    /// (limit HANDSHAKE_TIMEOUT).
    #[arg(long, env = "LEDGER_HANDSHAKE_TIMEOUT", default_value_t = Span(transport::HANDSHAKE_TIMEOUT))]
    handshake_timeout: Span,
    /// A connection without a stream this long is closed (limit IDLE_TIMEOUT).
    #[arg(long, env = "LEDGER_IDLE_TIMEOUT", default_value_t = Span(transport::IDLE_TIMEOUT))]
    idle_timeout: Span,
    /// Longest a call may take without a client deadline (limit REQUEST_TIMEOUT).
    #[arg(long, env = "LEDGER_REQUEST_TIMEOUT", default_value_t = Span(transport::REQUEST_TIMEOUT))]
    request_timeout: Span,
    /// Longest a response may wait for its client to take it (limit RESPONSE_SEND_TIMEOUT).
    #[arg(long, env = "LEDGER_RESPONSE_SEND_TIMEOUT", default_value_t = Span(transport::RESPONSE_SEND_TIMEOUT))]
    response_send_timeout: Span,
    /// Bytes held, server-wide, for responses not yet taken (limit RESPONSE_BYTES_IN_FLIGHT).
    #[arg(long, env = "LEDGER_RESPONSE_BYTES_IN_FLIGHT", default_value_t = transport::RESPONSE_BYTES_IN_FLIGHT)]
    response_bytes_in_flight: usize,
    /// `List*` pages built at once, server-wide (limit MAX_PAGES_IN_PROGRESS).
    #[arg(long, env = "LEDGER_MAX_PAGES_IN_PROGRESS", default_value_t = transport::MAX_PAGES_IN_PROGRESS)]
    max_pages_in_progress: usize,
    /// How often the expiry task looks for holds whose expiry time has passed (default
    /// HOLD_EXPIRY_POLL). Releases are recorded within HOLD_EXPIRY_LAG_MAX (1s) of the expiry
    /// time only while this stays at most half of it.
    #[arg(long, env = "LEDGER_HOLD_EXPIRY_POLL", default_value_t = Span(ledger_server::service::expiry::HOLD_EXPIRY_POLL))]
    hold_expiry_poll: Span,
    /// Connections to each standby of --replica-url, at most (limit REPLICA_POOL_SIZE).
    #[arg(long, env = "LEDGER_REPLICA_POOL_SIZE", default_value_t = REPLICA_POOL_SIZE)]
    replica_pool_size: usize,
    /// Longest a connection to a standby may take to open (limit REPLICA_CONNECT_TIMEOUT).
    #[arg(long, env = "LEDGER_REPLICA_CONNECT_TIMEOUT", default_value_t = Span(REPLICA_CONNECT_TIMEOUT))]
    replica_connect_timeout: Span,
    /// Longest a read waits for a free standby connection before the primary answers it
    /// (limit REPLICA_WAIT_TIMEOUT).
    #[arg(long, env = "LEDGER_REPLICA_WAIT_TIMEOUT", default_value_t = Span(REPLICA_WAIT_TIMEOUT))]
    replica_wait_timeout: Span,
    /// Longest a read may take on a standby before the primary answers it (limit
    /// REPLICA_READ_TIMEOUT).
    #[arg(long, env = "LEDGER_REPLICA_READ_TIMEOUT", default_value_t = Span(REPLICA_READ_TIMEOUT))]
    replica_read_timeout: Span,
    /// How often each standby's replay is sampled (limit REPLICA_PROBE_INTERVAL).
    #[arg(long, env = "LEDGER_REPLICA_PROBE_INTERVAL", default_value_t = Span(REPLICA_PROBE_INTERVAL))]
    replica_probe_interval: Span,
}

impl TuningArgs {
    /// The [`Tuning`] these knobs make, checked.
    pub fn tuning(&self) -> Result<Tuning, String> {
        let t = Tuning {
            pool: PoolTuning {
                size: self.pool_size,
                wait_timeout: self.pool_wait_timeout.0,
                connect_timeout: self.db_connect_timeout.0,
            },
            writer: WriterTuning {
                lanes: self.writer_lanes,
                batch_max: self.max_batch,
                queue_max: self.max_write_queue,
                batch_timeout: self.batch_timeout.0,
                max_lanes: self.max_writer_lanes,
                lane_idle: self.lane_idle_timeout.0,
            },
            accounts_cached_max: self.max_cached_accounts,
            drain_timeout: self.drain_timeout.0,
            transport: TransportLimits {
                max_connections: self.max_connections,
                max_concurrent_streams: self.max_concurrent_streams,
                handshake_timeout: self.handshake_timeout.0,
                idle_timeout: self.idle_timeout.0,
                request_timeout: self.request_timeout.0,
                response_send_timeout: self.response_send_timeout.0,
                response_bytes_in_flight: self.response_bytes_in_flight,
                max_pages_in_progress: self.max_pages_in_progress,
            },
            hold_expiry_poll: self.hold_expiry_poll.0,
            replicas: ReplicaTuning {
                pool_size: self.replica_pool_size,
                connect_timeout: self.replica_connect_timeout.0,
                wait_timeout: self.replica_wait_timeout.0,
                read_timeout: self.replica_read_timeout.0,
                probe_interval: self.replica_probe_interval.0,
            },
        };
        t.check()?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        tuning: TuningArgs,
    }

    #[test]
    fn the_knobs_come_from_their_flags_and_bad_ones_are_refused_by_name() {
        let t = Args::try_parse_from(["x"])
            .unwrap()
            .tuning
            .tuning()
            .unwrap();
        assert_eq!(t, Tuning::default(), "no flag: the named defaults");
        let args = [
            "x",
            "--handshake-timeout",
            "2s",
            "--response-send-timeout",
            "500ms",
            "--writer-lanes",
            "3",
            "--max-batch",
            "64",
            "--max-writer-lanes",
            "8",
            "--lane-idle-timeout",
            "2m",
            "--pool-size",
            "20",
        ];
        let t = Args::try_parse_from(args).unwrap().tuning.tuning().unwrap();
        assert_eq!(t.transport.handshake_timeout, Duration::from_secs(2));
        assert_eq!(
            t.transport.response_send_timeout,
            Duration::from_millis(500)
        );
        assert_eq!((t.writer.lanes, t.writer.batch_max), (3, 64));
        assert_eq!(t.writer.max_lanes, 8);
        assert_eq!(t.writer.lane_idle, Duration::from_secs(120));
        let bad = Args::try_parse_from(["x", "--max-writer-lanes", "1"]).unwrap();
        assert!(bad
            .tuning
            .tuning()
            .unwrap_err()
            .contains("MAX_WRITER_LANES (1)"));
        let bad = Args::try_parse_from(["x", "--max-writer-lanes", "16"]).unwrap();
        let why = bad.tuning.tuning().unwrap_err();
        assert!(
            why.contains("--pool-size") && why.contains("MAX_WRITER_LANES (16)"),
            "{why}"
        );
        assert!(Args::try_parse_from(["x", "--idle-timeout", "soon"]).is_err());
        let bad = Args::try_parse_from(["x", "--max-pages-in-progress", "0"]).unwrap();
        assert!(bad
            .tuning
            .tuning()
            .unwrap_err()
            .contains("MAX_PAGES_IN_PROGRESS"));
        let bad = Args::try_parse_from(["x", "--pool-size", "2"]).unwrap();
        assert!(bad.tuning.tuning().unwrap_err().contains("WRITER_LANES"));
    }
}
