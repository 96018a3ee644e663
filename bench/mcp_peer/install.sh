#!/bin/sh
# Install the official Python MCP SDK (PyPI `mcp`) into a venv under target/,
# for bench/mcp_peer/bench.py. Usage: bench/mcp_peer/install.sh
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
venv="$root/target/mcp-venv"
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet mcp
"$venv/bin/python" -c 'import mcp, importlib.metadata as m; print("mcp", m.version("mcp"), "installed in '"$venv"'")'
