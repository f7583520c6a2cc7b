//! What the embedded PostgreSQL asks of the operating system: the system user it runs as (a
//! passwd lookup), ownership of files, the data directory's `flock`, and the processes that
//! work in a cluster directory (found in `/proc`, signalled).
//!
//! Every call of the embedded PostgreSQL that std does not wrap is here. They go through
//! `rustix`, safe wrappers of the same system calls (`geteuid`, `flock`, `kill`), except the
//! one `rustix` does not have: looking a user up in the system's user database (`getpwnam_r`
//! of the C library, which reads `/etc/passwd` or whatever NSS is configured with), the only
//! `unsafe` code of the embedded PostgreSQL.

use super::{io_err, EmbeddedPgError, RunAs};
use rustix::io::Errno;
use rustix::process::{Pid, Signal};
use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// This process's effective user id (`geteuid`).
pub(super) fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Takes an exclusive `flock` on `file` without waiting (`LOCK_EX | LOCK_NB`): `Ok(true)` when
/// taken, `Ok(false)` when another open file description holds it (`EWOULDBLOCK`).
pub(super) fn try_lock_exclusive(file: &fs::File) -> io::Result<bool> {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(Errno::WOULDBLOCK) => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Looks a system user up by name (`getpwnam_r`: `rustix` has no user database).
pub(super) fn lookup_user(name: &str) -> Result<Option<RunAs>, EmbeddedPgError> {
    let c_name = CString::new(name)
        .map_err(|_| EmbeddedPgError::UserNotFound(format!("invalid user name {name:?}")))?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: all pointers are valid for the call; `buf` outlives the use of `pwd`'s
        // string fields below.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1024 * 1024 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 {
            return Err(EmbeddedPgError::Io(
                format!("cannot look up the system user {name}"),
                io::Error::from_raw_os_error(rc),
            ));
        }
        if result.is_null() {
            return Ok(None);
        }
        let home = if pwd.pw_dir.is_null() {
            PathBuf::from("/")
        } else {
            // SAFETY: getpwnam_r succeeded, so pw_dir points to a C string inside `buf`.
            let dir = unsafe { CStr::from_ptr(pwd.pw_dir) };
            PathBuf::from(OsStr::from_bytes(dir.to_bytes()))
        };
        return Ok(Some(RunAs {
            name: name.to_owned(),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            home,
        }));
    }
}

/// Gives `path` (not following a symlink) to `user`.
pub(super) fn chown(path: &Path, user: &RunAs) -> Result<(), EmbeddedPgError> {
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid)).map_err(io_err(format!(
        "cannot give {} to the `{}` user",
        path.display(),
        user.name
    )))
}

/// Whether process `pid` exists and is not a zombie.
pub(super) fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let exists = matches!(probe(pid), Ok(()) | Err(Errno::PERM));
    if !exists {
        return false;
    }
    // Killed postmasters are not always reaped (their parent is init); a zombie is dead.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Whether `pid` runs a `postgres` executable with `dir` as its working directory (every
/// PostgreSQL server process works in its cluster directory).
pub(super) fn is_postgres_in(pid: i32, dir: &Path) -> bool {
    let cwd = fs::read_link(format!("/proc/{pid}/cwd"));
    let exe = fs::read_link(format!("/proc/{pid}/exe"));
    match (cwd, exe) {
        (Ok(cwd), Ok(exe)) => {
            cwd == dir
                && exe
                    .file_name()
                    .is_some_and(|name| name.as_bytes().starts_with(b"postgres"))
        }
        _ => false,
    }
}

/// The live postgres processes working in `dir`.
pub(super) fn processes_in(dir: &Path) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| process_alive(pid) && is_postgres_in(pid, dir))
        .collect()
}

/// SIGKILLs every live postgres process working in `dir` and waits (up to 5 s) for them to go.
/// Returns how many there were.
pub(super) fn kill_processes_in(dir: &Path) -> usize {
    let pids = processes_in(dir);
    for &pid in &pids {
        send(pid, Signal::KILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&pid| process_alive(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    pids.len()
}

/// Whether a signal could be sent to `pid` (`kill(pid, 0)` succeeds): it exists, be it a
/// zombie or an unrelated process with a reused pid, and we may signal it.
pub(super) fn may_signal(pid: i32) -> bool {
    probe(pid).is_ok()
}

/// Sends `SIGCONT` to `pid` (a postmaster a fault test stopped with `SIGSTOP` could not act on
/// what we ask of it next); an error is ignored, as the process may be gone.
pub(super) fn resume(pid: i32) {
    send(pid, Signal::CONT);
}

/// `kill(pid, 0)`: `Ok` when a signal could be sent to `pid`, `PERM` when it exists but is not
/// ours to signal, `SRCH` when there is no such process.
fn probe(pid: i32) -> Result<(), Errno> {
    rustix::process::test_kill_process(one_process(pid)?)
}

/// `kill(pid, signal)`, the error ignored (the process may be gone).
fn send(pid: i32, signal: Signal) {
    if let Ok(pid) = one_process(pid) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// `pid` as one process: 0 and below name none (`kill` would signal a process group); every
/// pid here comes from `/proc` or a lock file, which name positive ones.
fn one_process(pid: i32) -> Result<Pid, Errno> {
    let one = if pid > 0 { Pid::from_raw(pid) } else { None };
    one.ok_or(Errno::SRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flock_held_through_one_open_file_refuses_another_until_that_one_is_closed() {
        let path = std::env::temp_dir().join(format!("ledger-os-flock-{}", std::process::id()));
        let open = || {
            fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap()
        };
        let first = open();
        assert!(try_lock_exclusive(&first).unwrap());
        let second = open();
        assert!(!try_lock_exclusive(&second).unwrap(), "held by the first");
        drop(first);
        // A process another test forks at this moment holds a copy of `first` until it execs
        // (the file is close-on-exec), so the lock is free once that copy is gone too: at
        // once, or within a moment (this test failed in CI taking it at once).
        let released = (0..200).any(|_| {
            let free = try_lock_exclusive(&second).unwrap();
            if !free {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            free
        });
        assert!(released, "released on close");
        let _ = fs::remove_file(&path);
    }

    #[test]
    fn a_zombie_may_be_signalled_but_is_not_alive_and_no_pid_names_a_group() {
        let me = std::process::id() as i32;
        assert!(may_signal(me) && process_alive(me));
        for none in [0, -1, -me] {
            assert!(!may_signal(none) && !process_alive(none), "{none}");
        }
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Not reaped yet: a zombie once it exited.
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(may_signal(pid) && !process_alive(pid));
        child.wait().unwrap();
    }
}
