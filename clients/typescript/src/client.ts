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
};

/** The error of a failed response. */
export function errorOf(status: number, body: Record<string, unknown>): AmberError {
  const Kind = BY_CODE[String(body.code)] ?? ServerError;
  return new Kind(status, body);
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

/** How a client reaches a server. */
export interface ClientOptions {
  /** `http://127.0.0.1:7734` (no trailing path). */
  baseUrl: string;
  /** A token of the server's token file, sent as `Authorization: Bearer`. */
  token?: string;
  /** Tries of a request that is safe to send again (default 3). */
  retries?: number;
  /** A `fetch` of your own (default: the global one). */
  fetch?: typeof fetch;
}

/** The client. */
export class AmberClient {
  private readonly baseUrl: string;
  private readonly token?: string;
  private readonly retries: number;
  private readonly fetchImpl: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.token = options.token;
    this.retries = Math.max(1, options.retries ?? 3);
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** Runs any command (`POST /v1/commands/{COMMAND}`). */
  async command<C extends CommandName>(name: C, args: Commands[C][0]): Promise<Commands[C][1]> {
    const tries = safeToRetry(name) ? this.retries : 1;
    const headers = this.headers();
    const given = (args ?? {}) as Record<string, unknown>;
    if (writes(name) && given.request_id === undefined) headers["idempotency-key"] = requestId();
    for (let attempt = 1; ; attempt++) {
      let response: Response;
      try {
        response = await this.fetchImpl(`${this.baseUrl}/v1/commands/${name}`, {
          method: "POST",
          headers,
          body: JSON.stringify(given),
        });
      } catch (e) {
        // No reply: sent again only when sending again is safe.
        if (attempt < tries) continue;
        throw e;
      }
      const body = (await response.json()) as Record<string, unknown>;
      if (response.ok) return body as Commands[C][1];
      const error = errorOf(response.status, body);
      const again = response.status === 429 || (response.status === 503 && body.code === "unavailable");
      if (again && attempt < tries) {
        const seconds = Number(response.headers.get("retry-after") ?? "1");
        const ms = error instanceof BusyError ? error.retryAfterMs : seconds * 1000;
        await new Promise((r) => setTimeout(r, Math.min(ms, 5000)));
        continue;
      }
      throw error;
    }
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
