// A client of amberdb's HTTP API (docs/http.md), on `fetch` and Web Crypto (Node >= 19 and browsers).
//
// Every command is `client.command(NAME, args)`, typed by the command table
// (src/generated.ts, generated from docs/openapi.json); the common ones have methods of their
// own. A failure is thrown as an `AmberError` of the error code's class, carrying the status
// and the error body. Requests are retried when the server said so (`429 busy`, `503
// unavailable` with `Retry-After`) or the connection failed before a reply: reads as they are,
// and every write with the request id it was first sent with (`Idempotency-Key`, a UUID
// version 7 the client makes unless the caller gave `request_id`), so the server answers a
// write sent again with its first attempt's reply and never runs it twice (docs/http.md,
// "Retries").
//
// A cluster's nodes (docs/cluster.md, "Routing"): `baseUrls` lists more of them. A write sent
// to a node that does not own its partition is answered `421 moved`: the client sends it on to
// the owner's HTTP URL the body names and stays there; `503 unavailable` naming a partition
// (no node owns it while a dead owner's lease lapses) and a node that does not answer are
// retried for up to `failoverWaitMs` (15 s), trying the URLs in turn; every read carries the
// `seq` of the client's last write to its partition as `min_seq`, so any node that answers
// has that write.

import { COMMAND_CLASS, type CommandName, type Commands } from "./generated.js";

/** A failed request; the subclass names the code (docs/http.md, "Statuses"). */
export class AmberError extends Error {
  /** The error code (`invalid`, `not_found`, ...). */
  readonly code: string;
  /** The HTTP status. */
  readonly status: number;
  /** The argument it names, if any. */
  readonly field?: string;
  /** The whole error body. */
  readonly body: Record<string, unknown>;

  constructor(status: number, body: Record<string, unknown>) {
    super(String(body.message ?? `HTTP ${status}`));
    this.name = new.target.name;
    this.status = status;
    this.code = String(body.code ?? "internal");
    this.body = body;
    if (typeof body.field === "string") this.field = body.field;
  }
}
/** `bad_request`, `invalid`: the request was refused and changed nothing. */
export class InvalidError extends AmberError {}
/** `not_found`, `unknown_command`. */
export class NotFoundError extends AmberError {}
/** `unauthorized`: no token, or a wrong one. */
export class UnauthorizedError extends AmberError {}
/** `forbidden`: another user's name, or a write with a read-only token. */
export class ForbiddenError extends AmberError {}
/** `already_exists`. */
export class ConflictError extends AmberError {}
/** `limit_exceeded`: a field, the body or the memory limit. */
export class LimitError extends AmberError {}
/** `busy`: not run; retry after `retryAfterMs`. */
export class BusyError extends AmberError {
  get retryAfterMs(): number {
    return Number(this.body.retry_after_ms ?? 1000);
  }
}
/** `moved`: a cluster node that does not own the partition; nothing ran. */
export class MovedError extends AmberError {
  /** The owner's HTTP URL, if it serves HTTP. */
  get ownerUrl(): string | undefined {
    return typeof this.body.http === "string" ? this.body.http : undefined;
  }
}
/** `unavailable`, `too_many_connections`, `disk_full`, `timeout`, `internal`. */
export class ServerError extends AmberError {}

const BY_CODE: Record<string, new (status: number, body: Record<string, unknown>) => AmberError> = {
  bad_request: InvalidError,
  invalid: InvalidError,
  not_found: NotFoundError,
  unknown_command: NotFoundError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  already_exists: ConflictError,
  limit_exceeded: LimitError,
  line_too_long: LimitError,
  busy: BusyError,
  moved: MovedError,
};

