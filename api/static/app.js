// hookledger viewer: plain modern JS, no build step, no network beyond this server.
// Everything shown is set with textContent / text nodes, never innerHTML.
// Views: #/ (sessions, paginated, with the totals of the filter; subagents marked and
// linked to their parent), #/session/<id> (totals, lineage, subagents, batches, tool
// calls, status timeline, live ledger events) and #/search?q=… (full-text search,
// docs/search.md). Live updates come from GET /v1/stream (docs/sse.md).

const PAGE = 50;
const MAX_EVENTS_SHOWN = 500;
const MAX_JSON_CHARS = 20000;
const REFRESH_MS = 150; // shortest wait before a session page fetches its detail again
const TOKEN_KEY = "hookledger_token";

// Read by the browser test: positions of the event.appended messages received in the
// session view, duplicates among them, and connection counts; renderMs (how long the
// last session render took) by benchmarks/viewer_burst.py.
const debug = (window.hookledger = {
  positions: [], duplicates: 0, connects: 0, view: null, rendered: 0, renderMs: null,
});

const view = document.getElementById("view");
const conn = document.getElementById("conn");
const tokenForm = document.getElementById("token-form");
const tokenInput = document.getElementById("token-input");
const tokenWhy = document.getElementById("token-why");

// -- HTTP -------------------------------------------------------------------------

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

function withToken(path) {
  const t = token();
  if (!t) return path;
  const url = new URL(path, location.origin);
  url.searchParams.set("token", t);
  return url.pathname + url.search;
}

class Unauthorized extends Error {}

async function api(path) {
  const r = await fetch(withToken(path), { headers: { Accept: "application/json" } });
  if (r.status === 401) {
    askToken();
    throw new Unauthorized(path);
  }
  if (r.status === 404) return null;
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function askToken() {
  closeStream();
  const refused = token() !== "";
  localStorage.removeItem(TOKEN_KEY); // a refused token is not sent again
  tokenWhy.textContent = refused
    ? "The server refused the token this browser had (HOOKLEDGER_TOKEN changed?). Enter the current one:"
    : "This server needs an access token:";
  setConn(refused ? "token refused" : "token needed", "reconnecting");
  tokenForm.hidden = false;
  tokenInput.focus();
}

tokenForm.addEventListener("submit", (e) => {
  e.preventDefault();
  localStorage.setItem(TOKEN_KEY, tokenInput.value.trim());
  tokenInput.value = "";
  tokenForm.hidden = true;
  route();
});

// -- DOM helpers --------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c == null) continue;
    e.append(c instanceof Node ? c : String(c)); // strings become text nodes
  }
  return e;
}

const num = (n) => (n == null ? "–" : Number(n).toLocaleString());
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "–");
const badge = (status) => el("span", { class: "status", "data-status": status }, status || "?");
const day = (iso) => (iso ? new Date(iso).toLocaleDateString() : "–");
const usd = (x) => "$" + (x > 0 && x < 0.01 ? x.toFixed(4) : x.toFixed(2));

// "1h 02m" from started to ended (or last activity); "–" without both times
function span(from, to) {
  const ms = from && to ? new Date(to) - new Date(from) : NaN;
  if (!(ms >= 0)) return "–";
  const s = Math.round(ms / 1000), m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
  const two = (n) => String(n).padStart(2, "0");
  if (d) return `${d}d ${h % 24}h`;
  if (h) return `${h}h ${two(m % 60)}m`;
  if (m) return `${m}m ${two(s % 60)}s`;
  return `${s}s`;
}

// Computed cost (a lower bound, "≥", when some usage had no price) and the agent's own
// figure when it reported one (docs/cost.md); t: a sessions row or GET /v1/sessions totals
function costText(t) {
  let text = (t.unpriced_tokens ? "≥" : "") + usd(t.cost_usd || 0);
  if (t.unpriced_tokens) text += ` (${num(t.unpriced_tokens)} tokens unpriced)`;
  if (t.agent_cost_usd != null) text += ` · agent reported ${usd(t.agent_cost_usd)}`;
  return text;
}

// Compact totals of a sessions row, or of GET /v1/sessions?totals=1 (prompts, tool
// calls, tokens in/out, cache write/read, cost): [label, value] pairs
function totalItems(t) {
  return [
    ["prompts", num(t.prompt_count)],
    ["tool calls", num(t.tool_call_count) + (t.tool_error_count ? ` (${num(t.tool_error_count)} failed)` : "")],
    ["tokens in / out", `${num(t.input_tokens)} / ${num(t.output_tokens)}`],
    ["cache write / read", `${num(t.cache_creation_input_tokens)} / ${num(t.cache_read_input_tokens)}`],
    ["cost", costText(t)],
  ];
}

function totalsNodes(items) {
  return items.flatMap(([k, v], i) => [i ? " · " : null, el("span", { "data-total": k }, el("span", { class: "muted" }, k + " "), v)])
    .filter(Boolean);
}

// A subagent's own part of its external id (Claude Code: "<parent's id>/agent-…"), so
// that it does not read as its parent's; else the first 8 characters
function shortId(s) {
  const ext = s.external_id || s.id;
  const cut = s.parent_id ? ext.lastIndexOf("/") : -1;
  return cut >= 0 ? ext.slice(cut + 1, cut + 25) : ext.slice(0, 8);
}

