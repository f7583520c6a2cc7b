//! The open-file limit: raised at start, the connection cap kept under it, and `accept`
//! failures that mean "no descriptor left" answered with a pause instead of a spin.

use super::{Shared, Warn, ACCEPT_BACKOFF, FILES_RESERVED};

/// Raises the soft `RLIMIT_NOFILE` to the hard one (the common soft default, 1,024, is far
/// below what a server needs); the soft limit in force afterwards.
pub(super) fn raise_open_file_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "cannot read the open-file limit; assuming 1024"
        );
        return 1024;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass it.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return lim.rlim_max;
        }
        // A hard limit of "unlimited" may be refused for NOFILE; the soft one stays.
    }
    lim.rlim_cur
}

/// How many connections fit: `max_connections`, or fewer so that the pool's sockets and
/// [`FILES_RESERVED`] descriptors stay free under `open_files`. An error when none fit.
pub fn connection_cap(
    max_connections: usize,
    open_files: u64,
    pool_size: usize,
) -> Result<usize, String> {
    let reserved = FILES_RESERVED + pool_size;
    let room = usize::try_from(open_files)
        .unwrap_or(usize::MAX)
        .saturating_sub(reserved);
    if room == 0 {
        return Err(format!(
            "the open-file limit of {open_files} leaves no descriptor for client connections after the {pool_size} of the database pool and FILES_RESERVED ({FILES_RESERVED}); raise it (`ulimit -n`)"
        ));
    }
    Ok(room.min(max_connections))
}

/// What a failed `accept` means for the loop.
#[derive(Debug, PartialEq, Eq)]
enum AcceptFailure {
    /// The process or the system is out of descriptors or memory: wait before retrying.
    OutOfResources,
    /// That one connection went away before it was accepted: carry on at once.
    PeerGone,
    /// Anything else: wait too, it may persist.
    Other,
}

fn classify(e: &std::io::Error) -> AcceptFailure {
    match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
            AcceptFailure::OutOfResources
        }
        Some(libc::ECONNABORTED | libc::ECONNRESET | libc::EPROTO | libc::EPERM) => {
            AcceptFailure::PeerGone
        }
        _ => AcceptFailure::Other,
    }
}

/// After a failed `accept`: a pause of [`ACCEPT_BACKOFF`] unless only that peer went away, and
/// a warning (at most one per `WARN_INTERVAL`) naming the limit that was hit.
pub(super) async fn after_accept_error(e: std::io::Error, shared: &Shared) {
    let failure = classify(&e);
    if failure == AcceptFailure::PeerGone {
        tracing::debug!(error = %e, "a connection went away before it was accepted");
        return;
    }
    if let Some(left_out) = shared.warn_due(Warn::AcceptFailed) {
        let why = match failure {
            AcceptFailure::OutOfResources => "out of file descriptors (limit RLIMIT_NOFILE)",
            _ => "unexpected error",
        };
        tracing::warn!(
            error = %e,
            left_out,
            "cannot accept connections: {why}; retrying every {ACCEPT_BACKOFF:?} (limit ACCEPT_BACKOFF)"
        );
    }
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_room_for_the_pool_and_the_reserve_under_the_file_limit() {
        assert_eq!(connection_cap(1024, 1_048_576, 16), Ok(1024));
        assert_eq!(
            connection_cap(1024, 1024, 16),
            Ok(1024 - 16 - FILES_RESERVED)
        );
        assert_eq!(connection_cap(1024, 256, 16), Ok(256 - 16 - FILES_RESERVED));
        assert_eq!(connection_cap(10, u64::MAX, 16), Ok(10));
        let e = connection_cap(1024, 64, 16).unwrap_err();
        assert!(
            e.contains("FILES_RESERVED") && e.contains("ulimit -n"),
            "{e}"
        );
    }

    #[test]
    fn out_of_descriptors_waits_and_a_vanished_peer_does_not() {
        let os = std::io::Error::from_raw_os_error;
        assert_eq!(classify(&os(libc::EMFILE)), AcceptFailure::OutOfResources);
        assert_eq!(classify(&os(libc::ENFILE)), AcceptFailure::OutOfResources);
        assert_eq!(classify(&os(libc::ECONNABORTED)), AcceptFailure::PeerGone);
        assert_eq!(classify(&os(libc::EINVAL)), AcceptFailure::Other);
    }
}
