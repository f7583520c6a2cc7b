//! The database a command uses: the URL it was given, or the embedded PostgreSQL of its data
//! directory (started for it, or, for `check` and `migrate`, the running server's).

use super::args::{set, DbArgs};
use ledger_server::embedded_pg::{EmbeddedPg, EmbeddedPgError, PgOptions};
use ledger_server::BoxError;
use std::io::Write as _;

/// Whether a command may use the embedded PostgreSQL of a data directory another process
/// holds (see [`database`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holding {
    /// Only its own: `serve` refuses a data directory in use.
    Exclusive,
    /// Its own, or the holder's as a client (`check`, `migrate`), leaving it running.
    OrBorrow,
}

/// The database to use: the given URL, or the embedded PostgreSQL started now (stopped when
/// the returned guard drops), or, for [`Holding::OrBorrow`], the running one of the process
/// holding the data directory (no guard: it is not ours to stop).
pub(super) async fn database(
    db: &DbArgs,
    command: &str,
    holding: Holding,
) -> Result<(String, Option<EmbeddedPg>), BoxError> {
    if let Some(url) = set(db.database_url.clone()) {
        return Ok((url, None));
    }
    let opts = PgOptions {
        data_dir: db.data_dir.clone(),
        fast_unsafe: false,
        port: 5432,
        holder: format!("ledger {command}"),
        bin_dir: db.pg_bin.clone(),
    };
    match tokio::task::spawn_blocking(move || EmbeddedPg::start(opts)).await? {
        Ok(pg) => {
            tracing::info!(data_dir = %db.data_dir.display(), "using the embedded PostgreSQL");
            Ok((pg.connection_string("ledger"), Some(pg)))
        }
        Err(EmbeddedPgError::InUse(in_use)) if holding == Holding::OrBorrow => {
            let url = in_use.connection_string("ledger");
            let _ = writeln!(
                std::io::stderr(),
                "ledger: using the PostgreSQL of the running {} in {}; it stays running \
                 (the same as --database-url '{url}')",
                in_use.who(),
                in_use.data_dir.display()
            );
            Ok((url, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// Stops the embedded PostgreSQL, if this command started one (it stops last).
pub(super) async fn stop_embedded(pg: Option<EmbeddedPg>) -> Result<(), BoxError> {
    if let Some(mut pg) = pg {
        tokio::task::spawn_blocking(move || pg.stop()).await??;
    }
    Ok(())
}