// "subagent" when a tool call or an agent type spawned it, else "child" (a fork)
const childKind = (s) => (s.parent_tool_use_id || s.agent_type || /\/agent-/.test(s.external_id || "") ? "subagent" : "child");

function sessionLink(id, text, title) {
  return el("a", { href: "#/session/" + encodeURIComponent(id), title: title || id, onclick: (e) => e.stopPropagation() }, text);
}

function jsonText(value) {
  let text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  if (text == null) return "";
  if (text.length > MAX_JSON_CHARS) {
    text = text.slice(0, MAX_JSON_CHARS) + `\n… (${text.length - MAX_JSON_CHARS} more characters)`;
  }
  return text;
}

// A <details> whose <pre> is filled on first open (big tool inputs/outputs).
function lazyPre(label, value, key, openKeys) {
  const d = el("details", { "data-key": key, open: openKeys.has(key) }, el("summary", {}, label));
  const fill = () => {
    if (d.open && !d.querySelector("pre")) d.append(el("pre", {}, jsonText(value)));
    if (d.open) openKeys.add(key); else openKeys.delete(key);
  };
  d.addEventListener("toggle", fill);
  if (d.open) fill();
  return d;
}

// fn on the next frame; in a hidden tab (no frames) within a second
function nextFrame(fn) {
  let done = false;
  const once = () => { if (!done) { done = true; fn(); } };
  requestAnimationFrame(once);
  setTimeout(once, 1000);
}

// Keyed DOM updates: make parent's children the nodes of items, in order. An item is
// [key, sig, build]; sig is a string of everything the node shows. A node whose key had
// the same sig at the last call is kept as it is (an open output, its scroll and a
// selection in it with it); otherwise build(its previous node, or undefined) makes it
// (it may update and return the previous node). Nodes no item names are removed. A
// repeated key gets a suffix, so every item is shown. parent holds only keyed nodes.
const keyedNodes = new WeakMap(); // parent -> Map(key -> {sig, node})
function keyed(parent, items) {
  const before = keyedNodes.get(parent) || new Map();
  const now = new Map();
  for (const [key, sig, build] of items) {
    let k = key;
    for (let n = 2; now.has(k); n++) k = `${key}#${n}`;
    const had = before.get(k);
    now.set(k, had && had.sig === sig ? had : { sig, node: build(had?.node) });
  }
  keyedNodes.set(parent, now);
  let at = parent.firstChild;
  for (const { node } of now.values()) {
    if (node === at) at = at.nextSibling;
    else parent.insertBefore(node, at); // moves a kept node, inserts a new one
  }
  while (at) { // what no item named
    const next = at.nextSibling;
    at.remove();
    at = next;
  }
}

function setConn(text, state) {
  conn.textContent = text;
  conn.dataset.state = state;
}

// -- the stream ---------------------------------------------------------------------

let stream = null;

function closeStream() {
  if (!stream) return;
  stream.closed = true;
  clearTimeout(stream.timer);
  stream.es?.close();
  stream = null;
}

// params: query of /v1/stream; handlers: {open(), "<kind>"(data, position)}.
function openStream(params, handlers) {
  closeStream();
  const s = { params, handlers, last: params.after ?? null, es: null, timer: null, closed: false };
  stream = s;
  connect(s);
}

// Change the open stream's query (e.g. a session's reference to its ledger id); the new
// connection resumes after the last message received, so nothing is lost or repeated.
function restream(change) {
  const s = stream;
  if (!s) return;
  Object.assign(s.params, change);
  clearTimeout(s.timer);
  s.es?.close();
  connect(s);
}

function connect(s) {
  const q = new URLSearchParams(s.params);
  if (s.last != null) q.set("after", s.last);
  const t = token();
  if (t) q.set("token", t);
  const es = new EventSource("/v1/stream?" + q);
  s.es = es;
  es.onopen = () => {
    debug.connects++;
    setConn("live", "live");
    s.handlers.open?.();
  };
  es.onerror = () => {
    if (s.closed) return;
    setConn("reconnecting", "reconnecting");
    // The browser retries by itself (with Last-Event-ID) unless the answer was an
    // HTTP error; then find out why (401: ask for the token) and start again.
    if (es.readyState === EventSource.CLOSED) {
      s.timer = setTimeout(async () => {
        try {
          await api("/v1/sessions?limit=1");
        } catch (e) {
          if (e instanceof Unauthorized) return;
        }
        if (!s.closed) connect(s);
      }, 1000);
    }
  };
  for (const kind of ["event.appended", "session.updated", "batch.completed", "session.completed"]) {
    es.addEventListener(kind, (e) => {
      s.last = e.lastEventId;
      const handler = s.handlers[kind];
      if (handler) handler(JSON.parse(e.data), Number(e.lastEventId));
    });
  }
}

// -- sessions list ------------------------------------------------------------------

