//! The walls between rooms, checked on the source where the compiler cannot: each room (a
//! top-level module of a crate) uses only the rooms `ARCHITECTURE.md`'s table allows it, and
//! that table has no circle, so no two rooms use each other however indirectly; no production
//! file is over [`MAX_FILE_LINES`] lines and no production function over
//! [`MAX_FUNCTION_LINES`]; and `ledger-core` reads no clock and depends on no runtime,
//! transport, database, broker or generated-proto crate.

use crate::tidy::{production_code, sources};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Longest a production file may be, in lines (its test modules left out).
const MAX_FILE_LINES: usize = 600;
/// Longest a production function may be, in lines (signature to closing brace): it fits on a
/// screen.
const MAX_FUNCTION_LINES: usize = 70;
/// The source roots of the workspace's crates: the command line (the root package) and the
/// three under `crates/`.
const CRATES: [&str; 4] = [
    "src",
    "crates/core/src",
    "crates/server/src",
    "crates/client/src",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Room → the rooms it may use, per crate root, from `ARCHITECTURE.md`'s "## Rooms" section:
/// a `### `root`` heading per crate, then rows `| `a`, `b` | `x`, `y` |` (`—`: none).
fn allowed() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Rooms"))
        .expect("a \"## Rooms\" section in ARCHITECTURE.md");
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut krate = None;
    for line in section.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            krate = Some(h.split('`').nth(1).expect("### `crate root`").to_owned());
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(k), [_, rooms, may, _]) = (&krate, cells.as_slice()) else {
            continue;
        };
        if rooms.starts_with("room") || rooms.starts_with('-') {
            continue;
        }
        let names = |cell: &str| -> BTreeSet<String> {
            cell.split(',')
                .map(|n| n.trim().trim_matches('`').to_owned())
                .filter(|n| !n.is_empty() && n != "—")
                .collect()
        };
        for room in names(rooms) {
            out.entry(k.clone()).or_default().insert(room, names(may));
        }
    }
    out
}

/// The rooms of a crate root: its top-level files and directories but `lib.rs` and `main.rs`.
fn rooms_of(krate: &str) -> BTreeSet<String> {
    std::fs::read_dir(root().join(krate))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .map(|n| n.trim_end_matches(".rs").to_owned())
        .filter(|n| n != "lib" && n != "main")
        .collect()
}

/// The rooms a piece of code names: `crate::room`, `crate::{room, …}`, and in a room's own
/// top-level file (where `super` is the crate) `super::room`.
fn named_rooms(code: &str, top_level: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut prefixes = vec!["crate::"];
    if top_level {
        prefixes.push("super::");
    }
    for prefix in prefixes {
        for (i, _) in code.match_indices(prefix) {
            if prefix == "super::" && code[..i].ends_with("super::") {
                continue;
            }
            let rest = &code[i + prefix.len()..];
            let ident = |t: &str| -> String {
                t.trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            };
            match rest.strip_prefix('{') {
                Some(inner) => {
                    let list = &inner[..inner.find('}').unwrap_or(inner.len())];
                    out.extend(list.split(',').map(ident));
                }
                None => {
                    out.insert(ident(rest));
                }
            }
        }
    }
    out.retain(|n| !n.is_empty() && n != "super" && n != "self");
    out
}

