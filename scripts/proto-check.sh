#!/usr/bin/env bash
# Lints the contract (proto/) with buf and checks it against the previous commit's for
# breaking changes. buf comes from PyPI (`buf-bin`), installed into a venv under target/ the
# first time.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/buf-venv
if [ ! -x "$venv/bin/buf" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'buf-bin==1.75.0'
fi
buf="$venv/bin/buf"
"$buf" lint
echo "proto-check: buf lint ok"
# The previous commit's contract, if this checkout has it (a shallow clone may not).
if git rev-parse --verify --quiet HEAD~1 >/dev/null; then
    "$buf" breaking --against '.git#ref=HEAD~1,subdir=proto'
    echo "proto-check: no breaking change against HEAD~1"
else
    echo "proto-check: no previous commit in this checkout; buf breaking skipped"
fi
