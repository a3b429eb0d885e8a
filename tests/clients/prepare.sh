#!/usr/bin/env bash
# Installs what the client-suite tests need into target/: the pinned openstacksdk sdist,
# unpacked (its functional tests are not in the wheel), and its test runner in
# target/test-venv. Idempotent; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/../.."
SDK=openstacksdk-4.22.0
VENV=target/test-venv
mkdir -p target/client-suites
if [ ! -d "target/client-suites/$SDK" ]; then
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
    "openstacksdk==${SDK#openstacksdk-}" -d target/client-suites
  tar -xzf "target/client-suites/$SDK.tar.gz" -C target/client-suites
fi
if [ ! -x "$VENV/bin/stestr" ]; then
  "$VENV/bin/pip" install -q --disable-pip-version-check "openstacksdk==${SDK#openstacksdk-}" \
    stestr testtools oslotest fixtures ddt testscenarios requests-mock prometheus-client \
    statsd oslo.config jsonschema keyring
fi
# Ironic's own API suite (tests/clients/ironic-api-suite.sh runs it): tempest and the
# plugin, pinned, in a venv of their own (tempest pins its own oslo libraries).
TEMPEST_VENV=target/tempest-venv
if [ ! -x "$TEMPEST_VENV/bin/tempest" ] || ! "$TEMPEST_VENV/bin/pip" show ironic-tempest-plugin 2>/dev/null | grep -q '^Version: 3.2.0$'; then
  python3 -m venv "$TEMPEST_VENV"
  "$TEMPEST_VENV/bin/pip" install -q --disable-pip-version-check tempest==47.0.0 ironic-tempest-plugin==3.2.0
fi