/// Production code only: a file's lines outside its test modules, its `//` comments cut off.
fn code_of(text: &str) -> String {
    let cut = |l: &str| match l.find("//") {
        Some(i) if l[..i].matches('"').count().is_multiple_of(2) => l[..i].to_owned(),
        _ => l.to_owned(),
    };
    production_code(text)
        .into_iter()
        .map(|(_, l)| cut(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The files that are test modules of their own (declared `#[cfg(test)] mod name;`).
fn test_module_files(files: &[(String, String)]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (file, text) in files {
        let dir = Path::new(file).parent().unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for w in lines.windows(2) {
            if w[0].trim() == "#[cfg(test)]" {
                if let Some(name) = w[1]
                    .trim()
                    .strip_prefix("mod ")
                    .and_then(|m| m.strip_suffix(';'))
                {
                    out.insert(
                        dir.join(format!("{name}.rs"))
                            .to_string_lossy()
                            .into_owned(),
                    );
                    out.insert(dir.join(name).join("mod.rs").to_string_lossy().into_owned());
                }
            }
        }
    }
    out
}

/// Every room's uses of other rooms, per crate root: (crate, room) → (used room → a file).
fn uses() -> BTreeMap<(String, String), BTreeMap<String, String>> {
    let files = sources();
    let tests = test_module_files(&files);
    let mut out: BTreeMap<(String, String), BTreeMap<String, String>> = BTreeMap::new();
    for krate in CRATES {
        let rooms = rooms_of(krate);
        for (file, text) in files
            .iter()
            .filter(|(f, _)| f.starts_with(&format!("{krate}/")))
        {
            let rel: Vec<&str> = file[krate.len() + 1..].split('/').collect();
            let room = rel[0].trim_end_matches(".rs").to_owned();
            if !rooms.contains(&room) || tests.contains(file) {
                continue;
            }
            let top_level = rel.len() == 1 || (rel.len() == 2 && rel[1] == "mod.rs");
            for used in named_rooms(&code_of(text), top_level) {
                if used != room && rooms.contains(&used) {
                    out.entry((krate.to_owned(), room.clone()))
                        .or_default()
                        .entry(used)
                        .or_insert_with(|| file.clone());
                }
            }
        }
    }
    out
}

/// A circle among the table's rooms, if it has one.
fn circle(table: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        r: &str,
        t: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == r) {
            return Some(path[i..].to_vec());
        }
        if !done.insert(r.to_owned()) {
            return None;
        }
        path.push(r.to_owned());
        for next in t.get(r).into_iter().flatten() {
            if let Some(c) = visit(next, t, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    table
        .keys()
        .find_map(|r| visit(r, table, &mut Vec::new(), &mut done))
}

#[test]
fn every_room_uses_only_the_rooms_the_architecture_allows_and_no_rooms_use_each_other_in_a_circle()
{
    let allowed = allowed();
    for krate in CRATES {
        let table = allowed
            .get(krate)
            .unwrap_or_else(|| panic!("ARCHITECTURE.md's Rooms have no table for `{krate}`"));
        let listed: BTreeSet<String> = table.keys().cloned().collect();
        assert_eq!(
            listed,
            rooms_of(krate),
            "the rooms of `{krate}` and ARCHITECTURE.md's table"
        );
        assert_eq!(
            circle(table),
            None,
            "ARCHITECTURE.md allows a circle among the rooms of `{krate}`"
        );
    }
    let mut bad = Vec::new();
    for ((krate, room), used) in uses() {
        for (other, file) in used {
            if !allowed[&krate][&room].contains(&other) {
                bad.push(format!("{file}: room `{room}` uses `{other}`"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "uses ARCHITECTURE.md's Rooms do not allow:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_room_check_sees_the_uses_it_guards() {
    let uses = uses();
    let has = |k: &str, a: &str, b: &str| {
        uses.get(&(k.to_owned(), a.to_owned()))
            .is_some_and(|u| u.contains_key(b))
    };
    assert!(
        has("crates/server/src", "writer", "storage"),
        "a `use crate::storage` line"
    );
    assert!(
        has("crates/core/src", "hold", "posting"),
        "a top-level file's `super::posting`"
    );
    assert!(has("src", "cli", "tools"));
    assert!(!has("crates/server/src", "storage", "writer"));
    let mut t = BTreeMap::new();
    t.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    t.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert!(circle(&t).is_some(), "a circle of two is found");
    assert_eq!(
        named_rooms("use crate::{a, b::c};\nsuper::super::x; super::y", true),
        BTreeSet::from(["a".into(), "b".into(), "y".into()])
    );
}

/// Production functions over `max` lines: `file:line name (n lines)`. A function runs from its
/// `fn` line to the first line that closes it at its own indentation (rustfmt's layout).
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let lines = production_code(text);
    let mut out = Vec::new();
    for (k, (n, line)) in lines.iter().enumerate() {
        let t = line.trim_start();
        let signature = t.starts_with("fn ")
            || (t.contains(" fn ")
                && (t.starts_with("pub")
                    || t.starts_with("async")
                    || t.starts_with("const")
                    || t.starts_with("unsafe")));
        if !signature || t.ends_with(';') {
            continue;
        }
        let indent = &line[..line.len() - t.len()];
        let close = format!("{indent}}}");
        let Some((end, _)) = lines[k..]
            .iter()
            .find(|(_, l)| *l == close || (l.trim_start() == t && l.ends_with('}')))
        else {
            continue;
        };
        let name: String = t[t.find("fn ").unwrap() + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if end - n + 1 > max {
            out.push((*n, name, end - n + 1));
        }
    }
    out
}

#[test]
fn no_production_file_is_over_600_lines_and_no_production_function_over_70() {
    let files = sources();
    let tests = test_module_files(&files);
    let mut bad = Vec::new();
    for (file, text) in files.iter().filter(|(f, _)| !tests.contains(f)) {
        let lines = production_code(text).last().map_or(0, |(n, _)| *n);
        if lines > MAX_FILE_LINES {
            bad.push(format!(
                "{file}: {lines} lines of production code (MAX_FILE_LINES {MAX_FILE_LINES})"
            ));
        }
        for (n, name, len) in long_functions(text, MAX_FUNCTION_LINES) {
            bad.push(format!(
                "{file}:{n}: fn {name} has {len} lines (MAX_FUNCTION_LINES {MAX_FUNCTION_LINES})"
            ));
        }
    }
    assert!(bad.is_empty(), "split these:\n{}", bad.join("\n"));
    let long = "fn f() {\n".to_owned() + &"    x();\n".repeat(70) + "}\n";
    assert_eq!(
        long_functions(&long, MAX_FUNCTION_LINES),
        [(1, "f".to_owned(), 72)],
        "the check sees a long function"
    );
}

#[test]
fn the_core_reads_no_clock_and_depends_on_no_runtime_transport_database_broker_or_generated_proto()
{
    let manifest = std::fs::read_to_string(root().join("crates/core/Cargo.toml")).unwrap();
    let deps: Vec<&str> = manifest
        .split("\n[")
        .filter(|s| s.starts_with("dependencies]"))
        .flat_map(|s| s.lines().skip(1))
        .filter_map(|l| l.split('=').next().map(str::trim))
        .filter(|n| !n.is_empty() && !n.starts_with('#'))
        .collect();
    assert!(
        !deps.is_empty() && deps.contains(&"time"),
        "the check sees ledger-core's dependencies: {deps:?}"
    );
    let forbidden = [
        "tokio",
        "tonic",
        "prost",
        "prost-types",
        "hyper",
        "tower",
        "tokio-postgres",
        "deadpool-postgres",
        "async-nats",
        "ledger-client",
        "ledger-server",
    ];
    let bad: Vec<&&str> = deps.iter().filter(|d| forbidden.contains(d)).collect();
    assert!(bad.is_empty(), "ledger-core depends on {bad:?}");
    let clocks = [
        "now_utc",
        "now_v7",
        "SystemTime::now",
        "Instant::now",
        "OffsetDateTime::now",
        "async fn",
        ".await",
    ];
    let files = sources();
    let tests = test_module_files(&files);
    let mut reads = Vec::new();
    for (file, text) in files
        .iter()
        .filter(|(f, _)| f.starts_with("crates/core/src/") && !tests.contains(f))
    {
        for (n, line) in production_code(text) {
            if clocks.iter().any(|c| line.contains(c)) {
                reads.push(format!("{file}:{n}: {}", line.trim()));
            }
        }
    }
    assert!(
        reads.is_empty(),
        "ledger-core reads a clock or awaits:\n{}",
        reads.join("\n")
    );
}