// parentName(id): how the list names a parent session (its short id when known)
function sessionCells(s, parentName) {
  const project = s.cwd || "";
  const lineage = s.parent_id
    ? el("span", { class: "lineage", "data-parent": s.parent_id },
      "↳ " + childKind(s) + (s.agent_type ? ` (${s.agent_type})` : "") + " of ",
      sessionLink(s.parent_id, parentName(s)))
    : null;
  return [
    el("td", {}, badge(s.status)),
    el("td", { class: "agent" }, s.agent, lineage ? el("br") : null, lineage),
    el("td", { title: project }, project.split("/").filter(Boolean).slice(-2).join("/") || "–"),
    el("td", { class: "num" }, num(s.prompt_count)),
    el("td", { class: "num" }, num(s.tool_call_count), s.tool_error_count ? el("span", { class: "error" }, ` (${s.tool_error_count} failed)`) : null),
    el("td", { class: "num" }, `${num(s.input_tokens)} / ${num(s.output_tokens)}`),
    el("td", {}, when(s.last_activity_at)),
    el("td", { class: "muted", title: s.external_id }, shortId(s)),
  ];
}

// ledger/lifecycle.py SessionStatus, in its order
const STATUSES = ["CREATED", "CONNECTING", "ACTIVE", "WAITING", "PROCESSING", "PAUSED",
  "COMPLETED", "FAILED", "TERMINATED", "ARCHIVED"];

