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
  AmberClient, BusyError, ForbiddenError, InvalidError, MovedError, NotFoundError, UnauthorizedError,
  partitionOfUser, safeToRetry,
} from "../src/index.js";
import { AmberStore, namespaceUser } from "../src/langgraph.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..", "..");
const bin = process.env.AMBERDB_BIN ?? join(root, "target", "debug", "amberdb");
const servers: ChildProcess[] = [];
after(() => servers.forEach((s) => s.kill("SIGKILL")));

async function serve(extra: string[] = [], onChild?: (c: ChildProcess) => void): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "amberdb-ts-"));
  const child = spawn(bin, ["serve", "--embedder", "hashing", "--port", "0", "--http", "127.0.0.1:0",
    "--data-dir", join(dir, "store"), ...extra], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, AMBERDB_LOG: "warn" } });
  servers.push(child);
  if (onChild !== undefined) onChild(child);
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

test("a cluster's nodes: moved is followed, reads see their writes, a dead owner is waited out", async () => {
  const { execFileSync } = await import("node:child_process");
  const nats = execFileSync(join(root, "scripts", "nats-server")).toString().trim();
  const dir = mkdtempSync(join(tmpdir(), "amberdb-ts-nats-"));
  const port = 20000 + Math.floor(Math.random() * 20000);
  writeFileSync(join(dir, "nats.conf"), `listen: 127.0.0.1:${port}\nmax_payload: 8MB\njetstream { store_dir: "${join(dir, "js")}", sync_interval: always }\n`);
  servers.push(spawn(nats, ["-c", join(dir, "nats.conf")], { stdio: "ignore" }));
  const url = `nats://127.0.0.1:${port}`;
  const partitions = 4;
  for (let i = 0; ; i++) {
    try {
      execFileSync(bin, ["cluster", "init", "--nats", url, "--partitions", String(partitions), "--replicas", "1", "--embedder", "hashing", "--unchecked-servers"], { stdio: "pipe" });
      break;
    } catch (e) {
      if (i > 100) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const children: ChildProcess[] = [];
  const urls = [
    await serve(["--cluster", url, "--node", "n0"], (c) => children.push(c)),
    await serve(["--cluster", url, "--node", "n1"], (c) => children.push(c)),
  ];
  const c = new AmberClient({ baseUrl: urls[0]!, baseUrls: [urls[1]!] });
  const owners = async (via: AmberClient) => {
    const stats = (await via.stats()) as unknown as { cluster: { partitions: { partition: number; owner: string | null }[] } };
    return stats.cluster.partitions.map((p) => p.owner);
  };
  for (let deadline = Date.now() + 30000; (await owners(c)).includes(null); ) {
    assert.ok(Date.now() < deadline, "every partition gets an owner");
    await new Promise((r) => setTimeout(r, 100));
  }
  const userIn = async (p: number, prefix: string) => {
    for (let i = 0; ; i++) if ((await partitionOfUser(`${prefix}-${i}`, partitions)) === p) return `${prefix}-${i}`;
  };
  // Straight to a node that does not own the partition: 421, naming the owner.
  const held = await owners(c);
  const plain = new AmberClient({ baseUrl: held[0] === "n0" ? urls[1]! : urls[0]!, failoverWaitMs: 0 });
  await assert.rejects(plain.store("sent to a replica", { user_id: await userIn(0, "probe") }),
    (e: unknown) => e instanceof MovedError && e.status === 421 && e.ownerUrl === urls[held[0] === "n0" ? 0 : 1]);
  const stored = new Map<number, string>();
  for (let p = 0; p < partitions; p++) {
    const r = await c.store(`a fact of partition ${p}`, { user_id: await userIn(p, "user") });
    assert.equal(Math.floor(r.memory_id / 2 ** 40), p);
    stored.set(r.memory_id, `a fact of partition ${p}`);
  }
  for (const [id, content] of stored) {
    assert.equal(((await c.get(id)).memory as { content: string }).content, content);
  }
  // The owner of partition 0 dies: the next write to it is acknowledged by the other node.
  const dead = held[0] === "n0" ? 0 : 1;
  children[dead]!.kill("SIGKILL");
  const started = Date.now();
  const after = await c.store("after the owner died", { user_id: await userIn(0, "after") });
  assert.equal(Math.floor(after.memory_id / 2 ** 40), 0);
  assert.ok(Date.now() - started < 15000);
  const survivor = new AmberClient({ baseUrl: urls[1 - dead]! });
  for (const [id, content] of stored) {
    assert.equal(((await survivor.get(id)).memory as { content: string }).content, content);
  }
});
