#!/usr/bin/env bash
# Installs the system packages the ledger's tests, benchmarks and default mode need, if missing:
#   - PostgreSQL server binaries (initdb, pg_ctl, postgres, psql, pgbench) from the Debian
#     packages postgresql + postgresql-contrib (pgbench ships in postgresql-<major>);
#   - nats-server;
#   - pg_auto_failover (pg_autoctl and the monitor's extension for PostgreSQL 15) for the
#     high-availability tests and scripts/ha-demo.sh: postgresql-15-auto-failover,
#     pg-auto-failover-cli.
#   - the Python gRPC packages docs/clients.md uses (its test runs the doc's Python):
#     grpcio, grpcio-tools, grpcio-status, googleapis-common-protos, at the versions below,
#     with pip into the python3 on PATH (checked by version, so nothing runs when present).
# Idempotent: does nothing (and runs no apt-get at all) when everything is there. Meant for a
# Debian 12 machine, run as root (or with sudo available).
#
# The ledger runs its own private PostgreSQL (see crates/server/src/embedded_pg/); it never uses the Debian
# default cluster. Services are kept from starting during the install (policy-rc.d), so no
# system PostgreSQL or NATS is left running.
set -euo pipefail

log() { printf 'ensure-deps: %s\n' "$*"; }

have_pg_server() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }
have_pgbench() { compgen -G '/usr/lib/postgresql/*/bin/pgbench' >/dev/null || command -v pgbench >/dev/null 2>&1; }
have_psql() { compgen -G '/usr/lib/postgresql/*/bin/psql' >/dev/null || command -v psql >/dev/null 2>&1; }
have_nats() { command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; }
have_autoctl() { command -v pg_autoctl >/dev/null 2>&1; }
have_autofailover_ext() { [ -e /usr/share/postgresql/15/extension/pgautofailover.control ]; }

packages=()
if have_pg_server && have_pgbench && have_psql; then
    log "PostgreSQL present: $(compgen -G '/usr/lib/postgresql/*/bin/initdb' | tr '\n' ' ')"
else
    log "PostgreSQL server binaries (initdb/pgbench/psql) missing"
    packages+=(postgresql postgresql-contrib)
fi
if have_nats; then
    log "nats-server present: $(command -v nats-server || echo /usr/sbin/nats-server)"
else
    log "nats-server missing"
    packages+=(nats-server)
fi
if have_autoctl && have_autofailover_ext; then
    log "pg_auto_failover present: $(command -v pg_autoctl)"
else
    log "pg_auto_failover (pg_autoctl, extension pgautofailover for PostgreSQL 15) missing"
    packages+=(postgresql-15-auto-failover pg-auto-failover-cli)
fi

# The Python packages of docs/clients.md, pinned (pip resolves protobuf for them).
python_packages=(grpcio==1.85.1 grpcio-tools==1.85.1 grpcio-status==1.85.1 googleapis-common-protos==1.76.0)
have_python_grpc() {
    command -v python3 >/dev/null 2>&1 && python3 - "${python_packages[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
}
if have_python_grpc; then
    log "Python gRPC packages present: ${python_packages[*]}"
elif ! command -v python3 >/dev/null 2>&1; then
    log "python3 missing (docs/clients.md's test needs it with pip)"
    packages+=(python3 python3-pip)
fi
install_python_grpc() {
    have_python_grpc && return 0
    log "pip install ${python_packages[*]}"
    local pip=(python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore)
    # A Debian python3 refuses system-wide installs (PEP 668); pyenv's and venvs do not.
    "${pip[@]}" "${python_packages[@]}" || "${pip[@]}" --break-system-packages "${python_packages[@]}"
    have_python_grpc || { log "still missing after pip install: ${python_packages[*]}" >&2; exit 1; }
}

if [ "${#packages[@]}" -eq 0 ]; then
    install_python_grpc
    log "nothing else to install"
    exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        log "need root to install: ${packages[*]} (run as root or install sudo)" >&2
        exit 1
    fi
fi

# Keep the packages' services (the Debian "main" PostgreSQL cluster, nats-server) from starting:
# invoke-rc.d asks /usr/sbin/policy-rc.d, and exit code 101 means "action forbidden".
# An existing policy-rc.d is left as it is.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, from ledger scripts/ensure-deps.sh\nexit 101\n' |
        "${SUDO[@]}" tee "$policy" >/dev/null
    "${SUDO[@]}" chmod 0755 "$policy"
    trap '"${SUDO[@]}" rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
log "apt-get update"
"${SUDO[@]}" apt-get update -qq
log "apt-get install ${packages[*]}"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}"

missing=()
have_pg_server || missing+=("initdb (/usr/lib/postgresql/*/bin)")
have_pgbench || missing+=(pgbench)
have_psql || missing+=(psql)
have_nats || missing+=(nats-server)
have_autoctl || missing+=(pg_autoctl)
have_autofailover_ext || missing+=("pgautofailover (PostgreSQL 15 extension)")
if [ "${#missing[@]}" -ne 0 ]; then
    log "still missing after install: ${missing[*]}" >&2
    exit 1
fi
log "installed ${packages[*]}; PostgreSQL: $(compgen -G '/usr/lib/postgresql/*/bin' | tr '\n' ' ')"
install_python_grpc