function listView(params) {
  const offset = Math.max(0, Number(params.get("offset") || 0));
  const status = (params.get("status") || "").toUpperCase(); // the server matches any case
  const agent = params.get("agent") || "";
  const rows = new Map(); // session id -> <tr>
  const shown = new Map(); // session id -> the row shown in its <tr>
  const newest = new Map(); // session id -> newest row seen on the stream
  const tbody = el("tbody");
  const pageInfo = el("span", { class: "muted" });
  const prev = el("button", { disabled: offset === 0, onclick: () => go({ offset: Math.max(0, offset - PAGE) }) }, "← newer");
  const next = el("button", { disabled: true, onclick: () => go({ offset: offset + PAGE }) }, "older →");
  const go = (change) => {
    const q = new URLSearchParams({ offset, status, agent, ...change });
    for (const [k, v] of [...q]) if (!v || v === "0") q.delete(k);
    location.hash = "#/?" + q;
  };
  const statusSelect = el("select", { onchange: (e) => go({ status: e.target.value, offset: 0 }) },
    ...["", ...STATUSES].map(
      (v) => el("option", { value: v, selected: v === status }, v || "any status")));
  // the agents that have sessions (GET /v1/sessions?totals=1), matched exactly as the
  // API's agent filter does; one that appears on the stream is added
  const agentSelect = el("select", { id: "agent-filter", "aria-label": "agent", onchange: (e) => go({ agent: e.target.value, offset: 0 }) });
  const agentOptions = new Set();
  const addAgents = (names) => {
    const all = [...new Set([...agentOptions, ...names, ...(agent ? [agent] : [])])].sort();
    if (all.length === agentOptions.size) return;
    all.forEach((a) => agentOptions.add(a));
    agentSelect.replaceChildren(...["", ...all].map(
      (v) => el("option", { value: v, selected: v === agent }, v || "any agent")));
  };
  addAgents([]);
  if (!agentOptions.size) agentSelect.replaceChildren(el("option", { value: "" }, "any agent"));
  const totalsLine = el("p", { id: "totals", class: "totals" });

  view.replaceChildren(
    el("div", { class: "filters" }, statusSelect, agentSelect),
    totalsLine,
    el("table", { id: "sessions" },
      el("thead", {}, el("tr", {}, ...["status", "agent", "project", "prompts", "tool calls", "tokens in / out", "last activity", "session"].map(
        (h, i) => el("th", { class: i >= 3 && i <= 5 ? "num" : null }, h)))),
      tbody),
    el("div", { class: "pager" }, prev, next, pageInfo),
  );

  // a parent's short id: from its row when the page has seen it
  const parentName = (s) => {
    const p = newest.get(s.parent_id) || shown.get(s.parent_id);
    if (p) return shortId(p);
    const ext = s.external_id || "";
    return ext.includes("/") ? ext.split("/")[0].slice(0, 8) : s.parent_id.slice(0, 8);
  };
  const cells = (s) => sessionCells(s, parentName);
  const row = (s) => {
    const tr = el("tr", {
      class: s.parent_id ? "session-row child" : "session-row", "data-id": s.id,
      onclick: () => { location.hash = "#/session/" + encodeURIComponent(s.id); },
    }, ...cells(s));
    rows.set(s.id, tr);
    shown.set(s.id, s);
    return tr;
  };
  const drop = (id) => {
    rows.get(id)?.remove();
    rows.delete(id);
    shown.delete(id);
  };
  // the server's order (projections/queries.py list_sessions): most recent activity
  // first, ties by id
  const precedes = (a, b) => {
    const x = a.last_activity_at || "", y = b.last_activity_at || "";
    return x !== y ? x > y : a.id < b.id;
  };
  // put a row of page 1 where that order puts it; false when it falls off the page
  const place = (tr, s) => {
    for (const other of tbody.children) {
      if (other !== tr && precedes(s, shown.get(other.dataset.id) || s)) {
        tbody.insertBefore(tr, other);
        return true;
      }
    }
    const others = tbody.children.length - (tr.parentNode === tbody ? 1 : 0);
    if (others >= PAGE) return false;
    tbody.append(tr);
    return true;
  };
  const matches = (s) => (!status || s.status === status) && (!agent || s.agent === agent);
  const fresher = (s) => {
    const seen = newest.get(s.id);
    return seen && seen.event_count > s.event_count ? seen : s;
  };

  // totals of every session the filters match (not only this page); an answer older
  // than one already shown is dropped
  let totalsAsked = 0, totalsShown = 0;
  const showTotals = (data, asked) => {
    if (!data.totals || asked < totalsShown) return;
    totalsShown = asked;
    addAgents(data.agents || []);
    const t = data.totals;
    totalsLine.replaceChildren(
      el("span", { "data-total": "sessions" }, el("strong", {}, num(t.sessions)), ` session${t.sessions === 1 ? "" : "s"}`,
        t.subagents ? ` (${num(t.subagents)} subagent${t.subagents === 1 ? "" : "s"})` : ""),
      " · ", ...totalsNodes([...totalItems(t), ["period", t.sessions ? `${day(t.first_started_at)} – ${day(t.last_activity_at)}` : "–"]]));
  };
  const filterQuery = (q) => {
    if (status) q.set("status", status);
    if (agent) q.set("agent", agent);
    return q;
  };
  // After updates from the stream the totals are fetched again, once the updates pause
  // for 2 s, and at least every 10 s while they go on: a burst (an import) costs the
  // server a few aggregates, not one per update
  let totalsTimer = null, totalsDue = 0;
  const fetchTotals = async () => {
    totalsTimer = null;
    totalsDue = 0;
    const asked = ++totalsAsked;
    try {
      const data = await api("/v1/sessions?" + filterQuery(new URLSearchParams({ limit: 0, totals: 1 })));
      if (view.contains(totalsLine) && data) showTotals(data, asked);
    } catch { /* the next update or (re)connect tries again */ }
  };
  const refreshTotals = () => {
    const now = Date.now();
    if (!totalsDue) totalsDue = now + 10000;
    clearTimeout(totalsTimer);
    totalsTimer = setTimeout(fetchTotals, Math.max(0, Math.min(2000, totalsDue - now)));
  };

  async function load() {
    const q = filterQuery(new URLSearchParams({ limit: PAGE, offset, totals: 1 }));
    const asked = ++totalsAsked;
    let data;
    try {
      data = await api("/v1/sessions?" + q);
    } catch (e) {
      if (!(e instanceof Unauthorized)) pageInfo.textContent = String(e);
      return;
    }
    showTotals(data, asked);
    rows.clear();
    shown.clear();
    tbody.replaceChildren(...data.sessions.map((s) => row(fresher(s))));
    next.disabled = data.sessions.length < PAGE;
    pageInfo.textContent = data.sessions.length
      ? `sessions ${offset + 1}–${offset + data.sessions.length}`
      : "no sessions yet";
    debug.rendered++;
  }

  function upsert(s) {
    newest.set(s.id, s);
    if (!agentOptions.has(s.agent)) addAgents([s.agent]);
    let tr = rows.get(s.id);
    if (!matches(s)) {
      drop(s.id);
      return;
    }
    if (!tr && offset !== 0) return; // only page 1 takes in sessions from the stream
    if (tr) {
      tr.replaceChildren(...cells(s));
      shown.set(s.id, s);
    } else {
      tr = row(s);
    }
    if (offset === 0) {
      if (!place(tr, s)) { // older than every row of a full page 1: not on it
        drop(s.id);
        return;
      }
      while (tbody.children.length > PAGE) drop(tbody.lastElementChild.dataset.id);
      pageInfo.textContent = `sessions 1–${tbody.children.length}`;
    }
    // the highlight (re)starts without forcing a layout per row
    tr.animate?.([{ background: "#fef9c3" }, { background: "transparent" }], { duration: 1000, easing: "ease-out" });
  }

  // A burst (an import, many agents at once) is applied once per frame, the newest
  // update of each session only: the page stays responsive whatever the rate.
  const queued = new Map();
  const flush = () => {
    let updates = [...queued.values()];
    queued.clear();
    if (offset === 0 && updates.length > PAGE) {
      // a session behind PAGE newer ones cannot be on page 1 unless it is there now
      const first = new Set(updates.filter(matches).sort((a, b) => (precedes(a, b) ? -1 : 1))
        .slice(0, PAGE).map((s) => s.id));
      updates = updates.filter((s) => first.has(s.id) || rows.has(s.id));
    }
    for (const s of updates) upsert(s);
    refreshTotals();
  };
  const onUpdate = (s) => {
    newest.set(s.id, s);
    if (!queued.size) nextFrame(flush);
    queued.set(s.id, s);
  };

  openStream({ kinds: "session.updated" }, {
    open: load, // (re)connected: the page is fetched again, live updates follow
    "session.updated": (d) => onUpdate(d.session),
  });
}

// -- one session --------------------------------------------------------------------