/** The error of a failed response. */
export function errorOf(status: number, body: Record<string, unknown>): AmberError {
  const Kind = BY_CODE[String(body.code)] ?? ServerError;
  return new Kind(status, body);
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Commands that change the store: each is sent with a request id. */
export function writes(command: CommandName): boolean {
  return COMMAND_CLASS[command] === "write";
}

/** Commands that may be sent again after a dropped connection or a `busy`: every command,
 * writes by their request id; only an unknown command is sent once. */
export function safeToRetry(command: CommandName): boolean {
  return COMMAND_CLASS[command] !== undefined;
}

/** A new request id: a UUID version 7 (RFC 9562), its first 48 bits the time in ms. */
export function requestId(now: number = Date.now()): string {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  let t = Math.floor(now);
  for (let i = 5; i >= 0; i--) {
    b[i] = t % 256;
    t = Math.floor(t / 256);
  }
  b[6] = (b[6]! & 0x0f) | 0x70;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The cluster partition of `userId` among `partitions` (docs/cluster.md: the first 8 bytes of
 * its sha256, little-endian, modulo the count). */
export async function partitionOfUser(userId: string, partitions: number): Promise<number> {
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(userId)));
  let v = 0n;
  for (let i = 7; i >= 0; i--) v = (v << 8n) | BigInt(digest[i]!);
  return Number(v % BigInt(Math.max(1, partitions)));
}

/** How a client reaches a server. */
export interface ClientOptions {
  /** `http://127.0.0.1:7734` (no trailing path). */
  baseUrl: string;
  /** A cluster's other nodes, tried in turn when one does not answer. */
  baseUrls?: string[];
  /** How long a request keeps trying through a cluster's failover (default 15000 ms). */
  failoverWaitMs?: number;
  /** A token of the server's token file, sent as `Authorization: Bearer`. */
  token?: string;
  /** Tries of a request that is safe to send again (default 3). */
  retries?: number;
  /** A `fetch` of your own (default: the global one). */
  fetch?: typeof fetch;
}

/** The client. */
export class AmberClient {
  private readonly urls: string[];
  private current: string;
  private readonly token?: string;
  private readonly retries: number;
  private readonly failoverWaitMs: number;
  private readonly fetchImpl: typeof fetch;
  /** What `moved` replies taught: the partition count. */
  private partitions?: number;
  /** The position of this client's last write to each partition. */
  private readonly written = new Map<number, number>();

