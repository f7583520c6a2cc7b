//! The architecture's boundaries, checked on the source (as rust-analyzer's tidy tests do):
//! only storage speaks to the database driver; the domain knows nothing of async, transport
//! or SQL; configuration comes from the command line, not from the environment read here and
//! there; the journal is written by the writer's batch alone (and by the fixtures allowed by
//! name below).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, relative to the crate (`src/storage/mod.rs`).
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The code lines of a file (comment lines dropped), numbered from 1.
fn code(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
}

/// `file:line: text` of every code line of the files that `scope` selects that contains one
/// of `needles`, unless the file is in `allowed`.
fn offences(
    scope: impl Fn(&str) -> bool,
    needles: &[&str],
    allowed: &[(&str, &str)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (file, text) in sources() {
        if !scope(&file)
            || allowed
                .iter()
                .any(|(a, _)| file == *a || file.starts_with(&format!("{a}/")))
        {
            continue;
        }
        for (n, line) in code(&text) {
            if needles.iter().any(|needle| line.contains(needle)) {
                out.push(format!("{file}:{n}: {}", line.trim()));
            }
        }
    }
    out
}

#[test]
fn only_storage_and_the_embedded_postgresql_speak_to_the_database_driver() {
    let bad = offences(
        |f| f.starts_with("src/"),
        &["tokio_postgres", "deadpool"],
        &[
            ("src/storage", "the only SQL"),
            ("src/embedded_pg.rs", "creates the database it starts"),
        ],
    );
    assert!(
        bad.is_empty(),
        "the driver outside storage:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_domain_knows_nothing_of_async_transport_or_sql() {
    let bad = offences(
        |f| f.starts_with("src/domain/"),
        &[
            "tokio",
            "tonic",
            "hyper",
            "async fn",
            ".await",
            "SELECT ",
            "INSERT INTO",
            "DELETE FROM",
            "crate::storage",
            "crate::grpc",
        ],
        &[],
    );
    assert!(
        bad.is_empty(),
        "the domain reaches out:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_environment_is_read_only_by_the_command_line() {
    let bad = offences(
        |f| f.starts_with("src/") && !f.starts_with("src/cli/"),
        &["env::var", "env::vars"],
        &[
            (
                "src/embedded_pg.rs",
                "PATH: where a program is found, as any program finds one",
            ),
            (
                "src/domain/write/model.rs",
                "a test's case count (LEDGER_MODEL_CASES)",
            ),
        ],
    );
    assert!(
        bad.is_empty(),
        "the environment read outside the command line:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_journal_is_written_only_by_the_writers_batch_and_the_fixtures_named_here() {
    let tables = [
        "postings",
        "entries",
        "idempotency_keys",
        "rejections",
        "account_totals",
        "ledger_state",
        "accounts",
        "outbox ",
    ];
    let needles: Vec<String> = tables
        .iter()
        .flat_map(|t| {
            [
                format!("INSERT INTO {}", t.trim()),
                format!("UPDATE {t}"),
                format!("DELETE FROM {t}"),
            ]
        })
        .collect();
    let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
    let bad = offences(
        |f| f.starts_with("src/"),
        &needles,
        &[
            (
                "src/storage/batch",
                "the writer's batch: the claim (load) and the plan (write)",
            ),
            (
                "src/storage/accounts.rs",
                "CreateAccount: the account and its zero totals",
            ),
            (
                "src/storage/outbox.rs",
                "the publisher's progress and retention of delivered rows",
            ),
            (
                "src/storage/fixture.rs",
                "bench-as-of's year of history, which the writer cannot record",
            ),
        ],
    );
    assert!(
        bad.is_empty(),
        "the journal written elsewhere:\n{}",
        bad.join("\n")
    );
}

/// The checks above would pass on nothing: they must see the code they guard.
#[test]
fn the_tidy_checks_see_the_code_they_guard() {
    let files = sources();
    let has = |file: &str, needle: &str| {
        files
            .iter()
            .any(|(f, t)| f == file && code(t).any(|(_, l)| l.contains(needle)))
    };
    assert!(has("src/storage/mod.rs", "tokio_postgres"));
    assert!(has("src/storage/batch/write.rs", "INSERT INTO postings"));
    assert!(has("src/cli/mod.rs", "env::var"));
    assert!(files.iter().any(|(f, _)| f.starts_with("src/domain/")));
}
