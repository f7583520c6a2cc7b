//! The architecture's boundaries, checked on the source (as rust-analyzer's tidy tests do):
//! only storage speaks to the database driver; the domain knows nothing of async, transport
//! or SQL; configuration comes from the command line, not from the environment read here and
//! there; the journal is written by the writer's batch alone (and by the fixtures allowed by
//! name below); a panic in a release build aborts; no reason is written as a string (the
//! proto's `enum ErrorReason` is the one list). And `ARCHITECTURE.md` stays short and
//! true: at most [`ARCHITECTURE_MAX_LINES`] lines, every invariant names its tests, and every
//! test it names exists.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, appended to `out`.
pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `.rs` file under `src/` and the crates' `src/`, relative to the workspace
/// (`crates/server/src/storage/mod.rs`).
pub(crate) fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    for krate in ["core", "server", "client"] {
        walk(&root.join("crates").join(krate).join("src"), &mut files);
    }
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
pub(crate) fn code(text: &str) -> impl Iterator<Item = (usize, &str)> {
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
        |f| !f.starts_with("crates/client/"),
        &["tokio_postgres", "deadpool"],
        &[
            ("crates/server/src/storage", "the only SQL"),
            (
                "crates/server/src/embedded_pg",
                "creates the database it starts",
            ),
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
        |f| f.starts_with("crates/core/src/"),
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
        |f| !f.starts_with("src/cli/"),
        &["env::var", "env::vars"],
        &[
            (
                "crates/server/src/embedded_pg",
                "PATH: where a program is found, as any program finds one",
            ),
            (
                "crates/core/src/write/model.rs",
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
        "account_terms",
        "outbox ",
        "posting_hashes",
        "period_closes",
        "period_close_balances",
        "period_close_trial_balances",
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
        |f| !f.starts_with("crates/client/"),
        &needles,
        &[
            (
                "crates/server/src/storage/batch",
                "the writer's batch: the claim (load) and the plan (write)",
            ),
            (
                "crates/server/src/storage/accounts.rs",
                "CreateAccount: the account and its zero totals",
            ),
            (
                "crates/server/src/storage/terms.rs",
                "CreateAccount: the account's version 1, in its transaction",
            ),
            (
                "crates/server/src/storage/ledgers.rs",
                "CreateLedger: the ledger's state row and outbox progress",
            ),
            (
                "crates/server/src/storage/outbox.rs",
                "the publisher's progress and retention of delivered rows",
            ),
            (
                "crates/server/src/storage/fixture.rs",
                "bench-as-of's year of history, which the writer cannot record",
            ),
            (
                "crates/server/src/storage/journal.rs",
                "migrate's hashing of a journal recorded before hashing, under the ledger's lock",
            ),
            (
                "crates/server/src/storage/closes.rs",
                "a close's trial balance, recorded once after the close commits",
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
    assert!(has("crates/server/src/storage/mod.rs", "tokio_postgres"));
    assert!(has(
        "crates/server/src/storage/batch/write.rs",
        "INSERT INTO postings"
    ));
    assert!(has("src/cli/mod.rs", "env::var"));
    assert!(files.iter().any(|(f, _)| f.starts_with("crates/core/src/")));
}

/// The release profile aborts on a panic, so a broken invariant the writer asserts before a
/// write (`Plan::assert_sound`) stops the process instead of unwinding into a task that
/// might carry on.
#[test]
fn a_panic_in_a_release_build_aborts_the_process() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let release: Vec<&str> = manifest
        .lines()
        .skip_while(|l| l.trim() != "[profile.release]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::trim)
        .collect();
    assert!(
        release.contains(&r#"panic = "abort""#),
        "Cargo.toml's [profile.release] must say panic = \"abort\"; it has: {release:?}"
    );
}

/// The code lines of a file outside its `#[cfg(test)] mod … { … }` blocks, numbered from 1.
pub(crate) fn production_code(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = code(text).peekable();
    while let Some((n, line)) = lines.next() {
        let test_mod = line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|(_, next)| {
                next.trim_start().starts_with("mod ") && next.ends_with('{')
            });
        if !test_mod {
            out.push((n, line));
            continue;
        }
        let (_, header) = lines.next().unwrap();
        let indent = &header[..header.len() - header.trim_start().len()];
        let close = format!("{indent}}}");
        lines.by_ref().find(|(_, l)| *l == close);
    }
    out
}

/// `file:line: text` of every production code line of a file that writes a reason's name as a
/// string, unless `allowed` names that file and reason.
fn reason_literals(file: &str, text: &str, allowed: &[(&str, &str, &str)]) -> Vec<String> {
    let names = ledger_core::error::ALL_REASONS.iter().map(|r| r.as_str());
    let quoted: Vec<(&str, String)> = names.map(|n| (n, format!("\"{n}\""))).collect();
    let mut out = Vec::new();
    for (n, line) in production_code(text) {
        let hit = quoted.iter().any(|(name, q)| {
            line.contains(q.as_str()) && !allowed.iter().any(|(f, a, _)| *f == file && a == name)
        });
        if hit {
            out.push(format!("{file}:{n}: {}", line.trim()));
        }
    }
    out
}

/// The reasons are one enum of the contract (`enum ErrorReason`,
/// `proto/ledger/v1/error_reason.proto`), generated for the core (its build.rs) and the
/// client (prost): no list of reason strings is written in Rust again. A reason's name as a
/// string literal is allowed in test code, and where it names something else.
#[test]
fn no_reason_is_spelled_as_a_string_outside_tests_and_generated_code() {
    let allowed = [
        (
            "crates/server/src/metrics.rs",
            "DEADLINE_EXCEEDED",
            "a gRPC code's name (a metric label), spelled as the reason is",
        ),
        (
            "crates/server/src/metrics.rs",
            "PERMISSION_DENIED",
            "likewise",
        ),
        (
            "crates/server/src/metrics.rs",
            "UNAUTHENTICATED",
            "likewise",
        ),
    ];
    let bad: Vec<String> = sources()
        .iter()
        .flat_map(|(file, text)| reason_literals(file, text, &allowed))
        .collect();
    assert!(
        bad.is_empty(),
        "reason names written as strings (name the generated `Reason`, whose `as_str` is the \
         proto's):\n{}",
        bad.join("\n")
    );
    // The check sees what it guards: the list as it was written before, in production code
    // and not in a test module.
    let list = "reasons! {\n    Unbalanced => \"UNBALANCED\",\n}\n";
    assert_eq!(reason_literals("x.rs", list, &allowed).len(), 1);
    let in_test = format!("#[cfg(test)]\nmod tests {{\n    {list}}}\nfn f() {{}}\n");
    assert!(reason_literals("x.rs", &in_test, &allowed).is_empty());
    let after_test = format!("{in_test}{list}");
    assert_eq!(reason_literals("x.rs", &after_test, &allowed).len(), 1);
}

/// Longest `ARCHITECTURE.md` may grow: a bird's-eye view, a code map and the rules; history
/// and measurements go to `docs/decisions/`.
const ARCHITECTURE_MAX_LINES: usize = 250;

/// The names of every `fn` in the code lines of the `.rs` files under `dirs` (relative to the
/// crate).
fn function_names(dirs: &[&str]) -> std::collections::BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in dirs {
        walk(&root.join(dir), &mut files);
    }
    let mut names = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (_, line) in code(&text) {
            for (i, _) in line.match_indices("fn ") {
                if i > 0 && line[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let name: String = line[i + 3..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The document's blocks: each heading, bullet or paragraph with its continuation lines.
fn blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block = String::new();
    for line in text.lines() {
        let starts = line.trim().is_empty() || line.starts_with("- ") || line.starts_with('#');
        if starts && !block.is_empty() {
            out.push(std::mem::take(&mut block));
        }
        if !line.trim().is_empty() {
            block.push_str(line);
            block.push('\n');
        }
    }
    if !block.is_empty() {
        out.push(block);
    }
    out
}

/// The tests a block cites: the backticked names after its `Tests:`.
fn cited_tests(block: &str) -> Vec<String> {
    match block.split_once("Tests:") {
        Some((_, after)) => after
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
        None => Vec::new(),
    }
}

#[test]
fn architecture_md_is_short_and_every_test_it_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let lines = doc.lines().count();
    assert!(
        lines <= ARCHITECTURE_MAX_LINES,
        "ARCHITECTURE.md has {lines} lines, more than {ARCHITECTURE_MAX_LINES}: move history \
         and measurements to docs/decisions/"
    );

    let blocks = blocks(&doc);
    let invariants: Vec<&String> = blocks
        .iter()
        .skip_while(|b| !b.starts_with("## Invariants"))
        .skip(1)
        .take_while(|b| !b.starts_with("## "))
        .filter(|b| b.starts_with("- "))
        .collect();
    assert!(
        invariants.len() >= 10,
        "ARCHITECTURE.md's \"## Invariants\" section lists {} rules",
        invariants.len()
    );
    let untested: Vec<&str> = invariants
        .iter()
        .filter(|b| cited_tests(b).is_empty())
        .map(|b| b.lines().next().unwrap())
        .collect();
    assert!(
        untested.is_empty(),
        "invariants in ARCHITECTURE.md that name no test (end each with `Tests:` and the \
         backticked names):\n{}",
        untested.join("\n")
    );

    let functions = function_names(&["src", "tests", "crates"]);
    let cited: Vec<String> = blocks.iter().flat_map(|b| cited_tests(b)).collect();
    assert!(
        cited.len() >= 20,
        "ARCHITECTURE.md cites {} tests",
        cited.len()
    );
    let missing: Vec<&String> = cited
        .iter()
        .filter(|name| {
            let well_formed = name.contains('_')
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            !well_formed || !functions.contains(name.as_str())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md cites tests that are no `fn` under src/, tests/ or client/src/ \
         (renamed or removed?): {missing:?}"
    );
}

/// The contract says which RPCs need the writer role: exactly those the access layer guards.
#[test]
fn the_contracts_service_comment_names_every_write_the_writer_role_guards() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let proto = std::fs::read_to_string(root.join("proto/ledger/v1/ledger.proto")).unwrap();
    let comment = proto
        .split("service Ledger {")
        .next()
        .and_then(|head| head.rsplit("// The ledger.").next())
        .expect("the service's comment");
    let named = comment
        .split_once("Writes (")
        .and_then(|(_, rest)| rest.split_once(") need the writer role"))
        .map(|(list, _)| list.replace("\n//", " "))
        .unwrap_or_else(|| panic!("the service's comment names its writes: {comment}"));
    let mut named: Vec<&str> = named.split(',').map(str::trim).collect();
    named.sort_unstable();
    let mut writes: Vec<&str> = ledger_server::access::METHODS
        .into_iter()
        .filter(|m| ledger_server::access::auth::needs_writer(m))
        .collect();
    writes.sort_unstable();
    assert_eq!(named, writes, "{comment}");
}
