"""Two agents on one `amberdb serve --http`, over MCP's Streamable HTTP transport with the
official MCP Python SDK, each with its own user-bound token: neither sees the other's
memories, whatever it asks for.

Usage: python mcp_two_agents.py URL TOKEN_OF_ADA TOKEN_OF_BOB
"""
import asyncio
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def check(cond, what):
    if not cond:
        print("FAILED:", what)
        sys.exit(1)


class Agent:
    def __init__(self, url, token):
        self.url, self.token = url, token

    async def __aenter__(self):
        self.http = create_mcp_http_client(headers={"Authorization": f"Bearer {self.token}"})
        await self.http.__aenter__()
        self.streams_cm = streamable_http_client(self.url, http_client=self.http)
        streams = await self.streams_cm.__aenter__()
        self.session_cm = ClientSession(streams[0], streams[1])
        self.session = await self.session_cm.__aenter__()
        await self.session.initialize()
        return self

    async def __aexit__(self, *exc):
        await self.session_cm.__aexit__(*exc)
        await self.streams_cm.__aexit__(*exc)
        await self.http.__aexit__(*exc)

    async def call(self, name, **args):
        r = await self.session.call_tool(name, args)
        return r.is_error, r.structured_content


async def main(url, ada_token, bob_token):
    async with Agent(url, ada_token) as ada, Agent(url, bob_token) as bob:
        err, stored = await ada.call("store_memory", content="ada's locker code is 4417")
        check(not err and stored["success"], f"ada stores: {stored}")
        mine = stored["memory_id"]
        err, stored = await bob.call("store_memory", content="bob parks on level 3")
        check(not err, f"bob stores: {stored}")
        # Both at once, many times: answers never cross.
        for _ in range(5):
            (e1, a), (e2, b) = await asyncio.gather(
                ada.call("search_memories", query="locker code parks level", limit=10),
                bob.call("search_memories", query="locker code parks level", limit=10))
            check(not e1 and [r["content"] for r in a["results"]] == ["ada's locker code is 4417"], f"ada's search: {a}")
            check(not e2 and [r["content"] for r in b["results"]] == ["bob parks on level 3"], f"bob's search: {b}")
        err, got = await bob.call("get_by_memory_id", memory_id=mine)
        check(err and got["code"] == "not_found", f"bob gets ada's id: {got}")
        err, deleted = await bob.call("delete_by_memory_id", memory_id=mine)
        check(err and deleted["code"] == "not_found", f"bob deletes ada's id: {deleted}")
        err, named = await bob.call("search_memories", query="locker", user_id="ada")
        check(err and named["code"] == "forbidden", f"bob names ada: {named}")
        err, recent = await bob.call("list_recent_memories", limit=50)
        check(not err and [m["content"] for m in recent["memories"]] == ["bob parks on level 3"], f"bob's recent: {recent}")
        err, users = await bob.call("list_users")
        check(not err and [u["id"] for u in users["users"]] == ["bob"], f"bob's users: {users}")
        err, still = await ada.call("get_by_memory_id", memory_id=mine)
        check(not err and still["memory"]["content"] == "ada's locker code is 4417", f"ada's memory: {still}")
    print("two agents over streamable http: isolated; all checks passed")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
