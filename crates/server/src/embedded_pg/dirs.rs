//! The data directory and the socket directory: resolved, created, and, when the ledger
//! runs as root, checked for the server's user and handed over to it.

use super::os::{chown, euid};
use super::{io_err, EmbeddedPgError, RunAs, LOCK_FILE};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Resolves, creates and (as root) hands over the data directory; returns its canonical path.
pub(super) fn prepare_data_dir(
    data_dir: &Path,
    run_as: Option<&RunAs>,
) -> Result<PathBuf, EmbeddedPgError> {
    let absolute = if data_dir.is_absolute() {
        data_dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io_err("cannot read the current directory"))?
            .join(data_dir)
    };
    if let Some(user) = run_as {
        // Before creating anything: the parts of the path that exist already must let the
        // server's user through.
        check_traversable(&absolute, user)?;
    }
    fs::create_dir_all(&absolute).map_err(io_err(format!(
        "cannot create the data directory {}",
        absolute.display()
    )))?;
    let data_dir = fs::canonicalize(&absolute).map_err(io_err(format!(
        "cannot resolve the data directory {}",
        absolute.display()
    )))?;
    let meta = fs::metadata(&data_dir)
        .map_err(io_err(format!("cannot inspect {}", data_dir.display())))?;
    if !meta.is_dir() {
        return Err(EmbeddedPgError::DataDir(format!(
            "the data directory {} is not a directory",
            data_dir.display()
        )));
    }
    let Some(user) = run_as else {
        return Ok(data_dir);
    };

    check_traversable(&data_dir, user)?;
    if meta.uid() != user.uid {
        // Refuse to hand over a directory full of other things (say --data-dir /var/lib).
        let ours = ["pgdata", "postgres.log", LOCK_FILE];
        let foreign = fs::read_dir(&data_dir)
            .map_err(io_err(format!("cannot list {}", data_dir.display())))?
            .filter_map(Result::ok)
            .any(|entry| {
                !ours
                    .iter()
                    .any(|name| entry.file_name() == OsStr::new(name))
            });
        if foreign && !data_dir.join("pgdata").exists() {
            return Err(EmbeddedPgError::DataDir(format!(
                "the data directory {} is not empty and does not look like a ledger data \
                 directory; it would have to be handed over to the `{}` user. Choose a new or \
                 empty directory, e.g. --data-dir /var/lib/ledger",
                data_dir.display(),
                user.name
            )));
        }
        chown(&data_dir, user)?;
    }
    Ok(data_dir)
}

/// Checks that `user` can traverse every existing ancestor of `dir` (PostgreSQL runs as that
/// user).
fn check_traversable(dir: &Path, user: &RunAs) -> Result<(), EmbeddedPgError> {
    for ancestor in dir.ancestors().skip(1) {
        let meta = match fs::metadata(ancestor) {
            Ok(meta) => meta,
            // Will be created (by root, mode 0755).
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => {
                return Err(EmbeddedPgError::Io(
                    format!("cannot inspect {}", ancestor.display()),
                    err,
                ))
            }
        };
        let mode = meta.mode();
        // Only the primary group counts: std clears supplementary groups before setuid.
        let can_search = if meta.uid() == user.uid {
            mode & 0o100 != 0
        } else if meta.gid() == user.gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !can_search {
            return Err(EmbeddedPgError::DataDir(format!(
                "the data directory {} cannot be reached by the `{}` user that PostgreSQL runs \
                 as (PostgreSQL refuses to run as root): {} (mode {:04o}, owner uid {}) does \
                 not let it through. Choose a --data-dir under /var/lib or /tmp (e.g. \
                 /var/lib/ledger), or make {} traversable (chmod o+x)",
                dir.display(),
                user.name,
                ancestor.display(),
                mode & 0o7777,
                meta.uid(),
                ancestor.display()
            )));
        }
    }
    Ok(())
}

/// Creates the socket directory (mode 0700, owned by the server's user) or checks an existing
/// one.
pub(super) fn ensure_socket_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<(), EmbeddedPgError> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => {
            return Err(EmbeddedPgError::Io(
                format!("cannot create the socket directory {}", dir.display()),
                err,
            ))
        }
    }
    let meta =
        fs::symlink_metadata(dir).map_err(io_err(format!("cannot inspect {}", dir.display())))?;
    if !meta.is_dir() {
        return Err(EmbeddedPgError::DataDir(format!(
            "the socket directory {} exists but is not a directory; remove it",
            dir.display()
        )));
    }
    let owner = run_as.map_or_else(euid, |u| u.uid);
    if meta.uid() != owner {
        match run_as {
            Some(user) => chown(dir, user)?,
            None => {
                return Err(EmbeddedPgError::DataDir(format!(
                    "the socket directory {} belongs to uid {}, not to us; remove it",
                    dir.display(),
                    meta.uid()
                )))
            }
        }
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(io_err(format!("cannot chmod {}", dir.display())))
}
