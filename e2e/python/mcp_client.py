"""The official MCP Python SDK (PyPI `mcp`, pinned in requirements.txt) as a client of one MCP
endpoint over Streamable HTTP: initialize, tools/list, tools/call, prompts/list, prompts/get,
resources/list (every page) and resources/read, printed as ONE JSON document on stdout, for
e2e/no-cluster/mcp-clients.e2e.test.ts to compare a server's answers made directly with the same
calls made through the gateway.

  python mcp_client.py --url URL [--header 'Name: value']... --tool NAME --message TEXT
                       --prompt NAME --resource URI [--mode session|auto]

--mode session (the default): ClientSession over streamable_http_client, initialize() by hand,
the initialize handshake's newest revision. --mode auto: the SDK's high-level Client, whose
default connect probes server/discover (the 2026-07-28 era) and falls back to the handshake.
A call that fails is recorded under "errors" (method -> message) and the others still run.
"""

import argparse
import asyncio
import importlib.metadata
import json
import sys
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import PaginatedRequestParams


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def headers_of(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep:
            raise SystemExit(f"--header wants 'Name: value', got {pair!r}")
        out[name.strip()] = value.strip()
    return out


async def exercise(session: Any, args: argparse.Namespace, seen: dict[str, Any]) -> None:
    """The calls, the same on a ClientSession and on a Client (their methods share names)."""
    errors: dict[str, str] = seen["errors"]

    async def attempt(method: str, key: str, call: Any) -> None:
        try:
            seen[key] = await call()
        except Exception as e:  # noqa: BLE001 - recorded for the test to judge
            errors[method] = f"{type(e).__name__}: {e}"

    async def tools() -> list[Any]:
        return await pages(lambda cursor: session.list_tools(**paged(cursor)), "tools")

    async def prompts() -> list[Any]:
        return await pages(lambda cursor: session.list_prompts(**paged(cursor)), "prompts")

    async def resources() -> list[Any]:
        return await pages(lambda cursor: session.list_resources(**paged(cursor)), "resources")

    async def call() -> Any:
        return dump(await session.call_tool(args.tool, {"message": args.message}))

    async def prompt() -> Any:
        return dump(await session.get_prompt(args.prompt))

    async def read() -> Any:
        return dump(await session.read_resource(args.resource))

    await attempt("tools/list", "tools", tools)
    await attempt("tools/call", "call", call)
    await attempt("prompts/list", "prompts", prompts)
    await attempt("prompts/get", "prompt", prompt)
    await attempt("resources/list", "resources", resources)
    await attempt("resources/read", "resource", read)


def paged(cursor: str | None) -> dict[str, Any]:
    return {"params": PaginatedRequestParams(cursor=cursor)} if cursor else {}


async def pages(fetch: Any, field: str) -> list[Any]:
    """Every page of a list (a server may page; the federated endpoint merges them into one)."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(100):
        result = await fetch(cursor)
        items.extend(dump(item) for item in getattr(result, field))
        cursor = result.next_cursor
        if not cursor:
            break
    return items


async def run(args: argparse.Namespace) -> dict[str, Any]:
    seen: dict[str, Any] = {
        "sdk": {"name": "mcp", "version": importlib.metadata.version("mcp")},
        "mode": args.mode,
        "errors": {},
    }
    # Headers go on the HTTP client the transport is given, as streamable_http_client's docs say;
    # the timeouts are the SDK's own defaults (30 s, 300 s to read a held-open stream).
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=headers_of(args.header), timeout=timeout) as http:
        transport = streamable_http_client(args.url, http_client=http)
        if args.mode == "session":
            async with transport as (read, write), ClientSession(read, write) as session:
                init = await session.initialize()
                seen["protocolVersion"] = init.protocol_version
                seen["serverInfo"] = dump(init.server_info)
                seen["capabilities"] = dump(init.capabilities)
                await exercise(session, args, seen)
        else:
            async with Client(transport) as client:
                seen["protocolVersion"] = client.protocol_version
                info = client.server_info
                seen["serverInfo"] = dump(info) if info is not None else None
                seen["capabilities"] = dump(client.server_capabilities)
                await exercise(client, args, seen)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--tool", required=True)
    parser.add_argument("--message", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--mode", choices=["session", "auto"], default="session")
    args = parser.parse_args()
    seen = asyncio.run(run(args))
    json.dump(seen, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
