#!/usr/bin/env bash
# Installs what the client-suite tests need into target/: the pinned sdists of openstacksdk
# and python-ironicclient, unpacked (their functional tests are not in the wheels), their
# runners, and Ironic's own API suite. Idempotent; .ci/run calls it.
#
#   tests/clients/prepare.sh [ironicclient]   (no argument: every suite)
set -euo pipefail
cd "$(dirname "$0")/../.."

# python-ironicclient's functional suite (tests/clients/ironicclient-suite.sh runs it): the
# CLI, tempest's CLI base and the runner in a venv of their own, the sdist unpacked with the
# one setup patch the suite needs under noauth (it reads `self.auth_ref`, which nothing
# defines without Keystone).
prepare_ironicclient() {
  local work=target/client-suites/ironicclient
  local src=$work/python-ironicclient-5.8.0 venv=$work/venv
  mkdir -p "$work"
  if [ ! -x "$venv/bin/stestr" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check python-ironicclient==5.8.0 \
      python-openstackclient tempest stestr ddt fixtures testtools oslotest requests-mock
  fi
  if [ ! -d "$src" ]; then
    "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
      python-ironicclient==5.8.0 -d "$work"
    tar -xzf "$work/python-ironicclient-5.8.0.tar.gz" -C "$work"
    sed -i 's/        if not self.auth_ref.project_scoped:/        if getattr(self, "auth_ref", None) is not None and not self.auth_ref.project_scoped:/' \
      "$src/ironicclient/tests/functional/base.py"
    # The suite finds the CLI in .tox/<env>/bin.
    mkdir -p "$src/.tox/functionalpy3"
    ln -sfn "$PWD/$venv/bin" "$src/.tox/functionalpy3/bin"
  fi
}
prepare_ironicclient
[ "${1:-}" = ironicclient ] && exit 0

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
