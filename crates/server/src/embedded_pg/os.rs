//! What the embedded PostgreSQL asks of the operating system: the system user it runs as (a
//! passwd lookup), ownership of files, and the processes that work in a cluster directory
//! (found in `/proc`, signalled).

use super::{io_err, EmbeddedPgError};
use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The unprivileged system user that PostgreSQL runs as when we are root.
#[derive(Debug, Clone)]
pub(super) struct RunAs {
    pub(super) name: String,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) home: PathBuf,
}

/// Looks a system user up by name.
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
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
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
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&pid| process_alive(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    pids.len()
}
