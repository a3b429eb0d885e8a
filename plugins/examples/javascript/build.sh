#!/usr/bin/env bash
# Builds js_redfish.wasm from driver.js with componentize-js (from the npm registry).
#   plugins/examples/javascript/build.sh        → plugins/examples/javascript/js_redfish.wasm
#   deployd driver test plugins/examples/javascript/js_redfish.wasm
# componentize-js reads the WIT from inside its own sandbox, so the build runs in this
# directory with a copy of wit/ beside the source.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
if [ ! -x node_modules/.bin/componentize-js ]; then
  npm install --no-audit --no-fund --silent "@bytecodealliance/componentize-js@0.23.0"
fi
rm -rf wit && cp -r ../../../wit wit
node_modules/.bin/componentize-js --wit wit --world-name driver -o js_redfish.wasm driver.js
rm -rf wit
ls -l js_redfish.wasm
