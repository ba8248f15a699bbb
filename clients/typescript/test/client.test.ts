// The client and the LangGraph.js store against a real `amberdb serve --http` (the binary of
// AMBERDB_BIN, else this clone's target/debug/amberdb), with Node's own test runner.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import {
  AmberClient, BusyError, ForbiddenError, InvalidError, NotFoundError, UnauthorizedError, safeToRetry,
} from "../src/index.js";
import { AmberStore, namespaceUser } from "../src/langgraph.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..", "..");
const bin = process.env.AMBERDB_BIN ?? join(root, "target", "debug", "amberdb");
const servers: ChildProcess[] = [];
after(() => servers.forEach((s) => s.kill("SIGKILL")));

async function serve(extra: string[] = []): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "amberdb-ts-"));
  const child = spawn(bin, ["serve", "--embedder", "hashing", "--port", "0", "--http", "127.0.0.1:0",
    "--data-dir", join(dir, "store"), ...extra], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, AMBERDB_LOG: "warn" } });
  servers.push(child);
  const lines = createInterface({ input: child.stdout! });
  for await (const line of lines) {
    if (line.startsWith("http on ")) return line.slice("http on ".length);
  }
  throw new Error("the server printed no HTTP address");
}

test("the generated types are what docs/openapi.json gives", async () => {
  const { execFileSync } = await import("node:child_process");
  const fresh = execFileSync("node", [join(here, "..", "..", "tools", "generate.mjs"), join(root, "docs", "openapi.json"), "-"]);
  const committed = readFileSync(join(here, "..", "..", "src", "generated.ts"));
  assert.ok(fresh.equals(committed), "src/generated.ts is stale: run `npm run generate`");
});

test("stores, finds, updates and deletes, with the server's own replies", async () => {
  const c = new AmberClient({ baseUrl: await serve() });
  const stored = await c.store("the deploy needs the staging key", { tags: ["deploy"], user_id: "ada" });
  assert.equal(stored.outcome, "stored");
  const again = await c.store("the deploy needs the staging key", { user_id: "ada" });
  assert.equal(again.outcome, "duplicate", "a duplicate is an outcome");
  assert.equal(again.memory_id, stored.memory_id);
  const found = await c.search("staging key", { user_id: "ada" });
  assert.equal((found.results[0] as { id: number }).id, stored.memory_id);
  const got = await c.get(stored.memory_id);
  assert.equal((got.memory as { content: string }).content, "the deploy needs the staging key");
  const updated = await c.update(stored.memory_id, { content: "the deploy needs the production key" });
  assert.notEqual(updated.memory_id, stored.memory_id);
  await c.delete(updated.memory_id);
  await assert.rejects(c.get(updated.memory_id), NotFoundError);
  const added = await c.addMessages("s1", [{ role: "user", content: "I moved to Lisbon", id: "m1" }], { user_id: "ada" });
  assert.equal(added.count, 1);
  const resent = await c.addMessages("s1", [{ role: "user", content: "I moved to Lisbon", id: "m1" }], { user_id: "ada" });
  assert.equal(resent.count, 0, "a turn sent again is skipped");
  const stats = await c.stats();
  assert.ok(stats.requests > 0);
});

test("failures are typed errors with the code, status and field", async () => {
  const c = new AmberClient({ baseUrl: await serve() });
  await assert.rejects(c.search("x", { limit: 500 }), (e: unknown) => {
    assert.ok(e instanceof Error && e.name === "LimitError");
    return true;
  });
  await assert.rejects(c.command("SEARCH_MEMORIES", { query: "x", limit: "ten" as unknown as number }), (e: unknown) => {
    assert.ok(e instanceof InvalidError);
    assert.equal(e.status, 400);
    assert.equal(e.field, "limit");
    return true;
  });
  await assert.rejects(c.command("NOPE" as "PING", {}), NotFoundError);
  assert.equal(safeToRetry("SEARCH_MEMORIES"), true);
  assert.equal(safeToRetry("NOPE" as "PING"), false);
  assert.equal(new BusyError(429, { code: "busy", message: "m", retry_after_ms: 7 }).retryAfterMs, 7);
});

