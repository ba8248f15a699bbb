"""amberdb's MCP driven by the official MCP Python SDK (`mcp` from PyPI) as its client.

Usage: python mcp_client.py stdio AMBERDB_BINARY STORE_DIR
       python mcp_client.py http URL [TOKEN]
Over stdio it starts `amberdb mcp`; over Streamable HTTP it connects to `amberdb serve
--http`'s /mcp (with TOKEN as a bearer token). Either way it initializes, lists the tools, and
calls every one of them, checking the result fields an agent configured for vector-memory-mcp
reads: the same checks on both transports.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

SEED_TOOLS = [
    "store_memory", "search_memories", "list_recent_memories", "get_by_memory_id",
    "delete_by_memory_id", "get_memory_stats", "clear_old_memories", "get_unique_tags",
    "get_canonical_tags", "get_tag_frequencies", "get_tag_weights", "tag_normalize_preview",
    "tag_normalize_apply", "snapshot_create", "snapshot_restore",
]


def fail(what):
    print("FAILED:", what)
    sys.exit(1)


def check(cond, what):
    if not cond:
        fail(what)


async def exercise(session, transport):
    called = set()
    init = await session.initialize()
    check(init.server_info.name == "amberdb", f"server info: {init.server_info}")
    tools = {t.name: t for t in (await session.list_tools()).tools}
    for name in SEED_TOOLS + ["query", "create_user", "add_messages", "add_knowledge"]:
        check(name in tools, f"tool {name} listed")
    check(tools["store_memory"].input_schema["required"] == ["content"], "store_memory schema")

    async def call(name, **args):
        called.add(name)
        r = await session.call_tool(name, args)
        body = r.structured_content
        check(body is not None, f"{name}: structured content")
        check(json.loads(r.content[0].text) == body, f"{name}: text content is the same JSON")
        return r.is_error, body

    async def ok(name, **args):
        err, body = await call(name, **args)
        check(not err, f"{name} {args}: {body}")
        return body

    stored = await ok("store_memory", content="use ruff format before committing python code",
                      category="tool-usage", tags=["python", "lint"])
    check(stored["success"] and stored["memory_id"] >= 1, f"store: {stored}")
    mid = stored["memory_id"]
    check(stored["content_preview"].startswith("use ruff"), "content_preview")
    check(stored["tags"] == ["python", "lint"], "tags")
    err, dup = await call("store_memory", content="use ruff format before committing python code")
    # vector-memory-mcp's answer: a normal result, success false, the existing id.
    check(not err and dup["success"] is False and dup["memory_id"] == mid, f"duplicate: {dup}")
    other = (await ok("store_memory", content="the staging database rotates its password on mondays"))["memory_id"]

    found = await ok("search_memories", query="ruff", mode="keyword", limit=5)
    check([r["id"] for r in found["results"]] == [mid], f"search: {found}")
    for field in ("similarity", "distance", "content", "category", "tags", "created_at", "access_count"):
        check(field in found["results"][0], f"search result field {field}")
    check("total" in found and "count" in found, "search total/count")
    # vector-memory-mcp's shape: the top limit by similarity, no threshold, the query
    # echoed, similarities rounded to 3 decimals, pagination.
    by_meaning = await ok("search_memories", query="python formatting tools", limit=10)
    check(by_meaning["strategy"] == "similarity" and by_meaning["count"] == 2, f"default search: {by_meaning}")
    check(by_meaning["query"] == "python formatting tools", "query echoed")
    check(by_meaning["offset"] == 0 and by_meaning["limit"] == 10 and by_meaning["has_more"] is False,
          f"pagination: {by_meaning}")
    for r in by_meaning["results"]:
        check(round(r["similarity"], 3) == r["similarity"], f"rounded similarity: {r['similarity']}")
    recent = await ok("list_recent_memories", limit=10)
    check([m["id"] for m in recent["memories"]] == [other, mid], f"recent: {recent}")
    got = await ok("get_by_memory_id", memory_id=mid)
    check(got["memory"]["content"].startswith("use ruff"), "get")
    err, missing = await call("get_by_memory_id", memory_id=999999)
    check(err and missing["error"] == "Not found", f"missing: {missing}")
    stats = await ok("get_memory_stats")
    for field in ("total_memories", "memory_limit", "usage_percentage", "categories", "recent_week_count",
                  "database_size_mb", "embedding_model", "embedding_dimensions", "top_accessed", "health_status"):
        check(field in stats, f"stats field {field}")
    check(stats["total_memories"] == 2, f"stats: {stats}")
    check(isinstance(stats["categories"], dict) and stats["categories"].get("tool-usage") == 1,
          f"categories object: {stats['categories']}")
    check(all(set(t) == {"memory_id", "content_preview", "access_count"} for t in stats["top_accessed"]),
          f"top_accessed objects: {stats['top_accessed']}")
    check((await ok("get_unique_tags"))["tags"] == ["lint", "python"], "unique tags")
    check("python" in (await ok("get_canonical_tags"))["tags"], "canonical tags")
    check((await ok("get_tag_frequencies"))["frequencies"]["python"] == 1, "frequencies")
    check((await ok("get_tag_weights"))["weights"]["lint"] > 1.0, "weights")
    snap = await ok("snapshot_create", description="before normalizing")
    check(snap["created_at"].endswith("Z"), f"snapshot created_at: {snap}")
    preview = await ok("tag_normalize_preview", threshold=0.9, max_changes=10)
    applied = await ok("tag_normalize_apply", preview_id=preview["preview_id"],
                       snapshot_id=snap["snapshot_id"], threshold=0.9, max_changes=10)
    check(applied["applied_count"] == preview["planned_updates"], f"apply: {applied}")
    await ok("update_memory", memory_id=mid, tags=["tooling"])
    restored = await ok("snapshot_restore", snapshot_id=snap["snapshot_id"])
    check(restored["restored_count"] == snap["memory_count"] == 2, f"restore counts as vmm: {restored}")
    check(restored["changed_count"] == 1, f"restore changed: {restored}")
    check((await ok("get_by_memory_id", memory_id=mid))["memory"]["tags"] == ["python", "lint"], "restored tags")
    fb = await ok("feedback", memory_id=mid, feedback="helpful")
    check(fb["helpful_count"] == 1, "feedback")
    changed = await ok("update_memory", memory_id=mid, content="use ruff format and ruff check before committing")
    check((await ok("lineage", memory_id=changed["memory_id"]))["lineage"][0]["id"] == mid, "lineage")
    hist = await ok("history", memory_id=mid)
    check(hist["memory_id"] == changed["memory_id"] and hist["count"] == 2, f"history: {hist}")
    cleared = await ok("clear_old_memories", days_old=30, max_to_keep=100)
    check(cleared["deleted_count"] == 0, "clear_old_memories keeps young memories")
    await ok("store_memory", content="friday deploys go out from the release branch",
             skip_hooks=["semantic_dedup"])
    await ok("store_memory", content="Friday deploys go out from the release branch.",
                    skip_hooks=["semantic_dedup"])
    groups = await ok("compact_preview", distance=0.3)
    check(len(groups["groups"]) == 1, f"compact preview: {groups}")
    compacted = await ok("compact_apply", distance=0.3, preview_id=groups["preview_id"])
    undone = await ok("compact_undo", memory_id=compacted["merged"][0][0])
    check(len(undone["restored"]) == 2, f"undo: {undone}")
    await ok("delete_by_memory_id", memory_id=undone["restored"][0])

    await ok("create_user", user_id="ada")
    await ok("create_agent", user_id="ada", agent_id="helper")
    await ok("create_session", user_id="ada", session_id="chat-1", agent_id="helper")
    check((await ok("get_user", user_id="ada"))["user"]["id"] == "ada", "get_user")
    check((await ok("get_agent", user_id="ada", agent_id="helper"))["agent"]["id"] == "helper", "get_agent")
    check((await ok("get_session", user_id="ada", session_id="chat-1"))["session"]["id"] == "chat-1", "get_session")
    check({u["id"] for u in (await ok("list_users"))["users"]} == {"ada", "default"}, "list_users")
    check((await ok("list_agents", user_id="ada"))["count"] == 1, "list_agents")
    check((await ok("list_sessions", user_id="ada"))["count"] == 1, "list_sessions")
    msgs = await ok("add_messages", user_id="ada", session_id="chat-1",
                    messages=[{"role": "user", "content": "my laptop does not boot"},
                              {"role": "assistant", "content": "try holding the power button"}])
    check(msgs["count"] == 2, "add_messages")
    know = await ok("add_knowledge", user_id="ada", items=["ada uses a thinkpad"])
    check(know["stored"] == 1, "add_knowledge")
    q = await ok("query", user_id="ada", query="laptop boot", session_id="chat-1", store_type="keyword", top_k=3)
    check(q["status"] == "success" and q["data"]["results"][0]["metadata"]["scope"] == "in_session", f"query: {q}")
    check((await ok("delete_session", user_id="ada", session_id="chat-1"))["deleted_records"] == 2, "delete_session")
    await ok("delete_agent", user_id="ada", agent_id="helper")
    check((await ok("delete_user", user_id="ada"))["deleted_records"] == 1, "delete_user")

    # A bad argument is the tool's error, with a message; the session goes on.
    err, bad = await call("search_memories", query="x", limit="ten")
    check(err and bad["code"] == "invalid" and bad["field"] == "limit", f"bad argument: {bad}")
    err, unknown_arg = await call("search_memories", query="x", catgory="security")
    check(err and "catgory" in unknown_arg["message"], f"unknown argument: {unknown_arg}")

    missing_calls = sorted(set(tools) - called)
    check(not missing_calls, f"tools never called: {missing_calls}")
    print(f"mcp client over {transport}: initialize, tools/list ({len(tools)} tools) and every tool called; all checks passed")


async def main_stdio(binary, store_dir):
    params = StdioServerParameters(
        command=binary, args=["mcp", "--data-dir", store_dir, "--embedder", "hashing"])
    async with stdio_client(params) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await exercise(session, "stdio")


async def main_http(url, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await exercise(session, "streamable http")


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        asyncio.run(main_stdio(sys.argv[2], sys.argv[3]))
    else:
        asyncio.run(main_http(*sys.argv[2:]))
