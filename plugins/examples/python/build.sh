#!/usr/bin/env bash
# Builds py_redfish.wasm from driver.py with componentize-py (from PyPI, in a venv here).
#   plugins/examples/python/build.sh            → plugins/examples/python/py_redfish.wasm
#   deployd driver test plugins/examples/python/py_redfish.wasm
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
wit="$here/../../../wit"
venv="${VENV:-$here/.venv}"
if [ ! -x "$venv/bin/componentize-py" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "componentize-py==0.25.1"
fi
cd "$here"
"$venv/bin/componentize-py" -d "$wit" -w driver componentize driver -o py_redfish.wasm
ls -l py_redfish.wasm
