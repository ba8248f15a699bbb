"""The MemFuse SDK (`memfuse==0.3.3` from PyPI, unchanged) pointed at `amberdb serve --http`.

Usage: python memfuse_client.py BASE_URL API_KEY
`MemFuse(base_url=...).init()`, `add()` and `query()` as its README shows them, each reply
checked against the schemas of MemFuse's own contract tests (tests/contract in MemFuse's
repository: the envelope, a query result, an error), except where amberdb departs on purpose
(docs/http.md, "MemFuse": top_k 1..=50, hybrid accepted, validation errors in the envelope).
"""
import sys

import jsonschema
from memfuse import MemFuse
from memfuse.utils import MemFuseHTTPError

SUCCESS = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["success"]},
        "code": {"type": "integer"},
        "data": {"type": "object"},
        "message": {"type": "string"},
        "errors": {"type": "null"},
    },
    "required": ["status", "code", "data", "message", "errors"],
    "additionalProperties": False,
}
ERROR = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["error"]},
        "code": {"type": "integer"},
        "data": {"type": "null"},
        "message": {"type": "string"},
        "errors": {"type": "array", "items": {
            "type": "object",
            "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            "required": ["field", "message"], "additionalProperties": False}},
    },
    "required": ["status", "code", "data", "message", "errors"],
    "additionalProperties": False,
}
RESULT = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "content": {"type": "string"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "type": {"type": "string", "enum": ["message", "knowledge"]},
        "role": {"type": ["string", "null"]},
        "created_at": {"type": ["string", "null"]},
        "updated_at": {"type": ["string", "null"]},
        "metadata": {
            "type": "object",
            "properties": {
                "user_id": {"type": "string"},
                "agent_id": {"type": ["string", "null"]},
                "session_id": {"type": ["string", "null"]},
                "session_name": {"type": ["string", "null"]},
                "scope": {"type": ["string", "null"], "enum": ["in_session", "cross_session", None]},
                "level": {"type": "integer"},
                "retrieval": {"type": "object", "properties": {"source": {"type": "string"}},
                              "required": ["source"]},
            },
            "required": ["user_id", "level", "retrieval"],
        },
    },
    "required": ["id", "content", "score", "type", "metadata"],
    "additionalProperties": False,
}
QUERY = dict(SUCCESS, properties=dict(SUCCESS["properties"], data={
    "type": "object",
    "properties": {"results": {"type": "array", "items": RESULT}, "total": {"type": "integer", "minimum": 0}},
    "required": ["results", "total"], "additionalProperties": False}))


def check(cond, what):
    if not cond:
        print("FAILED:", what)
        sys.exit(1)


def valid(body, schema, what):
    try:
        jsonschema.validate(body, schema)
    except jsonschema.ValidationError as e:
        check(False, f"{what}: {e.message} in {body}")


def main(base_url, api_key):
    client = MemFuse(base_url=base_url, api_key=api_key)
    memory = client.init(user="alice", agent="planner", session="trip-planning")
    check(memory.user_id == "alice", f"user id: {memory.user_id}")
    added = memory.add([
        {"role": "user", "content": "I am flying to Lisbon on the third of May"},
        {"role": "assistant", "content": "Noted: Lisbon, May 3. Do you need a hotel?"},
    ])
    valid(added, SUCCESS, "add")
    check(len(added["data"]["message_ids"]) == 2, f"add: {added}")
    check(all(isinstance(i, str) for i in added["data"]["message_ids"]), "message ids are strings")

    found = memory.query("when do I fly to Lisbon", top_k=3)
    valid(found, QUERY, "query")
    check(found["code"] == 200 and found["data"]["total"] >= 1, f"query: {found}")
    check("Lisbon" in found["data"]["results"][0]["content"], f"query result: {found}")
    scoped = memory.query("Lisbon hotel", session_id=memory.session_id, top_k=5)
    valid(scoped, QUERY, "query in a session")
    check(all(r["metadata"]["scope"] == "in_session" for r in scoped["data"]["results"]), f"scope: {scoped}")
    check(scoped["data"]["results"][0]["metadata"]["session_id"] == memory.session_id, "MemFuse's session id back")

    # init again: the same user and session are found, not made twice.
    again = client.init(user="alice", agent="planner", session="trip-planning")
    check(again.session_id == memory.session_id, f"same session: {again.session_id} vs {memory.session_id}")
    other = client.init(user="bob")
    check(other.session_id != memory.session_id, "a session of its own")
    check(other.query("Lisbon", top_k=5)["data"]["total"] == 0, "bob does not see alice's turns")

    def error(call, status, what):
        try:
            call()
        except MemFuseHTTPError as e:
            check(e.status_code == status, f"{what}: {e.status_code} {e.response_data}")
            valid(e.response_data, ERROR, what)
            return e.response_data
        check(False, f"{what}: no error")

    missing = error(lambda: client.users.query_sync(user_id="nobody", query="x"), 404, "unknown user")
    check("not found" in missing["message"].lower(), f"unknown user message: {missing}")
    # Departures, on purpose: top_k outside 1..=50 is refused in the envelope.
    error(lambda: memory.query("x", top_k=99), 422, "top_k over 50")
    hybrid = memory.query("Lisbon", top_k=3, store_type="hybrid")
    valid(hybrid, QUERY, "hybrid")
    client.close()
    print("memfuse sdk: init, add and query against amberdb; all checks passed")


if __name__ == "__main__":
    main(*sys.argv[1:])
