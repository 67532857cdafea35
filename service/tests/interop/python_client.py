"""Drives the CaseOps MCP server with the official MCP Python SDK.

Usage: python_client.py URL TOKEN [ERA]  — prints a JSON report on stdout.
ERA is 2025-11-25 (the `initialize` handshake, the default) or 2026-07-28
(`server/discover`, then a `_meta` envelope on every request).
Written for the SDK version .ci/run installs (mcp 2.3.0).
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

CALLS = [
    ("caseops_get_case_snapshot", {"case_id": "C-102"}),
    ("caseops_get_policy_requirements", {"case_id": "C-102"}),
    ("caseops_list_unclassified_documents", {"case_id": "C-102"}),
    ("caseops_resolve_document_alias", {"case_id": "C-102", "document_id": "DOC-C102-003"}),
]


async def main(url: str, token: str, era: str) -> None:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(url, http_client=http, terminate_on_close=False) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            if era == "2026-07-28":
                await session.discover()
            else:
                await session.initialize()
            tools = await session.list_tools()
            calls = []
            for name, args in CALLS:
                result = await session.call_tool(name, args)
                calls.append({"name": name, "is_error": bool(result.is_error), "structured": result.structured_content})
    print(json.dumps({
        "protocol_version": session.protocol_version,
        "tools": [t.name for t in tools.tools],
        "calls": calls,
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "2025-11-25"))
