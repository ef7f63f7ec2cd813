"""Drives situate's MCP server with the Python `mcp` client package (the reference SDK).

    python mcp_client.py stdio SITUATE_BINARY INDEX_DIR
    python mcp_client.py http URL

Lists the tools, calls `search`, then `get_card` on the top hit, and reads that card as a
resource; prints one JSON object with what came back, for the Rust test to check.
"""

import asyncio
import json
import sys
import urllib.parse

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


async def exercise(read, write):
    async with ClientSession(read, write) as session:
        init = await session.initialize()
        tools = (await session.list_tools()).tools
        found = await session.call_tool("search", {"query": "Fresnel lens", "k": 2})
        hits = json.loads(found.content[0].text)["hits"]
        chunk = hits[0]["chunk_id"]
        card = await session.call_tool("get_card", {"chunk_id": chunk})
        uri = "situate://card/" + urllib.parse.quote(chunk, safe="")
        resource = await session.read_resource(uri)
        bad = await session.call_tool("search", {"query": ""})
        return {
            "server": init.server_info.name,
            "tools": sorted(t.name for t in tools),
            "read_only": {t.name: bool(t.annotations and t.annotations.read_only_hint) for t in tools},
            "top": hits[0],
            "card": json.loads(card.content[0].text),
            "resource": json.loads(resource.contents[0].text),
            "empty_query_is_error": bool(bad.is_error),
        }


async def main():
    if sys.argv[1] == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=["--index", sys.argv[3], "mcp"])
        async with stdio_client(params) as streams:
            out = await exercise(streams[0], streams[1])
    else:
        async with streamable_http_client(sys.argv[2]) as streams:
            out = await exercise(streams[0], streams[1])
    print(json.dumps(out))


asyncio.run(main())
