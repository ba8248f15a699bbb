"""A amberdb client as a user would write it: Python's standard library only (socket + json).

Usage: python3 stdlib_client.py HOST PORT
Stores notes, searches them, pipelines tagged requests, and checks every reply.
"""
import json
import socket
import sys


class Amberdb:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.file = self.sock.makefile("rwb")

    def call(self, command, **args):
        line = command + (" " + json.dumps(args) if args else "") + "\n"
        self.file.write(line.encode())
        self.file.flush()
        return json.loads(self.file.readline())

    def pipeline(self, requests):
        for tag, command, args in requests:
            self.file.write(f"@{tag} {command} {json.dumps(args)}\n".encode())
        self.file.flush()
        return [json.loads(self.file.readline()) for _ in requests]


def check(cond, what):
    if not cond:
        print("FAILED:", what)
        sys.exit(1)


def main():
    db = Amberdb(sys.argv[1], int(sys.argv[2]))
    check(db.call("PING") == {"ok": True, "reply": "PONG"}, "PING")

    stored = db.call("STORE_MEMORY", content="pytest -x stops at the first failure; -k selects tests by name",
                     category="tool-usage", tags=["python", "testing"])
    check(stored["ok"] and stored["success"] and stored["outcome"] == "stored", f"store: {stored}")
    note = stored["memory_id"]

    dup = db.call("STORE", content="pytest -x stops at the first failure; -k selects tests by name")
    # A duplicate is an outcome, not an error: ok, "duplicate", the existing id.
    check(dup["ok"] and dup["outcome"] == "duplicate" and dup["memory_id"] == note, f"duplicate: {dup}")

    found = db.call("SEARCH", query="pytest", mode="keyword")
    check(found["ok"] and [r["id"] for r in found["results"]] == [note], f"search: {found}")
    check(found["results"][0]["tags"] == ["python", "testing"], "tags come back")

    # Unicode survives the round trip, one reply per line.
    uni = db.call("STORE", content="naïve café ☕ — 日本語 notes\nwith a second line")
    check(uni["ok"], f"unicode store: {uni}")
    got = db.call("GET", memory_id=uni["memory_id"])
    check(got["memory"]["content"] == "naïve café ☕ — 日本語 notes\nwith a second line", f"unicode get: {got}")

    # Pipelined, tagged: replies come back in order with their tags.
    reqs = [(f"p{i}", "STORE", {"content": f"pipelined python note {i}"}) for i in range(50)]
    reqs.append(("last", "SEARCH", {"query": "pipelined python note", "mode": "text", "limit": 50,
                                "deduplicate": False}))
    replies = db.pipeline(reqs)
    check([r["tag"] for r in replies] == [t for t, _, _ in reqs], "tags in order")
    check(all(r["ok"] for r in replies), "all pipelined ok")
    check(replies[-1]["count"] == 50, f"the search sees all 50: {replies[-1]['count']}")

    err = db.call("SEARCH", query="x", limit=500)
    check(not err["ok"] and err["code"] == "limit_exceeded" and err["field"] == "limit", f"error: {err}")

    stats = db.call("STATS")
    check(stats["ok"] and stats["store"]["memories"] == 52, f"stats: {stats['store']}")
    bye = db.call("QUIT")
    check(bye["reply"] == "BYE", "QUIT")
    check(db.file.readline() == b"", "closed after QUIT")
    print("python client: all checks passed")


if __name__ == "__main__":
    main()
