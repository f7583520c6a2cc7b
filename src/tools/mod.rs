//! The client tools: commands that talk to a running ledger over gRPC like any other caller
//! (`account`, `post`, `void`, `posting`, `balance`, `ledgers`, `report`, `bench`), built on
//! `ledger-client`. They share one set of connection options ([`ClientArgs`]: the server's
//! address, a bearer token, TLS), the ledger they work on ([`LedgerArg`]: `--ledger`), one way
//! of reading and printing times (RFC 3339), and one error type that keeps the server's
//! reason and the cause chain.

pub mod bench;
pub mod bench_asof;
pub mod bench_decide;
pub mod bench_finance;
pub mod bench_writer;
pub mod commands;
pub mod output;
pub mod post_file;
pub mod reconcile;
pub mod report;

use ledger_client::{ConnectOptions, RawClient};
use std::path::PathBuf;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// How a client tool reaches the server.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// The ledger server: host:port (as grpcurl takes it) or an http:// or https:// URL.
    #[arg(long, env = "LEDGER_SERVER", default_value = "127.0.0.1:50051")]
    pub server: String,
    /// Bearer token, for a server started with --auth-tokens.
    #[arg(long, env = "LEDGER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificate (PEM) to check the server's certificate against: turns TLS on.
    #[arg(long, env = "LEDGER_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Client certificate chain (PEM) for mutual TLS (with --client-key).
    #[arg(long, env = "LEDGER_CLIENT_CERT", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "LEDGER_CLIENT_KEY",
        requires = "client_cert",
        hide_env_values = true
    )]
    pub client_key: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the host of --server).
    #[arg(long, env = "LEDGER_TLS_DOMAIN")]
    pub tls_domain: Option<String>,
}

/// The ledger a client command works on.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LedgerArg {
    /// The ledger (1..64 characters of a-z 0-9 _ -) whose accounts and postings the command
    /// reads and writes; `ledger ledgers list` shows them. Default (and empty): `default`.
    #[arg(long = "ledger", env = "LEDGER_LEDGER", value_name = "CODE", value_parser = parse_ledger)]
    pub ledger: Option<String>,
}

impl LedgerArg {
    /// The ledger's code (`default` when none is given).
    pub fn code(&self) -> String {
        self.given()
            .unwrap_or(ledger_core::ledger::DEFAULT_LEDGER)
            .to_owned()
    }

    /// The ledger given by `--ledger` or `LEDGER_LEDGER`, if one is (an empty one is none).
    pub fn given(&self) -> Option<&str> {
        self.ledger.as_deref().filter(|l| !l.is_empty())
    }
}

/// A ledger code from the command line, checked as the ledger checks it (empty: none given).
pub fn parse_ledger(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Ok(String::new());
    }
    ledger_core::ledger::validate_ledger_code(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.message)
}

/// A ledger code that must be given (an argument naming a ledger).
pub fn parse_ledger_code(s: &str) -> Result<String, String> {
    ledger_core::ledger::validate_ledger_code(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.message)
}

/// An empty value (`LEDGER_TOKEN=`) means "not set".
fn set<T: AsRef<std::ffi::OsStr>>(v: &Option<T>) -> Option<&T> {
    v.as_ref().filter(|s| !s.as_ref().is_empty())
}

fn read(what: &str, path: &std::path::Path) -> Result<Vec<u8>, ToolError> {
    std::fs::read(path)
        .map_err(|e| ToolError(format!("cannot read the {what} {}: {e}", path.display())))
}

impl ClientArgs {
    /// The connection options, with the certificate files read.
    pub fn options(&self) -> Result<ConnectOptions, ToolError> {
        let identity = match (set(&self.client_cert), set(&self.client_key)) {
            (Some(c), Some(k)) => Some((read("client certificate", c)?, read("client key", k)?)),
            _ => None,
        };
        Ok(ConnectOptions {
            server: self.server.clone(),
            token: set(&self.token).cloned(),
            ca_cert: set(&self.ca_cert)
                .map(|p| read("CA certificate", p))
                .transpose()?,
            client_identity: identity,
            tls_domain: set(&self.tls_domain).cloned(),
        })
    }

    /// Connects to the server.
    pub async fn connect(&self) -> Result<RawClient, ToolError> {
        ledger_client::connect(&self.options()?)
            .await
            .map_err(ToolError::from)
    }
}

/// A failure of a client tool, for a person: what went wrong with its cause, or the server's
/// answer (its code, reason and message).
#[derive(Debug)]
pub struct ToolError(pub String);

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ToolError {}

impl From<ledger_client::Error> for ToolError {
    fn from(e: ledger_client::Error) -> ToolError {
        ToolError(e.to_string())
    }
}