function sessionView(id) {
  const title = el("h1", {}, "session ", id);
  const lineage = el("p", { id: "lineage", class: "lineage", hidden: true });
  const totals = el("p", { id: "session-totals", class: "totals" });
  const meta = el("dl", { class: "meta" });
  const subagentsTitle = el("h2");
  const subagentRows = el("tbody");
  const subagents = el("section", { id: "subagents", hidden: true }, subagentsTitle,
    el("table", { class: "subagents" },
      el("thead", {}, el("tr", {}, ...["status", "type", "session", "spawned by", "prompts", "tool calls", "tokens in / out", "cost", "started", "duration"].map(
        (h, i) => el("th", { class: i >= 4 && i <= 7 ? "num" : null }, h)))),
      subagentRows));
  const batches = el("div", { id: "batches" });
  const timeline = el("ol", { id: "timeline" });
  const events = el("ol", { id: "events", class: "events" });
  const note = el("p", { class: "muted" });
  const openKeys = new Set();
  const seen = new Set();
  debug.positions = [];
  debug.duplicates = 0;
  debug.view = id;

  view.replaceChildren(
    el("p", {}, el("a", { href: "#/" }, "← all sessions")), title, lineage, totals, note, meta, subagents,
    el("section", {}, el("h2", {}, "Prompt batches"), batches),
    el("section", {}, el("h2", {}, "Status timeline"), timeline),
    el("section", {}, el("h2", {}, "Ledger events (live)"), events),
  );

  // the newest GET /v1/sessions/{id} answer: its lineage and subagents (the stream's
  // session.updated carries only the sessions row)
  let detail = null;
  let own = null; // the newest row of this session (detail or session.updated)
  let callsById = new Map(); // tool_use_id -> this session's tool call (of detail)
  const childRows = new Map(); // subagent id -> its newest row from the stream

  function renderMeta(s) {
    own = s;
    title.replaceChildren("session ", s.external_id || s.id, " ", badge(s.status));
    // the session's own totals; its subagents' are theirs (docs/cost.md), added below
    const items = [...totalItems(s), ["duration", span(s.started_at, s.ended_at || s.last_activity_at)]];
    const subs = detail?.subagents || [];
    const sum = (k) => subs.reduce((n, c) => n + (c[k] || 0), s[k] || 0);
    totals.replaceChildren(...totalsNodes(items), ...(subs.length ? [
      el("br"),
      el("span", { "data-total": "with subagents" }, el("span", { class: "muted" }, `with ${subs.length} subagent${subs.length === 1 ? "" : "s"} `),
        `${num(sum("prompt_count"))} prompts · ${num(sum("tool_call_count"))} tool calls · tokens ${num(sum("input_tokens"))} / ${num(sum("output_tokens"))} · `,
        costText({ cost_usd: sum("cost_usd"), unpriced_tokens: sum("unpriced_tokens"), agent_cost_usd: null })),
    ] : []));
    const facts = [
      ["agent", s.agent + (s.agent_type ? ` (${s.agent_type})` : "")], ["project", s.cwd], ["model", s.model],
      ["started", when(s.started_at)], ["last activity", when(s.last_activity_at)], ["ended", when(s.ended_at)],
      ["events", num(s.event_count)], ["ledger id", s.id],
    ];
    meta.replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "–")]));
  }

  // "Task in batch #1: <its description>" (Claude Code's Task/Agent tool input)
  const about = (call) => (call && call.tool_input && typeof call.tool_input.description === "string" ? call.tool_input.description.slice(0, 200) : "");
  function spawnedBy(call, toolUseId) {
    if (!call) return toolUseId ? el("span", { class: "muted" }, toolUseId) : "–";
    return el("span", {}, el("strong", {}, call.tool_name || "?"), ` in batch #${call.batch}`, about(call) ? `: ${about(call)}` : "");
  }

  // one subagent's row: the <tr> stays, its cells follow the newest row
  function subagentRow(tr, c) {
    const call = callsById.get(c.parent_tool_use_id);
    tr = tr || el("tr", { "data-id": c.id });
    tr.replaceChildren(
      el("td", {}, badge(c.status)),
      el("td", {}, c.agent_type || childKind(c)),
      el("td", {}, sessionLink(c.id, shortId(c), c.external_id)),
      el("td", { title: c.parent_tool_use_id }, spawnedBy(call, c.parent_tool_use_id)),
      el("td", { class: "num" }, num(c.prompt_count)),
      el("td", { class: "num" }, num(c.tool_call_count), c.tool_error_count ? el("span", { class: "error" }, ` (${c.tool_error_count} failed)`) : null),
      el("td", { class: "num" }, `${num(c.input_tokens)} / ${num(c.output_tokens)}`),
      el("td", { class: "num" }, costText({ ...c, agent_cost_usd: null })),
      el("td", {}, when(c.started_at)),
      el("td", {}, span(c.started_at, c.ended_at || c.last_activity_at)),
    );
    return tr;
  }

  // a parent's subagents (rows keyed by id: only a changed one is touched)
  function renderSubagents(subs) {
    subagents.hidden = !subs.length;
    subagentsTitle.textContent = `Subagents (${subs.length})`;
    keyed(subagentRows, subs.map((c) => {
      const call = callsById.get(c.parent_tool_use_id);
      const sig = JSON.stringify([c, call ? [call.tool_name, call.batch, about(call)] : null]);
      return [c.id, sig, (tr) => subagentRow(tr, c)];
    }));
  }

  // a subagent: whose, and which tool call of the parent spawned it
  function renderLineage(d) {
    lineage.hidden = !d.parent_id;
    if (!d.parent_id) return;
    const p = d.parent, call = d.spawned_by;
    lineage.replaceChildren(
      `↳ ${childKind(d)}${d.agent_type ? ` (${d.agent_type})` : ""} of `,
      p ? sessionLink(p.id, (p.external_id || p.id) + (p.agent_type ? ` (${p.agent_type})` : ""))
        : el("span", { title: d.parent_id }, d.parent_id.slice(0, 8) + " (no such session in the ledger)"),
      p ? " " : "", p ? badge(p.status) : "",
      call ? el("span", { class: "spawned-by" }, " · spawned by ", el("strong", {}, call.tool_name || "?"),
        ` in batch #${call.batch}`, call.description ? `: ${call.description}` : "",
        el("span", { class: "muted" }, ` (${call.tool_use_id})`))
        : d.parent_tool_use_id ? el("span", { class: "muted" }, ` · spawned by tool call ${d.parent_tool_use_id}`) : "",
    );
  }

  // A subagent's session.updated (the stream's children=1): its row is updated in
  // place, with the totals; a run the page has not listed yet needs the detail (its
  // spawning call, its place in the list).
  function childUpdated(c) {
    childRows.set(c.id, c);
    const subs = detail?.subagents;
    const i = subs ? subs.findIndex((x) => x.id === c.id) : -1;
    if (i < 0) {
      refresh();
      return;
    }
    subs[i] = { ...subs[i], ...c };
    renderSubagents(subs);
    if (own) renderMeta(own);
  }
  // a detail fetched before a subagent's newest update arrived keeps that update
  const fresherChild = (c) => {
    const s = childRows.get(c.id);
    return s && s.event_count > c.event_count ? { ...c, ...s } : c;
  };

  function toolRow(c, spawned) {
    return el("tr", { "data-tool-use-id": c.tool_use_id, class: c.is_error ? "error" : null },
      el("td", {}, c.tool_name || "?", ...(spawned.get(c.tool_use_id) || []).flatMap((child) => [
        el("br"), el("span", { class: "spawned" }, "→ ", sessionLink(child.id, `${childKind(child)} ${shortId(child)}`, child.external_id))])),
      el("td", {}, c.status, c.interrupted ? " (interrupted)" : ""),
      el("td", { class: "num" }, num(c.duration_ms)),
      el("td", {}, c.tool_input == null ? "–" : lazyPre("input", c.tool_input, "in:" + c.tool_use_id, openKeys)),
      el("td", {}, c.is_error && c.error ? el("div", { class: "error" }, c.error) : null,
        c.output == null ? (c.is_error ? null : "–") : lazyPre("output", c.output, "out:" + c.tool_use_id, openKeys)),
    );
  }

  // the table stays; its rows are keyed by tool_use_id (sigs: what each row shows)
  function toolTable(table, calls, sigs, spawned) {
    table = table || el("table", { class: "tools" },
      el("thead", {}, el("tr", {}, ...["tool", "status", "duration (ms)", "input", "output / error"].map((h) => el("th", {}, h)))),
      el("tbody"));
    keyed(table.tBodies[0], calls.map((c, i) => [String(c.tool_use_id), sigs[i], () => toolRow(c, spawned)]));
    return table;
  }

  function summaryBlock(sm) {
    const lists = [["completed", "Completed"], ["learned", "Learned"], ["investigated", "Investigated"],
      ["next_steps", "Next steps"], ["commands_failed", "Commands that failed"]];
    const source = sm.summariser + (sm.model ? ` · ${sm.model}` : "") + (sm.fallback_reason ? ` · fallback: ${sm.fallback_reason}` : "");
    return el("div", { class: "summary", "data-summary": `${sm.scope}:${sm.batch}` },
      el("div", {}, el("strong", {}, sm.scope === "session" ? "Session summary" : "Summary"), " ",
        el("span", { class: "muted" }, source)),
      ...lists.filter(([k]) => sm[k] && sm[k].length).map(([k, label]) =>
        el("div", {}, el("em", {}, label + ": "), sm[k].join(" · "))),
      sm.observations.length ? el("ul", { class: "observations" }, ...sm.observations.map((o) =>
        el("li", { "data-kind": o.kind }, badge(o.kind), " ", o.title,
          o.files.length ? el("span", { class: "muted" }, " — " + o.files.join(", ")) : null))) : null,
    );
  }

  // inputs that open no batch (slash commands, task notifications)
  const inputList = (items) => el("ul", { class: "inputs" }, ...items.map((i) => el("li", { class: "input", "data-kind": i.kind },
    el("code", {}, i.text || ""), " ", el("span", { class: "muted" }, `${i.kind.replace("_", " ")} · ${when(i.occurred_at)}`))));

  function batchHead(b) {
    return el("div", {}, el("strong", {}, `#${b.batch}`), " ", badge(b.status), " ",
      el("span", { class: "muted" }, `${b.prompt_kind || ""} · ${when(b.started_at)} · ${num(b.tool_call_count)} tool calls`,
        b.tool_error_count ? ` · ${b.tool_error_count} failed` : "", b.end_reason ? ` · ended: ${b.end_reason}` : ""));
  }

  // One batch (b: its prompt_batches row; null for batch 0, "Before the first prompt")
  // as a keyed item of #batches: unchanged (same sig), it is left alone; changed, its
  // block stays and only its changed parts and tool call rows are made again.
  function batchItem(n, b, calls, inputs, summary, spawned) {
    const sigs = calls.map((c) => JSON.stringify([c, (spawned.get(c.tool_use_id) || []).map(
      (ch) => [ch.id, ch.external_id, ch.parent_id, ch.parent_tool_use_id, ch.agent_type])]));
    const head = b ? JSON.stringify([b.status, b.prompt_kind, b.started_at, b.tool_call_count, b.tool_error_count, b.end_reason]) : "";
    const sig = JSON.stringify([head, b?.prompt, b?.last_assistant_message, inputs, summary]) + "\n" + sigs.join("\n");
    const build = (block) => {
      block = block || el("div", { class: "batch", "data-batch": n });
      if (b) block.dataset.status = b.status;
      keyed(block, [
        b ? ["head", head, () => batchHead(b)] : ["head", "", () => el("strong", {}, "Before the first prompt")],
        b ? ["prompt", b.prompt || "", () => el("div", { class: "prompt" }, b.prompt || "")] : null,
        inputs ? ["inputs", JSON.stringify(inputs), () => inputList(inputs)] : null,
        calls.length ? ["tools", sigs.join("\n"), (table) => toolTable(table, calls, sigs, spawned)] : null,
        b && b.last_assistant_message ? ["reply", b.last_assistant_message,
          () => lazyPre("last reply", b.last_assistant_message, "reply:" + n, openKeys)] : null,
        summary ? ["summary", JSON.stringify(summary), () => summaryBlock(summary)] : null,
      ].filter(Boolean));
      return block;
    };
    return ["batch:" + n, sig, build];
  }

  // While the reader selects text in the batches, an update could clear the
  // selection: the newest detail waits until the selection ends.
  let deferred = null;
  const selecting = () => {
    const sel = document.getSelection();
    return !!sel && !sel.isCollapsed && batches.contains(sel.anchorNode);
  };
  const onSelection = () => {
    if (!batches.isConnected) {
      document.removeEventListener("selectionchange", onSelection);
    } else if (deferred && !selecting()) {
      const d = deferred;
      deferred = null;
      render(d);
    }
  };
  document.addEventListener("selectionchange", onSelection);

  // Applies a GET /v1/sessions/{id} answer with keyed updates: only the batches, tool
  // call rows, subagent rows and timeline entries whose content changed are made again.
  function render(d) {
    if (selecting()) {
      deferred = d;
      return;
    }
    const started = performance.now();
    d.subagents = (d.subagents || []).map(fresherChild);
    detail = d;
    callsById = new Map(d.tool_calls.map((c) => [c.tool_use_id, c]));
    renderMeta(d);
    renderLineage(d);
    renderSubagents(d.subagents);
    const spawned = new Map(); // tool_use_id -> the subagents that call spawned
    for (const c of d.subagents) {
      if (!c.parent_tool_use_id) continue;
      if (!spawned.has(c.parent_tool_use_id)) spawned.set(c.parent_tool_use_id, []);
      spawned.get(c.parent_tool_use_id).push(c);
    }
    const summaries = new Map((d.summaries || []).map((sm) => [`${sm.scope}:${sm.batch}`, sm]));
    const byBatch = new Map();
    for (const c of d.tool_calls) {
      if (!byBatch.has(c.batch)) byBatch.set(c.batch, []);
      byBatch.get(c.batch).push(c);
    }
    // inputs that open no batch, in log order
    const inputsOf = new Map();
    for (const i of d.inputs || []) {
      if (!inputsOf.has(i.batch)) inputsOf.set(i.batch, []);
      inputsOf.get(i.batch).push(i);
    }
    const items = [];
    const sessionSummary = summaries.get("session:0");
    if (sessionSummary) items.push(["summary:session", JSON.stringify(sessionSummary), () => summaryBlock(sessionSummary)]);
    if (byBatch.has(0) || inputsOf.has(0)) {
      items.push(batchItem(0, null, byBatch.get(0) || [], inputsOf.get(0), null, spawned));
    }
    for (const b of d.batches) {
      items.push(batchItem(b.batch, b, byBatch.get(b.batch) || [], inputsOf.get(b.batch), summaries.get(`batch:${b.batch}`), spawned));
    }
    // an open output made again keeps where the reader scrolled it to
    const scrolled = [...batches.querySelectorAll("details[open][data-key] > pre")]
      .filter((pre) => pre.scrollTop > 0)
      .map((pre) => [pre.parentElement.dataset.key, pre.scrollTop]);
    keyed(batches, items);
    for (const [key, top] of scrolled) {
      const pre = batches.querySelector(`details[data-key="${CSS.escape(key)}"] > pre`);
      if (pre && pre.scrollTop !== top) pre.scrollTop = top;
    }
    keyed(timeline, d.status_history.map((h, i) => [String(h.version ?? i), JSON.stringify(h), () => el("li", {},
      when(h.at), " ", h.from_status || "—", " → ", badge(h.to_status), " ", el("span", { class: "muted" }, h.cause))]));
    note.textContent = "";
    debug.rendered++;
    debug.renderMs = performance.now() - started;
  }

  // The session's ledger id, once the stream named it: a subagent's external id holds a
  // "/" ("<parent's id>/agent-…"), which a path segment cannot carry (the server decodes
  // %2F before routing), so the detail is fetched by ledger id; and the stream is asked
  // by ledger id from then on (its subagents are matched by their parent's ledger id).
  let ledgerId = null;
  function learn(sid) {
    if (ledgerId) return;
    ledgerId = sid;
    if (sid !== id) restream({ session: sid });
  }
  // The detail is fetched again when the session changed, coalesced: one fetch at a
  // time; what changes while it is in flight makes one more fetch after it, started
  // after twice what the last fetch and render took (at least REFRESH_MS). A burst of
  // updates costs one fetch per that interval, not one per update; the fetches of a
  // large session (megabytes each) take at most a third of the time. The last fetch
  // starts after the last change received, so the page ends up current.
  let inFlight = false, dirty = false, timer = null, lastCost = 0;
  function refresh() {
    dirty = true;
    if (inFlight || timer) return;
    timer = setTimeout(fetchDetail, Math.max(REFRESH_MS, 2 * lastCost));
  }
  async function fetchDetail() {
    timer = null;
    dirty = false;
    inFlight = true;
    const started = performance.now();
    try {
      const d = await api("/v1/sessions/" + encodeURIComponent(ledgerId || id));
      if (d) render(d);
      else note.textContent = "No such session yet; waiting for its events…";
    } catch (e) {
      if (!(e instanceof Unauthorized)) note.textContent = String(e);
    } finally {
      inFlight = false;
      lastCost = performance.now() - started;
      if (dirty) refresh();
    }
  }

  function appended(d, position) {
    if (d.session_id) learn(d.session_id);
    if (seen.has(position)) debug.duplicates++;
    seen.add(position);
    debug.positions.push(position);
    const detail = [d.tool_name, d.is_error ? "error" : null, d.prompt_kind].filter(Boolean).join(" ");
    events.append(el("li", { "data-position": position },
      `${position}  ${d.kind}  ${d.status ?? ""}  batch ${d.batch ?? "–"}  ${detail}  ${d.occurred_at || d.recorded_at || ""}`));
    while (events.children.length > MAX_EVENTS_SHOWN) events.firstElementChild.remove();
    refresh();
  }

  // children=1: the session.updated of its subagents too (docs/sse.md)
  openStream({ session: id, after: "0", children: "1" }, {
    open: refresh,
    "event.appended": appended,
    "session.updated": (d) => {
      const s = d.session;
      if (ledgerId && s.id !== ledgerId) {
        childUpdated(s);
        return;
      }
      if (!ledgerId) {
        learn(s.id);
        if (!detail) refresh();
      }
      renderMeta(s);
    },
    "batch.completed": refresh,
    "session.completed": refresh,
  });
}

