#!/usr/bin/env bash
# Runs Ironic's own API test suite (ironic-tempest-plugin 3.2.0's `tests/api`, driven by
# tempest 47.0.0) against a running deployd, as a devstack with Ironic's plugin configures
# it: fake-hardware and ipmi enabled, tests on the fake driver. Tempest authenticates
# against tests/clients/identity.py, a stand-in Keystone that only hands out tokens and a
# catalog naming the engine (deployd does not check tokens).
#
#   tests/clients/ironic-api-suite.sh http://127.0.0.1:PORT [tempest run args…]
#
# Prints tempest's totals and the failed tests; its whole output is in
# target/client-suites/ironic-api/last-run.txt. tests/clients/prepare.sh installs tempest.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
ENGINE=$1
shift
VENV=$ROOT/target/tempest-venv
WORK=$ROOT/target/client-suites/ironic-api
[ -x "$VENV/bin/tempest" ] || { echo "no tempest in $VENV: run tests/clients/prepare.sh" >&2; exit 2; }
mkdir -p "$WORK"
RUN=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 tests/clients/identity.py "$PORT" "$ENGINE" &
IDENTITY=$!
trap 'kill $IDENTITY 2>/dev/null; rm -rf "$RUN"' EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done

"$VENV/bin/tempest" init --workspace-path "$RUN/workspaces.yaml" "$RUN/workspace" >/dev/null 2>&1
# Pre-provisioned accounts (the stand-in accepts any): one project admin and one system
# admin per worker, since tempest locks an account while a test class holds it.
ACCOUNTS=$RUN/accounts.yaml
: > "$ACCOUNTS"
for i in $(seq 8); do
  printf -- '- username: admin%s\n  project_name: admin%s\n  password: secret\n  roles: [admin]\n' "$i" "$i" >> "$ACCOUNTS"
  printf -- '- username: system%s\n  system: all\n  password: secret\n  roles: [admin]\n' "$i" >> "$ACCOUNTS"
done
cat > "$RUN/workspace/etc/tempest.conf" <<EOF
[DEFAULT]
log_file = $RUN/tempest.log
[oslo_concurrency]
lock_path = $RUN/locks
[auth]
use_dynamic_credentials = False
test_accounts_file = $ACCOUNTS
admin_domain_name = Default
default_credentials_domain_name = Default
[identity]
uri_v3 = http://127.0.0.1:$PORT/v3
auth_version = v3
region = RegionOne
disable_ssl_certificate_validation = True
[identity-feature-enabled]
api_v2 = False
[service_available]
ironic = True
nova = False
glance = False
neutron = False
cinder = False
swift = False
[enforce_scope]
# As Ironic's run this suite is compared with: its RBAC tests need Keystone's roles.
ironic = False
[baremetal]
driver = fake-hardware
enabled_drivers =
enabled_hardware_types = ipmi,fake-hardware
enabled_bios_interfaces = fake,no-bios
enabled_boot_interfaces = fake,ipxe
enabled_console_interfaces = fake,no-console
enabled_deploy_interfaces = fake,direct,ramdisk
enabled_inspect_interfaces = fake,agent,no-inspect
enabled_raid_interfaces = fake,agent,no-raid
enabled_rescue_interfaces = fake,no-rescue
enabled_management_interfaces = fake,ipmitool,noop
enabled_power_interfaces = fake,ipmitool
default_boot_option = local
EOF
cd "$RUN/workspace"
"$VENV/bin/tempest" run --regex '^ironic_tempest_plugin\.tests\.api\.' "$@" \
  > "$WORK/last-run.txt" 2>&1 || true
cp "$RUN/tempest.log" "$WORK/tempest.log" 2>/dev/null || true
{
  grep -E '^ - (Passed|Failed|Skipped):' "$WORK/last-run.txt" || tail -30 "$WORK/last-run.txt"
  grep -E '\.\.\. FAILED' "$WORK/last-run.txt" | sed -E 's/^\{[0-9]+\} //; s/ \[[0-9.]+s\]//' | sort || true
} > "$WORK/summary.txt"
cat "$WORK/summary.txt"
