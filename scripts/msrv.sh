#!/usr/bin/env bash
# Prints the highest `rust-version` declared by the crates Cargo resolves for this machine's
# target (normal, build and dev dependencies): the real minimum Rust of the build, since only
# one toolchain exists on these machines to try older ones. Cargo.toml's `rust-version` must be
# at least this.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(rustc -vV | sed -n 's/^host: //p')
cargo tree --target "$target" -e normal,build,dev --prefix none --format '{p}' |
    awk '{sub(/^v/, "", $2); print $1 "@" $2}' | sort -u >target/msrv-packages.txt
cargo metadata --format-version 1 | python3 -c '
import json, sys
used = {l.strip() for l in open("target/msrv-packages.txt")}
meta = json.load(sys.stdin)
found = [(tuple(int(x) for x in p["rust_version"].split(".")), p["name"], p["version"])
         for p in meta["packages"]
         if p.get("rust_version") and p["name"] + "@" + p["version"] in used]
version, name, at = max(found)
print(".".join(map(str, version)), "(" + name, at + ")")
'
