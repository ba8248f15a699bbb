// A LangGraph.js `BaseStore` on amberdb, like the Python package's `AmberStore`
// (docs/python.md, "LangGraph"): a namespace ["users", "alice"] is the amberdb user
// "users.alice" (labels are non-empty and hold no "."), an item is amberdb's item under its key
// (PUT_ITEM), found by the text of its indexed fields (default: the whole value as JSON);
// `search` with a query ranks by cosine similarity over the namespaces under the prefix and
// merges them by score, without one it lists in namespace then key order; `filter` is matched
// against each value (equality, or $eq $ne $gt $gte $lt $lte); a `null` value deletes.
import {
  BaseStore,
  type GetOperation,
  type Item,
  type ListNamespacesOperation,
  type MatchCondition,
  type Operation,
  type OperationResults,
  type PutOperation,
  type SearchItem,
  type SearchOperation,
} from "@langchain/langgraph-checkpoint";
import { AmberClient, type ClientOptions } from "./client.js";

/** The amberdb user a namespace maps to. */
export function namespaceUser(namespace: string[]): string {
  if (namespace.length === 0) throw new Error("a namespace has at least one label");
  for (const label of namespace) {
    if (!label || label.includes(".")) {
      throw new Error(`namespace label ${JSON.stringify(label)}: labels are non-empty strings without "."`);
    }
  }
  return namespace.join(".");
}

const PAGE = 50;
const MAX_TEXT_CHARS = 10_000;

interface Memory {
  key: string;
  value: Record<string, unknown> | string;
  created_at: string;
  updated_at: string;
  similarity?: number | null;
  score?: number;
}

export class AmberStore extends BaseStore {
  readonly client: AmberClient;
  private readonly fields?: string[];

  /** `fields`: the value's fields whose text an item is found by (default: all of it). */
  constructor(options: ClientOptions & { fields?: string[] }) {
    super();
    this.client = new AmberClient(options);
    this.fields = options.fields;
  }

  async batch<Op extends Operation[]>(operations: Op): Promise<OperationResults<Op>> {
    const results = [];
    for (const op of operations) results.push(await this.one(op));
    return results as OperationResults<Op>;
  }

  private async one(op: Operation): Promise<unknown> {
    if ("namespacePrefix" in op) return this.searchOp(op as SearchOperation);
    if ("value" in op) return this.putOp(op as PutOperation);
    if ("key" in op) return this.getOp(op as GetOperation);
    return this.listNamespacesOp(op as ListNamespacesOperation);
  }

  private async getOp(op: GetOperation): Promise<Item | null> {
    const r = await this.client.getItem(op.key, namespaceUser(op.namespace));
    return r.found ? item(r.item as unknown as Memory, op.namespace) : null;
  }

  private async putOp(op: PutOperation): Promise<void> {
    const user = namespaceUser(op.namespace);
    if (op.value === null) {
      await this.client.deleteItem(op.key, user);
      return;
    }
    await this.client.putItem(op.key, op.value, this.text(op.key, op.value, op.index), user);
  }

  private text(key: string, value: Record<string, unknown>, index?: false | string[]): string {
    if (index === false) return key;
    const fields = index ?? this.fields;
    const parts = fields
      ? fields.map((f) => f.split(".").reduce<unknown>((v, k) => (v as Record<string, unknown>)?.[k], value))
      : [value];
    const text = parts
      .filter((p) => p !== undefined && p !== null)
      .map((p) => (typeof p === "string" ? p : JSON.stringify(p)))
      .join("\n")
      .trim();
    return text ? text.slice(0, MAX_TEXT_CHARS) : key;
  }

  private async users(prefix: string[]): Promise<string[]> {
    if (prefix.length) namespaceUser(prefix);
    const r = await this.client.itemUsers();
    const all = (r.users as Array<{ user_id: string }>).map((u) => u.user_id);
    return all
      .filter((u) => prefix.every((label, i) => u.split(".")[i] === label))
      .sort();
  }

  private async searchOp(op: SearchOperation): Promise<SearchItem[]> {
    const limit = op.limit ?? 10;
    const offset = op.offset ?? 0;
    const wanted = offset + limit;
    const found: SearchItem[] = [];
    for (const user of await this.users(op.namespacePrefix)) {
      const namespace = user.split(".");
      // Without a filter every hit counts: no namespace needs more than `wanted`.
      let kept = 0;
      for (let from = 0; kept < wanted; from += PAGE) {
        const page = Math.min(PAGE, op.filter ? PAGE : wanted);
        let memories: Memory[];
        let more: boolean;
        if (op.query) {
          const r = await this.client.search(op.query.slice(0, 1000), {
            user_id: user, kind: "item", strategy: "similarity", limit: page, offset: from, count_access: false,
          });
          memories = r.results as unknown as Memory[];
          more = Boolean(r.has_more);
        } else {
          const r = await this.client.listItems({ user_id: user, offset: from, limit: page });
          memories = r.items as unknown as Memory[];
          more = memories.length === page;
        }
        for (const m of memories) {
          const it: SearchItem = item(m, namespace);
          if (op.filter && !matches(it.value, op.filter)) continue;
          if (op.query) it.score = m.similarity ?? m.score;
          found.push(it);
          kept++;
        }
        if (!more) break;
      }
    }
    if (op.query) found.sort((a, b) => (b.score ?? 0) - (a.score ?? 0));
    return found.slice(offset, wanted);
  }

  private async listNamespacesOp(op: ListNamespacesOperation): Promise<string[][]> {
    let namespaces = (await this.users([])).map((u) => u.split("."));
    for (const c of op.matchConditions ?? []) namespaces = namespaces.filter((ns) => nsMatches(c, ns));
    if (op.maxDepth !== undefined) {
      const seen = new Map(namespaces.map((ns) => [ns.slice(0, op.maxDepth).join("\u0000"), ns.slice(0, op.maxDepth)]));
      namespaces = [...seen.values()];
    }
    namespaces.sort((a, b) => a.join(".").localeCompare(b.join(".")));
    return namespaces.slice(op.offset, op.offset + op.limit);
  }
}

function item(m: Memory, namespace: string[]): Item {
  const value = typeof m.value === "string" ? (JSON.parse(m.value) as Record<string, unknown>) : m.value;
  return { value, key: m.key, namespace, createdAt: new Date(m.created_at), updatedAt: new Date(m.updated_at) };
}

function nsMatches(c: MatchCondition, ns: string[]): boolean {
  if (ns.length < c.path.length) return false;
  const part = c.matchType === "prefix" ? ns.slice(0, c.path.length) : ns.slice(ns.length - c.path.length);
  return c.path.every((p, i) => p === "*" || p === part[i]);
}

function matches(value: Record<string, unknown>, filter: Record<string, unknown>): boolean {
  return Object.entries(filter).every(([k, cond]) => {
    const v = value[k];
    if (cond && typeof cond === "object" && !Array.isArray(cond)) {
      return Object.entries(cond as Record<string, unknown>).every(([op, x]) => {
        switch (op) {
          case "$eq": return v === x;
          case "$ne": return v !== x;
          case "$gt": return (v as number) > (x as number);
          case "$gte": return (v as number) >= (x as number);
          case "$lt": return (v as number) < (x as number);
          case "$lte": return (v as number) <= (x as number);
          default: throw new Error(`filter operator ${op} is not one of $eq $ne $gt $gte $lt $lte`);
        }
      });
    }
    return JSON.stringify(v) === JSON.stringify(cond);
  });
}
