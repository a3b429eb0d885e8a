#!/usr/bin/env bash
# Runs python-ironicclient 5.8.0's own functional suite (109 tests, each driving the real
# `openstack baremetal` CLI) against a fresh `deployd serve`, unmodified but for the one
# setup patch the suite needs under noauth: it reads `self.auth_ref`, which nothing
# defines without Keystone.
#
#   tests/clients/ironicclient-suite.sh [path/to/deployd]   (default target/release/deployd)
#
# With DEPLOYD_SUITE_URL set (e.g. the load balancer in front of several engines on one
# shared store), the suite runs against that API instead of a deployd it starts.
#
# The end-to-end test `cluster::python_ironicclient_functional_suite_passes_through_three_engines`
# runs it through the balancer in front of three engines; against one engine on sled it is a
# script only (every test starts the CLI several times: ~4 min on 2 idle cores). The first run
# installs the suite (tests/clients/prepare.sh): python3 and network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN=${1:-target/release/deployd}
[ $# -gt 0 ] && shift
[ -n "${DEPLOYD_SUITE_URL:-}" ] || [ -x "$BIN" ] || { echo "no deployd at $BIN: cargo build --release -p deployd" >&2; exit 2; }
WORK=target/client-suites/ironicclient
SRC=$WORK/python-ironicclient-5.8.0
VENV=$WORK/venv
tests/clients/prepare.sh ironicclient
DATA=$(mktemp -d)
if [ -n "${DEPLOYD_SUITE_URL:-}" ]; then
  URL=$DEPLOYD_SUITE_URL
  trap 'rm -rf "$DATA"' EXIT
else
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$DATA/data" > "$DATA/serve.log" 2>&1 &
  SERVE=$!
  trap 'kill $SERVE 2>/dev/null; rm -rf "$DATA"' EXIT
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
  URL=http://127.0.0.1:$PORT
fi
printf '[functional]\nauth_strategy = noauth\nironic_url = %s\n' "$URL" > "$DATA/test.conf"
cd "$SRC"
rm -rf .stestr
IRONICCLIENT_TEST_CONFIG="$DATA/test.conf" OS_TESTENV_NAME=functionalpy3 \
  TESTS_DIR=./ironicclient/tests/functional PATH="$ROOT/$VENV/bin:$PATH" \
  "$ROOT/$VENV/bin/stestr" run "$@" > "$ROOT/$WORK/last-run.txt" 2>&1 || true
grep -E '^ - (Passed|Failed|Skipped):' "$ROOT/$WORK/last-run.txt"
grep -E '\.\.\. FAILED' "$ROOT/$WORK/last-run.txt" || true