  constructor(options: ClientOptions) {
    const trim = (u: string) => u.replace(/\/+$/, "");
    this.urls = [options.baseUrl, ...(options.baseUrls ?? [])].map(trim);
    this.current = this.urls[0]!;
    this.token = options.token;
    this.retries = Math.max(1, options.retries ?? 3);
    this.failoverWaitMs = Math.max(0, options.failoverWaitMs ?? 15000);
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** The position of this client's last acknowledged write to `partition`. */
  writtenSeq(partition: number): number | undefined {
    return this.written.get(partition);
  }

  /** Runs any command (`POST /v1/commands/{COMMAND}`). */
  async command<C extends CommandName>(name: C, args: Commands[C][0]): Promise<Commands[C][1]> {
    const tries = safeToRetry(name) ? this.retries : 1;
    const headers = this.headers();
    const given = { ...((args ?? {}) as Record<string, unknown>) };
    const write = writes(name);
    if (write && given.request_id === undefined) headers["idempotency-key"] = requestId();
    if (!write && given.min_seq === undefined) {
      const p = await this.partitionOf(given);
      const seq = p === undefined ? undefined : this.written.get(p);
      if (seq !== undefined) given.min_seq = seq;
    }
    const deadline = Date.now() + this.failoverWaitMs;
    const clustered = () => this.urls.length > 1 || this.partitions !== undefined;
    for (let attempt = 1, hops = 0; ; attempt++) {
      let response: Response;
      try {
        response = await this.fetchImpl(`${this.current}/v1/commands/${name}`, {
          method: "POST",
          headers,
          body: JSON.stringify(given),
        });
      } catch (e) {
        // No reply: sent again only when sending again is safe; in a cluster, to the next node.
        if (tries > 1 && clustered() && Date.now() < deadline) {
          this.current = this.urls[(this.urls.indexOf(this.current) + 1) % this.urls.length]!;
          await sleep(200);
          continue;
        }
        if (attempt < tries) continue;
        throw e;
      }
      const body = (await response.json()) as Record<string, unknown>;
      if (response.ok) {
        if (write && typeof body.partition === "number" && typeof body.seq === "number") {
          this.written.set(body.partition, Math.max(this.written.get(body.partition) ?? 0, body.seq));
        }
        return body as Commands[C][1];
      }
      const error = errorOf(response.status, body);
      if (error instanceof MovedError && Date.now() < deadline) {
        if (typeof body.partitions === "number") this.partitions = body.partitions;
        const owner = error.ownerUrl;
        if (owner !== undefined && !this.urls.includes(owner)) this.urls.push(owner);
        if (owner !== undefined) this.current = owner;
        if (++hops > 5 || owner === undefined) await sleep(200);
        continue;
      }
      if (response.status === 503 && body.code === "unavailable" && "partition" in body && Date.now() < deadline) {
        await sleep(Math.min(Math.max(Number(body.retry_after_ms ?? 200), 20), 1000));
        // The next node: this one may see the cluster through a cut-off NATS server.
        this.current = this.urls[(this.urls.indexOf(this.current) + 1) % this.urls.length]!;
        continue;
      }
      const again = response.status === 429 || (response.status === 503 && body.code === "unavailable");
      if (again && attempt < tries) {
        const seconds = Number(response.headers.get("retry-after") ?? "1");
        const ms = error instanceof BusyError ? error.retryAfterMs : seconds * 1000;
        await sleep(Math.min(ms, 5000));
        continue;
      }
      throw error;
    }
  }

  /** The partition a request's arguments name, when the client can tell. */
  private async partitionOf(args: Record<string, unknown>): Promise<number | undefined> {
    if (typeof args.memory_id === "number") return Math.floor(args.memory_id / 2 ** 40);
    if (this.partitions === undefined) return undefined;
    const user = typeof args.user_id === "string" ? args.user_id : "default";
    return partitionOfUser(user, this.partitions);
  }

  private headers(): Record<string, string> {
    const h: Record<string, string> = { "content-type": "application/json" };
    if (this.token) h.authorization = `Bearer ${this.token}`;
    return h;
  }

  /** Stores a memory; a duplicate is an outcome (`outcome: "duplicate"`), not an error. */
  store(content: string, args: Omit<Commands["STORE_MEMORY"][0], "content"> = {}) {
    return this.command("STORE_MEMORY", { ...args, content });
  }

  /** Searches by meaning, keywords or text (hybrid by default). */
  search(query: string, args: Omit<Commands["SEARCH_MEMORIES"][0], "query"> = {}) {
    return this.command("SEARCH_MEMORIES", { ...args, query });
  }

  /** One memory by id. */
  get(memoryId: number) {
    return this.command("GET_BY_MEMORY_ID", { memory_id: memoryId });
  }

  /** Changes a memory (new content gets a new id that supersedes the old). */
  update(memoryId: number, args: Omit<Commands["UPDATE_MEMORY"][0], "memory_id">) {
    return this.command("UPDATE_MEMORY", { ...args, memory_id: memoryId });
  }

  /** Deletes a memory. */
  delete(memoryId: number) {
    return this.command("DELETE_BY_MEMORY_ID", { memory_id: memoryId });
  }

  /** The most recent memories, newest first. */
  recent(args: Commands["LIST_RECENT_MEMORIES"][0] = {}) {
    return this.command("LIST_RECENT_MEMORIES", args);
  }

  /** A session's chat turns; a turn the session holds is skipped. */
  addMessages(sessionId: string, messages: Commands["ADD_MESSAGES"][0]["messages"], args: Omit<Commands["ADD_MESSAGES"][0], "session_id" | "messages"> = {}) {
    return this.command("ADD_MESSAGES", { ...args, session_id: sessionId, messages });
  }

  /** A value under a key, found by `text`. */
  putItem(key: string, value: Record<string, unknown>, text: string, userId?: string) {
    return this.command("PUT_ITEM", { key, value, text, user_id: userId });
  }

  /** The item under a key (`found: false` when none). */
  getItem(key: string, userId?: string) {
    return this.command("GET_ITEM", { key, user_id: userId });
  }

  /** Deletes the item under a key. */
  deleteItem(key: string, userId?: string) {
    return this.command("DELETE_ITEM", { key, user_id: userId });
  }

  /** A user's items in key order. */
  listItems(args: Commands["LIST_ITEMS"][0] = {}) {
    return this.command("LIST_ITEMS", args);
  }

  /** Users with items, and how many each. */
  itemUsers() {
    return this.command("LIST_ITEM_USERS", {});
  }

  /** The server's counters. */
  stats() {
    return this.command("STATS", {});
  }
}
