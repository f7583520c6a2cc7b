//! A call's deadline: the client's `grpc-timeout`, at most the server's `REQUEST_TIMEOUT`.
//! Pure: the header's grammar and the error a passed deadline is. The transport applies it to
//! every call, of every service (as tonic's server did, but answering `DEADLINE_EXCEEDED`
//! with the contract's `ErrorInfo`, mapped by the layer above, instead of `CANCELLED`).

use super::error::TransportError;
use std::time::Duration;

/// How long a call may take, and who set that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    pub after: Duration,
    /// The client's `grpc-timeout` (else the server's REQUEST_TIMEOUT).
    pub by_client: bool,
}

impl Deadline {
    /// The deadline of a call with this `grpc-timeout` header (if any) on a server whose
    /// limit is `request_timeout`; a malformed header is refused, naming the grammar.
    pub fn of(
        header: Option<&[u8]>,
        request_timeout: Duration,
    ) -> Result<Deadline, TransportError> {
        let client = header
            .map(parse_grpc_timeout)
            .transpose()
            .map_err(TransportError::MalformedTimeout)?;
        Ok(match client {
            Some(t) if t < request_timeout => Deadline {
                after: t,
                by_client: true,
            },
            _ => Deadline {
                after: request_timeout,
                by_client: false,
            },
        })
    }

    /// The error once the deadline passed.
    pub fn exceeded(&self) -> TransportError {
        TransportError::DeadlineExceeded(*self)
    }
}

/// Parses a `grpc-timeout` value: 1 to 8 digits and a unit, `H` `M` `S` `m` `u` `n`
/// (gRPC over HTTP/2: "TimeoutValue → {positive integer as ASCII string of at most 8 digits}").
pub fn parse_grpc_timeout(v: &[u8]) -> Result<Duration, String> {
    let bad = || {
        format!(
            "the grpc-timeout header {:?} is not 1 to 8 digits followed by a unit (H, M, S, m, u, n)",
            String::from_utf8_lossy(v)
        )
    };
    let (&unit, digits) = v.split_last().ok_or_else(bad)?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    // At most 8 digits: no overflow below.
    let n: u64 = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or_else(bad)?;
    Ok(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_malformed_ones_are_refused() {
        let ok = |s: &str| parse_grpc_timeout(s.as_bytes()).unwrap();
        assert_eq!(ok("2H"), Duration::from_secs(7200));
        assert_eq!(ok("3M"), Duration::from_secs(180));
        assert_eq!(ok("10S"), Duration::from_secs(10));
        assert_eq!(ok("2m"), Duration::from_millis(2));
        assert_eq!(ok("99999999u"), Duration::from_micros(99_999_999));
        assert_eq!(ok("0n"), Duration::ZERO);
        for bad in [
            "",
            "m",
            "5",
            "123456789m",
            "5x",
            "-5m",
            "5 m",
            "1.5S",
            "５m",
        ] {
            let e = parse_grpc_timeout(bad.as_bytes()).unwrap_err();
            assert!(e.contains("grpc-timeout"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_shorter_of_the_clients_timeout_and_the_servers_limit_applies() {
        let server = Duration::from_secs(15);
        let d = Deadline::of(Some(b"200m"), server).unwrap();
        assert_eq!((d.after, d.by_client), (Duration::from_millis(200), true));
        let d = Deadline::of(Some(b"1M"), server).unwrap();
        assert_eq!((d.after, d.by_client), (server, false));
        let d = Deadline::of(None, server).unwrap();
        assert_eq!((d.after, d.by_client), (server, false));
        let e = Deadline::of(Some(b"soon"), server).unwrap_err();
        assert!(
            matches!(&e, TransportError::MalformedTimeout(why) if why.contains("grpc-timeout")),
            "{e:?}"
        );
    }
}
