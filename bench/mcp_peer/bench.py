#!/usr/bin/env python3
"""MCP peer figure for the toolsrv benchmark.

The same trivial tool the toolsrv benchmark calls, behind an MCP stdio server
built with the official Python SDK (PyPI `mcp`), called from that SDK's client.
The server's tool spawns the tool via subprocess with the same JSON on stdin,
exactly what a hand-written MCP wrapper does.

Usage:
    bench.py --tool PATH [--calls N] [--warmup N]   # client: prints one JSON line
    bench.py --serve PATH                          # (internal) the MCP server

Output: {"sdk":"mcp x.y","calls":N,"median_us":...,"p99_us":...,"mean_us":...}
Exit 3 with a message on stderr when the SDK is not installed
(run bench/mcp_peer/install.sh).
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

ARGS = {"text": "hello"}


def sdk_version():
    try:
        import importlib.metadata as md

        return md.version("mcp")
    except Exception:  # noqa: BLE001
        return "?"


def serve(tool):
    try:
        from mcp.server.mcpserver import MCPServer as Server  # mcp >= 2
    except ImportError:
        from mcp.server.fastmcp import FastMCP as Server  # mcp 1.x

    server = Server("peer")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text through the trivial tool."""
        p = subprocess.run(
            [tool],
            input=json.dumps({"text": text}).encode() + b"\n",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            check=False,
        )
        return p.stdout.decode()

    server.run()


async def client(tool, calls, warmup):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=[__file__, "--serve", tool])
    lat = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for i in range(warmup + calls):
                t0 = time.perf_counter_ns()
                r = await session.call_tool("echo", ARGS)
                dt = time.perf_counter_ns() - t0
                if r.isError if hasattr(r, "isError") else getattr(r, "is_error", False):
                    raise SystemExit(f"peer tool call failed: {r}")
                if i >= warmup:
                    lat.append(dt / 1000.0)
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return {
        "sdk": f"mcp {sdk_version()}",
        "calls": calls,
        "median_us": statistics.median(lat),
        "p99_us": p99,
        "mean_us": statistics.fmean(lat),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", help="the trivial tool executable")
    ap.add_argument("--serve", metavar="TOOL", help=argparse.SUPPRESS)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args()
    try:
        import mcp  # noqa: F401
    except ImportError:
        print("the Python MCP SDK is not installed: run bench/mcp_peer/install.sh", file=sys.stderr)
        sys.exit(3)
    if a.serve:
        serve(a.serve)
        return
    if not a.tool:
        ap.error("--tool is required")
    print(json.dumps(asyncio.run(client(a.tool, a.calls, a.warmup))))


if __name__ == "__main__":
    main()
