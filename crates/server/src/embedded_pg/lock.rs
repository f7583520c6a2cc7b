//! The data directory's lock: an exclusive `flock` on its [`LOCK_FILE`], held by the one
//! process that may start and stop its PostgreSQL, with that process's record (pid, command,
//! port); another process finds the directory [`InUse`].

use super::os::{process_alive, try_lock_exclusive};
use super::{
    connection_string, io_err, DataDirLock, EmbeddedPg, EmbeddedPgError, LOCK_FILE, PG_USER,
};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest wait, for a process that found a data directory locked, for the holder to record
/// its pid (it does so right after taking the lock).
const HOLDER_RECORD_WAIT: Duration = Duration::from_secs(2);

/// A data directory another live process holds: its PostgreSQL is that process's to start and
/// stop. What it is, and how to reach its PostgreSQL as a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InUse {
    /// The data directory (canonical).
    pub data_dir: PathBuf,
    /// The holder's pid, when it could be read from the lock file.
    pub pid: Option<i32>,
    /// The holder's command as it recorded it, e.g. `ledger serve`.
    pub holder: String,
    socket_dir: PathBuf,
    port: u16,
}

impl InUse {
    /// A connection string of the holder's PostgreSQL for database `dbname`, as the superuser
    /// (the same as [`EmbeddedPg::connection_string`] gives the holder).
    pub fn connection_string(&self, dbname: &str) -> String {
        connection_string(&self.socket_dir, self.port, PG_USER, dbname)
    }

    /// `` `ledger serve` (pid 123) ``, or without a pid when it could not be read.
    pub fn who(&self) -> String {
        match self.pid {
            Some(pid) => format!("`{}` (pid {pid})", self.holder),
            None => format!("`{}` (pid unknown)", self.holder),
        }
    }
}

impl fmt::Display for InUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the data directory {} is in use by {}; stop it or choose another --data-dir",
            self.data_dir.display(),
            self.who()
        )
    }
}

/// Takes the data directory's lock and records `pid`, `holder` and `port` in it, one a line;
/// [`EmbeddedPgError::InUse`] when a live process holds it.
pub(super) fn lock_data_dir(
    data_dir: &Path,
    holder: &str,
    port: u16,
) -> Result<DataDirLock, EmbeddedPgError> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let path = data_dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .map_err(io_err(format!(
            "cannot open the lock file {}",
            path.display()
        )))?;
    let locked =
        try_lock_exclusive(&file).map_err(io_err(format!("cannot lock {}", path.display())))?;
    if !locked {
        return Err(EmbeddedPgError::InUse(read_holder(data_dir, &path, port)));
    }
    let record = format!("{}\n{holder}\n{port}\n", std::process::id());
    file.set_len(0)
        .and_then(|()| file.write_all_at(record.as_bytes(), 0))
        .map_err(io_err(format!(
            "cannot write the lock file {}",
            path.display()
        )))?;
    Ok(DataDirLock { _file: file })
}

/// Who holds the lock file at `path`. The holder writes its record just after taking the
/// lock, so a record that names no live process is read again (at most
/// [`HOLDER_RECORD_WAIT`]).
fn read_holder(data_dir: &Path, path: &Path, default_port: u16) -> InUse {
    let deadline = Instant::now() + HOLDER_RECORD_WAIT;
    let record = loop {
        let record = fs::read_to_string(path)
            .ok()
            .and_then(|text| parse_lock_record(&text));
        let live = record
            .as_ref()
            .is_some_and(|(pid, _, _)| process_alive(*pid));
        if live || Instant::now() >= deadline {
            break record.filter(|_| live);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (pid, holder, port) = match record {
        Some((pid, holder, port)) => (Some(pid), holder, port),
        None => (None, "another process".to_owned(), default_port),
    };
    InUse {
        data_dir: data_dir.to_path_buf(),
        pid,
        holder,
        socket_dir: EmbeddedPg::socket_dir_for(data_dir),
        port,
    }
}

/// The pid, command and port of a lock file's text (`<pid>\n<command>\n<port>\n`).
fn parse_lock_record(text: &str) -> Option<(i32, String, u16)> {
    let mut lines = text.lines();
    let pid = lines
        .next()?
        .trim()
        .parse::<i32>()
        .ok()
        .filter(|&p| p > 0)?;
    let holder = lines.next()?.trim().to_owned();
    let port = lines.next()?.trim().parse::<u16>().ok()?;
    (!holder.is_empty()).then_some((pid, holder, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_record_names_pid_command_and_port_or_nothing() {
        assert_eq!(
            parse_lock_record("123\nledger serve\n5432\n"),
            Some((123, "ledger serve".to_owned(), 5432))
        );
        for torn in [
            "",
            "123\n",
            "123\nledger serve\n",
            "x\nledger\n5432\n",
            "0\na\n1\n",
        ] {
            assert_eq!(parse_lock_record(torn), None, "{torn:?}");
        }
    }
}
