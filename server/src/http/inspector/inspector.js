// The amberdb inspector (docs/http.md, "The inspector"): one page that shows what an agent
// remembers and why. It only reads: every call goes through `call`, which refuses any command
// outside READS (a server test checks that each is a read in the command table), and searches
// ask for `count_access: false`, so looking changes nothing, not even access counts. Text from
// the store is only ever set as `textContent`, never parsed as HTML.
"use strict";

const READS = Object.freeze([
  "LIST_USERS",
  "LIST_SESSIONS",
  "LIST_RECENT_MEMORIES",
  "HISTORY",
  "LINEAGE",
  "SEARCH_MEMORIES",
  "GET_MEMORY_STATS",
  "STATS",
]);
const TOKEN_KEY = "amberdb-inspector-token";
const USER_KEY = "amberdb-inspector-user";
const PAGE = 25;
const KINDS = ["memory", "message", "knowledge", "item"];
const CATEGORIES = [
  "code-solution", "bug-fix", "architecture", "learning", "tool-usage",
  "debugging", "performance", "security", "other",
];

// ---- calls ------------------------------------------------------------------------------

class Refused extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

let tokenWaiters = [];

/** Runs one read command; asks for a token once when the server wants one. */
async function call(command, args = {}) {
  if (!READS.includes(command)) throw new Error(`the inspector only reads: ${command} refused`);
  for (;;) {
    const headers = { "content-type": "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.authorization = `Bearer ${token}`;
    const response = await fetch(`/v1/commands/${command}`, {
      method: "POST",
      headers,
      body: JSON.stringify(args),
      credentials: "omit",
      cache: "no-store",
    });
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    if (response.status === 401) {
      await askToken(token ? "that token was refused" : "");
      continue;
    }
    if (!response.ok) throw new Refused(response.status, body);
    return body;
  }
}

function askToken(problem) {
  const form = document.getElementById("token-form");
  form.hidden = false;
  document.getElementById("token-error").textContent = problem;
  document.getElementById("token-input").focus();
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

function tokenGiven(event) {
  event.preventDefault();
  const input = document.getElementById("token-input");
  const token = input.value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  input.value = "";
  document.getElementById("token-form").hidden = true;
  const waiting = tokenWaiters;
  tokenWaiters = [];
  waiting.forEach((resolve) => resolve());
}

// ---- building the page ------------------------------------------------------------------

/** An element with attributes (`on*` are listeners, `style` an object) and children (strings
 * become text). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = String(value);
    // Style through the CSSOM: the policy refuses style attributes.
    else if (name === "style") Object.assign(node.style, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(testid, columns, rows) {
  return el(
    "table",
    { "data-testid": testid },
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { text: c })))),
    el("tbody", {}, rows),
  );
}

function facts(testid, pairs) {
  return el(
    "dl",
    { class: "facts", "data-testid": testid },
    pairs.flatMap(([name, value]) => [
      el("dt", { text: name }),
      el("dd", {}, value instanceof Node ? value : show(value)),
    ]),
  );
}

function show(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(4);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function when(t) {
  return t ? String(t).replace("T", " ").replace(/\.\d+Z$/, "Z") : "—";
}

function short(text, n = 160) {
  const s = String(text ?? "");
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

function memoryLink(id, label) {
  return el("a", { href: `#/memory/${id}`, "data-memory": id, text: label ?? `#${id}` });
}

function validity(m) {
  return `${when(m.valid_from)} → ${m.valid_to ? when(m.valid_to) : "open"}`;
}

function decisionText(d) {
  if (!d) return "";
  if (typeof d === "string") return d;
  const parts = [d.rule || d.kind || d.name, d.reason || d.why].filter(Boolean);
  return parts.length ? parts.join(": ") : JSON.stringify(d);
}

function status(text, isError = false) {
  const footer = document.getElementById("status");
  footer.textContent = text;
  footer.className = isError ? "error" : "";
}

function user() {
  return sessionStorage.getItem(USER_KEY) || undefined;
}

function withUser(args = {}) {
  const u = user();
  return u ? { ...args, user_id: u } : args;
}

// ---- views ------------------------------------------------------------------------------

async function usersView() {
  const reply = await call("LIST_USERS");
  const users = reply.users || [];
  const rows = users.map((u) =>
    el(
      "tr",
      { "data-user": u.id },
      el("td", {}, el("a", { href: "#/memories", onclick: () => pickUser(u.id), text: u.id })),
      el("td", { text: u.name ?? "" }),
      el("td", { text: when(u.created_at) }),
      el(
        "td",
        {},
        el("a", { href: "#/sessions", onclick: () => pickUser(u.id), text: "sessions" }),
      ),
    ),
  );
  const parts = [el("h2", { text: `Users (${users.length})` })];
  parts.push(users.length ? table("users", ["user", "name", "created", ""], rows)
    : el("p", { class: "empty", text: "No users yet." }));
  if (user()) {
    const s = await call("GET_MEMORY_STATS", withUser());
    parts.push(el("h3", { text: `${user()}: what it holds` }));
    parts.push(facts("user-stats", [
      ["live memories", s.total_memories],
      ["created this week", s.recent_week_count],
      ["categories", Object.entries(s.categories || {}).map(([c, n]) => `${c} ${n}`).join(", ")],
      ["archived (store)", s.archived],
      ["health", s.health_status],
    ]));
  }
  return parts;
}

async function sessionsView() {
  if (!user()) return [el("p", { class: "empty", text: "Pick a user first." })];
  const reply = await call("LIST_SESSIONS", withUser());
  const sessions = reply.sessions || [];
  const rows = sessions.map((s) =>
    el(
      "tr",
      { "data-session": s.id },
      el(
        "td",
        {},
        el("a", {
          href: `#/memories?session_id=${encodeURIComponent(s.id)}&kind=message`,
          text: s.id,
        }),
      ),
      el("td", { text: s.name ?? "" }),
      el("td", { text: s.agent_id ?? "" }),
      el("td", { text: when(s.created_at) }),
    ),
  );
  return [
    el("h2", { text: `Sessions of ${user()} (${sessions.length})` }),
    sessions.length ? table("sessions", ["session", "name", "agent", "created"], rows)
      : el("p", { class: "empty", text: "No sessions." }),
  ];
}

function select(name, options, value, any = "any") {
  return el(
    "select",
    { name, "aria-label": name },
    el("option", { value: "", text: any }),
    options.map(([v, label]) => el("option", { value: v, text: label, selected: v === value })),
  );
}

async function memoriesView(params) {
  if (!user()) return [el("p", { class: "empty", text: "Pick a user first." })];
  const offset = Number(params.get("offset") || 0);
  const args = withUser({ limit: PAGE, offset });
  for (const name of ["kind", "category", "session_id", "archived"]) {
    if (params.get(name)) args[name] = params.get(name);
  }
  if (params.get("tags")) args.tags = params.get("tags").split(",").map((t) => t.trim());
  if (params.get("valid")) args.valid = params.get("valid") === "true";
  const reply = await call("LIST_RECENT_MEMORIES", args);
  const form = el(
    "form",
    { id: "memory-filters", class: "filters", onsubmit: submitTo("memories") },
    select("kind", KINDS.map((k) => [k, k]), params.get("kind") || "", "every kind"),
    select("category", CATEGORIES.map((c) => [c, c]), params.get("category") || "", "every category"),
    el("input", { name: "tags", placeholder: "tags (any of, a,b)", value: params.get("tags") || "" }),
    el("input", { name: "session_id", placeholder: "session", value: params.get("session_id") || "" }),
    select("valid", [["true", "holds now"], ["false", "ended or not begun"]], params.get("valid") || "",
      "any validity"),
    select("archived", [["archived", "archived only"], ["all", "live and archived"]],
      params.get("archived") || "", "live only"),
    el("button", { type: "submit", text: "Filter" }),
  );
  const rows = reply.memories.map((m) =>
    el(
      "tr",
      { "data-memory-row": m.id, class: m.archived ? "archived" : "" },
      el("td", {}, memoryLink(m.id)),
      el("td", { text: m.kind }),
      el("td", { text: m.category }),
      el("td", { text: (m.tags || []).join(", ") }),
      el("td", { class: "content", text: short(m.content) }),
      el("td", { text: when(m.created_at) }),
      el("td", { text: validity(m) }),
      el("td", {}, m.archived ? el("span", { class: "tag archived", text: "archived" }) : "live",
        m.decision ? el("div", { class: "decision", text: decisionText(m.decision) }) : null),
    ),
  );
  const page = (to) => {
    const next = new URLSearchParams(params);
    next.set("offset", String(to));
    return `#/memories?${next}`;
  };
  return [
    el("h2", { text: `Memories of ${user()}` }),
    form,
    el("p", { class: "count", "data-testid": "memory-total",
      text: `${reply.total} match; showing ${offset + 1}–${offset + reply.count}` }),
    reply.count
      ? table("memories", ["id", "kind", "category", "tags", "content", "created", "valid", "state"], rows)
      : el("p", { class: "empty", text: "Nothing matches." }),
    el("p", { class: "pager" },
      offset > 0 ? el("a", { href: page(Math.max(0, offset - PAGE)), text: "← newer" }) : null,
      reply.has_more ? el("a", { href: page(offset + PAGE), "data-testid": "older", text: "older →" }) : null),
  ];
}

/** A form's submit handler that shows `view` with the form's non-empty fields as its query. */
function submitTo(view) {
  return (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(event.target)) {
      if (String(value).trim()) params.set(name, String(value).trim());
    }
    location.hash = `#/${view}?${params}`;
  };
}

async function memoryView(arg) {
  const id = Number(arg);
  if (!Number.isSafeInteger(id) || id < 0) throw new Error(`not a memory id: ${arg}`);
  const history = await call("HISTORY", { memory_id: id });
  const lineage = await call("LINEAGE", { memory_id: id });
  const versions = history.versions || [];
  const head = versions.find((v) => v.status === "current") || versions[0];
  const parts = [el("h2", { text: `Memory #${id}` })];
  if (head) {
    const m = head.memory || head;
    parts.push(facts("memory", [
      ["content", m.content],
      ["kind", m.kind],
      ["category", m.category],
      ["tags", (m.tags || []).join(", ")],
      ["session", m.session_id],
      ["agent", m.agent_id],
      ["created", when(m.created_at)],
      ["validity", validity(m)],
      ["confidence", m.confidence],
      ["accesses", m.access_count],
      ["feedback", `${m.helpful_count} helpful, ${m.harmful_count} harmful`],
      ["supersedes", (m.supersedes || []).length
        ? el("span", {}, m.supersedes.map((s) => [memoryLink(s), " "])) : "—"],
    ]));
  }
  parts.push(el("h3", { text: `History: ${versions.length} version(s), newest first` }));
  parts.push(timeline(versions));
  const records = lineage.lineage || [];
  parts.push(el("h3", { text: `Lineage: ${records.length} archived record(s) it merged, superseded or replaced` }));
  parts.push(records.length
    ? table("lineage", ["id", "content", "created", "valid", "decision"], records.map((m) =>
      el("tr", { "data-lineage": m.id },
        el("td", {}, memoryLink(m.id)),
        el("td", { class: "content", text: short(m.content) }),
        el("td", { text: when(m.created_at) }),
        el("td", { text: validity(m) }),
        el("td", { text: decisionText(m.decision) || "—" }))))
    : el("p", { class: "empty", text: "Nothing in its lineage." }));
  return parts;
}

function timeline(versions) {
  const times = versions.flatMap((v) => {
    const m = v.memory || v;
    return [Date.parse(m.valid_from), m.valid_to ? Date.parse(m.valid_to) : Date.now()];
  }).filter((t) => !Number.isNaN(t));
  const start = Math.min(...times, Date.now());
  const end = Math.max(...times, start + 1);
  return el("ol", { class: "timeline", "data-testid": "timeline" }, versions.map((v) => {
    const m = v.memory || v;
    const from = Date.parse(m.valid_from);
    const to = m.valid_to ? Date.parse(m.valid_to) : Date.now();
    const left = ((from - start) / (end - start)) * 100;
    const width = Math.max(1, ((to - from) / (end - start)) * 100);
    return el(
      "li",
      { class: `version ${v.status}`, "data-version": m.id, "data-status": v.status },
      el("div", { class: "bar" }, el("span", { style: { left: `${left}%`, width: `${width}%` } })),
      el("div", {},
        el("span", { class: `tag ${v.status}`, text: v.status }), " ", memoryLink(m.id), " ",
        el("span", { class: "validity", text: validity(m) })),
      el("div", { class: "content", text: m.content }),
      m.decision ? el("div", { class: "decision", text: `decided by ${decisionText(m.decision)}` }) : null,
    );
  }));
}

async function searchView(params) {
  const query = params.get("q") || "";
  const form = el(
    "form",
    { id: "search-form", class: "filters", onsubmit: submitTo("search") },
    el("input", { name: "q", placeholder: "what to look for", value: query, size: 40, "aria-label": "query" }),
    select("mode", [["hybrid", "hybrid"], ["vector", "vector"], ["keyword", "keyword"], ["text", "text"]],
      params.get("mode") || "", "default mode"),
    select("fold", [["duplicates", "fold duplicates"], ["slots", "fold slots"]], params.get("fold") || "",
      "default folding"),
    el("label", {}, "neighbours ",
      el("input", { name: "neighbours", type: "number", min: 0, max: 8, value: params.get("neighbours") || "1" })),
    el("button", { type: "submit", text: "Search" }),
  );
  const parts = [el("h2", { text: `Search${user() ? ` ${user()}'s memories` : ""}` }), form];
  if (!query) return parts;
  const args = withUser({ query, limit: 10, count_access: false, neighbours: Number(params.get("neighbours") || 1) });
  for (const name of ["mode", "fold"]) if (params.get(name)) args[name] = params.get(name);
  const r = await call("SEARCH_MEMORIES", args);
  parts.push(facts("search-summary", [
    ["mode", r.mode], ["strategy", r.strategy], ["fallback", r.fallback],
    ["searched", r.total], ["folded away", r.folded_total],
  ]));
  parts.push(r.results.length ? el("ol", { class: "hits", "data-testid": "hits" }, r.results.map((h) =>
    el("li", { class: "hit", "data-hit": h.id },
      el("div", { class: "scores" },
        el("span", { class: "score", text: `score ${show(h.score)}` }),
        el("span", { text: `cosine ${show(h.similarity)}` }),
        el("span", { text: `bm25 ${show(h.keyword_score)}` }),
        el("span", { class: "source", text: `source ${h.source}` }),
        el("span", { class: "folded", text: `folded ${h.folded}` })),
      el("div", {}, memoryLink(h.id), ` ${h.kind} · ${h.category} · ${when(h.created_at)}`),
      el("div", { class: "content", text: h.content }),
      (h.context || []).length ? el("ul", { class: "neighbours" }, h.context.map((n) =>
        el("li", { "data-neighbour": n.memory_id },
          el("span", { class: "position", text: n.position > 0 ? `+${n.position}` : `${n.position}` }),
          ` ${n.role ?? ""} `, short(n.content, 200)))) : null)))
    : el("p", { class: "empty", text: "No results." }));
  return parts;
}

async function statsView() {
  const r = await call("STATS");
  const s = r.store || {};
  const m = s.maintenance || {};
  const ix = s.index || {};
  const counts = (c) => Object.entries(c || {}).map(([name, n]) => `${name} ${n}`).join(", ");
  return [
    el("h2", { text: "Store" }),
    facts("store", [
      ["version", r.version], ["uptime (s)", r.uptime_seconds],
      ["memories", s.memories], ["users", s.users], ["by kind", counts(s.by_kind)],
      ["by category", counts(s.by_category)],
      ["embedder", Array.isArray(s.embedder) ? s.embedder.join(", ") : s.embedder],
      ["log: last / durable / checkpoint", `${s.last_seq} / ${s.durable_seq} / ${s.checkpoint_seq}`],
      ["poisoned", s.poisoned ? `yes: ${show(s.poison_cause)}` : "no"],
      ["quarantined files", (s.quarantined || []).join(", ") || "none"],
      ["requests / errors", `${r.requests} / ${r.errors}`],
    ]),
    el("h3", { text: "Maintenance" }),
    facts("maintenance", Object.entries(m)),
    el("h3", { text: "Index" }),
    facts("index", [
      ["sealed segments", s.sealed_segments], ["rows not yet sealed", s.growing_rows],
      ["flat rows", ix.flat_rows], ["building", ix.building], ["builds / failures", `${ix.builds} / ${ix.failures}`],
      ["keyword index ready", s.lexical_ready], ["vectors to restore", s.unindexed],
      ["last error", ix.last_error],
    ]),
    (ix.segments || []).length
      ? table("segments", ["rows", "lists", "nprobe", "recall at build"], ix.segments.map((g) =>
        el("tr", {}, el("td", { text: g.rows }), el("td", { text: g.nlist }), el("td", { text: g.nprobe }),
          el("td", { text: show(g.built_recall) }))))
      : el("p", { class: "empty", text: "No IVF segments yet: every vector is in flat segments." }),
  ];
}

// ---- routing ----------------------------------------------------------------------------

const VIEWS = {
  users: () => usersView(),
  sessions: () => sessionsView(),
  memories: (_, params) => memoriesView(params),
  memory: (arg) => memoryView(arg),
  search: (_, params) => searchView(params),
  stats: () => statsView(),
};

let shown = 0;

async function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "users";
  const [path, query] = hash.split("?");
  const [name, arg] = path.split("/");
  const view = VIEWS[name] ? name : "users";
  const ticket = ++shown;
  document.querySelectorAll("#nav a").forEach((a) => {
    a.classList.toggle("current", a.dataset.nav === (view === "memory" ? "memories" : view));
  });
  status("loading…");
  try {
    const parts = await VIEWS[view](decodeURIComponent(arg || ""), new URLSearchParams(query || ""));
    if (ticket !== shown) return;
    const main = document.getElementById("view");
    main.replaceChildren(el("section", { "data-view": view }, parts));
    status(`${view} · ${new Date().toLocaleTimeString()}`);
  } catch (error) {
    if (ticket !== shown) return;
    document.getElementById("view").replaceChildren(
      el("section", { "data-view": "error" }, el("p", { class: "error", text: error.message })),
    );
    status(error.message, true);
  }
}

function pickUser(id) {
  if (id) sessionStorage.setItem(USER_KEY, id);
  else sessionStorage.removeItem(USER_KEY);
  const picker = document.getElementById("user-pick");
  if (picker.value !== (id || "")) picker.value = id || "";
}

async function fillUsers() {
  const picker = document.getElementById("user-pick");
  try {
    const reply = await call("LIST_USERS");
    const ids = (reply.users || []).map((u) => u.id);
    picker.replaceChildren(
      el("option", { value: "", text: "(default user)" }),
      ...ids.map((id) => el("option", { value: id, text: id, selected: id === user() })),
    );
  } catch (error) {
    status(error.message, true);
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("token-form").addEventListener("submit", tokenGiven);
  document.getElementById("user-pick").addEventListener("change", (event) => {
    pickUser(event.target.value);
    route();
  });
  window.addEventListener("hashchange", route);
  await fillUsers();
  await route();
});
