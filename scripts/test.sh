#!/usr/bin/env bash
# The test command: installs what a fresh machine lacks, then runs every test. The tests start
# their own PostgreSQL (and NATS where needed); nothing has to be running beforehand.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
cargo fmt --all --check
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo test --locked --workspace --lib --tests -- --test-threads "${LEDGER_TEST_THREADS:-4}"
# The client's documented example compiles (it is no_run: it needs a server, and
# tests/it/client.rs runs the same lines against one).
cargo test --locked --doc -p ledger-client