// -- search ---------------------------------------------------------------------------

const searchForm = document.getElementById("search-form");
const searchInput = document.getElementById("search-input");

searchForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const q = searchInput.value.trim();
  if (q) location.hash = "#/search?" + new URLSearchParams({ q });
});

// The server marks matched words with « »; they become <mark> elements, the rest text.
function snippetNodes(snippet) {
  return (snippet || "").split(/(«[^«»]*»)/).filter(Boolean).map(
    (part) => (part.startsWith("«") && part.endsWith("»") ? el("mark", {}, part.slice(1, -1)) : part));
}

async function searchView(params) {
  closeStream();
  setConn("search", "idle");
  const q = params.get("q") || "";
  searchInput.value = q;
  const info = el("p", { class: "muted" }, "searching…");
  const list = el("ol", { class: "hits", id: "hits" });
  view.replaceChildren(el("h2", {}, "Search: ", q), info, list);
  let data;
  try {
    const r = await fetch(withToken("/v1/search?" + new URLSearchParams({ q, limit: 50 })), { headers: { Accept: "application/json" } });
    if (r.status === 401) { askToken(); return; }
    data = await r.json();
    if (!r.ok) { info.textContent = data.error || `HTTP ${r.status}`; return; }
  } catch (e) {
    info.textContent = String(e);
    return;
  }
  const n = data.hits.length;
  info.textContent = n ? `${n} match${n === 1 ? "" : "es"}, best and most recent first` : "no matches";
  list.replaceChildren(...data.hits.map((h) => el("li", {
    class: "hit", "data-session": h.session_id, "data-kind": h.kind,
    onclick: () => { location.hash = "#/session/" + encodeURIComponent(h.session_id); },
  },
    el("span", { class: "kind" }, h.kind.replace("_", " ")),
    el("strong", {}, h.title),
    el("span", { class: "muted" }, ` · ${h.agent || "?"} · ${(h.cwd || "").split("/").filter(Boolean).slice(-2).join("/") || "–"} · batch ${h.batch} · ${when(h.occurred_at)}`),
    el("p", { class: "snippet" }, ...snippetNodes(h.snippet)),
  )));
  debug.rendered++;
}

// -- routing --------------------------------------------------------------------------

function route() {
  const hash = location.hash || "#/";
  const m = hash.match(/^#\/session\/(.+)$/);
  let ref = null;
  if (m) {
    try {
      ref = decodeURIComponent(m[1]);
    } catch {
      ref = m[1]; // not percent-encoding: the reference as typed
    }
  }
  if (m) sessionView(ref);
  else if (hash.startsWith("#/search")) searchView(new URLSearchParams(hash.split("?")[1] || ""));
  else listView(new URLSearchParams(hash.split("?")[1] || ""));
}

window.addEventListener("hashchange", route);
route();