impl From<tonic::Status> for ToolError {
    fn from(s: tonic::Status) -> ToolError {
        let e = ledger_client::Error::from_status(&s);
        use tonic::Code::{Cancelled, Unavailable, Unknown};
        match e.kind {
            // The connection broke before the ledger answered (its display starts with the
            // code already).
            ledger_client::ErrorKind::Transport(Unknown | Cancelled | Unavailable) => {
                ToolError(format!("{e} ({NO_ANSWER_HINT})"))
            }
            ledger_client::ErrorKind::Transport(_) => ToolError(e.to_string()),
            _ => ToolError(format!("{:?} {e}", s.code())),
        }
    }
}

/// What to check when the connection broke before the ledger answered.
const NO_ANSWER_HINT: &str = "no answer from the ledger: check that it runs at --server, that \
    --ca-cert matches its certificate, and, if it requires mutual TLS, give --client-cert and \
    --client-key";

/// The forms [`parse_time`] accepts, for its messages.
pub const TIME_FORMS: &str =
    "RFC 3339 (2026-12-31T23:59:59Z, 2026-12-31T23:59:59.5+01:00) or a date alone (2026-12-31: the start of that day, UTC)";

/// A time from the command line: RFC 3339, or a date alone as the start of that day (UTC).
pub fn parse_time(s: &str) -> Result<OffsetDateTime, String> {
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Ok(t);
    }
    let date = time::macros::format_description!("[year]-[month]-[day]");
    match time::Date::parse(s, &date) {
        Ok(d) => Ok(d.midnight().assume_utc()),
        Err(_) => Err(format!("{s:?} is not a time; give {TIME_FORMS}")),
    }
}

/// The last instant of a day (`YYYY-MM-DD`, UTC) to the ledger's microsecond: what "the end
/// of November 30" means as a cut-off (a date alone is its start).
pub fn parse_day_end(s: &str) -> Result<OffsetDateTime, String> {
    let date = time::macros::format_description!("[year]-[month]-[day]");
    let d = time::Date::parse(s, &date).map_err(|_| {
        format!("{s:?} is not a day; give YYYY-MM-DD (its last instant, UTC, is the cut-off)")
    })?;
    let next = d
        .next_day()
        .ok_or_else(|| format!("{s:?} is the last day a cut-off can name; give a time"))?;
    Ok(next.midnight().assume_utc() - time::Duration::microseconds(1))
}

/// A time as people read it in messages and tables: RFC 3339.
pub fn show_time(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// A time from `ledger-client` in RFC 3339.
pub fn show_system_time(t: std::time::SystemTime) -> String {
    show_time(OffsetDateTime::from(t))
}

/// A protobuf timestamp in RFC 3339 (empty when absent).
pub fn show_ts(t: &Option<prost_types::Timestamp>) -> String {
    let Some(ts) = t else { return String::new() };
    ledger_server::grpc::convert::time_from_pb("time", ts)
        .map(show_time)
        .unwrap_or_else(|_| format!("{}s", ts.seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_is_checked_as_the_ledger_checks_it_and_empty_or_absent_is_default() {
        assert_eq!(parse_ledger("acme").unwrap(), "acme");
        assert_eq!(parse_ledger("").unwrap(), "");
        for bad in ["Acme", "a b", &"x".repeat(65)] {
            let e = parse_ledger(bad).unwrap_err();
            assert!(e.contains("MAX_LEDGER_CODE_CHARS"), "{e}");
            assert!(parse_ledger_code(bad).is_err());
        }
        assert!(parse_ledger_code("").is_err());
        let arg = |l: Option<&str>| LedgerArg {
            ledger: l.map(str::to_owned),
        };
        assert_eq!(arg(None).code(), "default");
        assert_eq!(arg(Some("")).code(), "default");
        assert_eq!(arg(Some("")).given(), None);
        assert_eq!(arg(Some("acme")).code(), "acme");
    }

    #[test]
    fn times_are_rfc_3339_or_a_date_alone_at_midnight_utc() {
        let t = parse_time("2026-12-01").unwrap();
        assert_eq!(show_time(t), "2026-12-01T00:00:00Z");
        let t = parse_time("2026-12-31T23:59:59.5+01:00").unwrap();
        assert_eq!(show_time(t), "2026-12-31T23:59:59.5+01:00");
        for bad in [
            "2026-13-01",
            "yesterday",
            "2026-12-01 10:00",
            "2026-12-01T10:00:00",
        ] {
            let e = parse_time(bad).unwrap_err();
            assert!(e.contains("RFC 3339") && e.contains("a date alone"), "{e}");
        }
    }
}