test("tokens: a wrong one is 401, a user-bound one cannot name another user, ro cannot write", async () => {
  const dir = mkdtempSync(join(tmpdir(), "amberdb-ts-tokens-"));
  const tokens = join(dir, "tokens");
  writeFileSync(tokens, "ada ada-s3cret\nro ro-s3cret\n");
  const url = await serve(["--token-file", tokens]);
  await assert.rejects(new AmberClient({ baseUrl: url, token: "wrong" }).stats(), UnauthorizedError);
  const ada = new AmberClient({ baseUrl: url, token: "ada-s3cret" });
  await ada.store("ada's note");
  await assert.rejects(ada.store("x", { user_id: "bob" }), ForbiddenError);
  const ro = new AmberClient({ baseUrl: url, token: "ro-s3cret" });
  assert.equal((await ro.recent({ user_id: "ada" })).total, 1);
  await assert.rejects(ro.store("no"), ForbiddenError);
});

test("a write whose reply was lost is sent again with its request id and runs once", async () => {
  const url = await serve();
  let calls = 0;
  const keys: string[] = [];
  // The first call reaches the server and runs; its reply is lost on the way back.
  const flaky: typeof fetch = async (input, init) => {
    calls++;
    keys.push(String((init?.headers as Record<string, string>)["idempotency-key"]));
    const reply = await fetch(input, init);
    if (calls === 1) throw new TypeError("fetch failed");
    return reply;
  };
  const c = new AmberClient({ baseUrl: url, fetch: flaky });
  const stored = await c.store("stored once though sent twice", { user_id: "ada" });
  assert.equal(calls, 2);
  assert.equal(stored.outcome, "stored", "the first attempt's reply, not a duplicate");
  assert.equal(keys[0], keys[1], "the same request id both times");
  assert.match(keys[0]!, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const plain = new AmberClient({ baseUrl: url });
  assert.equal((await plain.recent({ user_id: "ada" })).total, 1);
  // A delete too: sent again, answered as the first time (not "not found").
  calls = 0;
  await c.delete(stored.memory_id);
  assert.equal(calls, 2);
  await assert.rejects(plain.get(stored.memory_id), NotFoundError);
  // A read is sent again as it is.
  calls = 0;
  assert.equal((await c.search("anything")).count, 0);
  assert.equal(calls, 2);
});

test("the LangGraph.js store puts, gets, searches, filters, lists and deletes", async () => {
  const store = new AmberStore({ baseUrl: await serve() });
  await store.put(["users", "alice"], "coffee", { text: "likes oat milk flat whites", kind: "drink", rating: 5 });
  await store.put(["users", "alice"], "city", { text: "lives in Lisbon", kind: "place", rating: 3 });
  await store.put(["users", "bob"], "coffee", { text: "drinks espresso", kind: "drink", rating: 4 });
  const got = await store.get(["users", "alice"], "coffee");
  assert.equal(got?.value.text, "likes oat milk flat whites");
  assert.deepEqual(got?.namespace, ["users", "alice"]);
  const hits = await store.search(["users"], { query: "oat milk flat white", limit: 2 });
  assert.equal(hits[0].key, "coffee");
  assert.deepEqual(hits[0].namespace, ["users", "alice"]);
  assert.ok(typeof hits[0].score === "number");
  const drinks = await store.search(["users"], { filter: { kind: "drink", rating: { $gte: 4 } } });
  assert.deepEqual(drinks.map((h) => h.namespace.join(".")).sort(), ["users.alice", "users.bob"]);
  assert.deepEqual(await store.listNamespaces({ prefix: ["users"] }), [["users", "alice"], ["users", "bob"]]);
  await store.delete(["users", "alice"], "coffee");
  assert.equal(await store.get(["users", "alice"], "coffee"), null);
  assert.throws(() => namespaceUser(["a.b"]), /without "\."/);
});
