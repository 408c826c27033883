// hookledger viewer: plain modern JS, no build step, no network beyond this server.
// Everything shown is set with textContent / text nodes, never innerHTML.
// Views: #/ (sessions, paginated), #/session/<id> (batches, tool calls, status
// timeline, live ledger events) and #/search?q=… (full-text search, docs/search.md). Live updates come from GET /v1/stream (docs/sse.md).

const PAGE = 50;
const MAX_EVENTS_SHOWN = 500;
const MAX_JSON_CHARS = 20000;
const TOKEN_KEY = "hookledger_token";

// Read by the browser test: positions of the event.appended messages received in the
// session view, duplicates among them, and connection counts.
const debug = (window.hookledger = {
  positions: [], duplicates: 0, connects: 0, view: null, rendered: 0,
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

function sessionCells(s) {
  const project = s.cwd || "";
  return [
    el("td", {}, badge(s.status)),
    el("td", {}, s.agent),
    el("td", { title: project }, project.split("/").filter(Boolean).slice(-2).join("/") || "–"),
    el("td", { class: "num" }, num(s.prompt_count)),
    el("td", { class: "num" }, num(s.tool_call_count), s.tool_error_count ? el("span", { class: "error" }, ` (${s.tool_error_count} failed)`) : null),
    el("td", { class: "num" }, `${num(s.input_tokens)} / ${num(s.output_tokens)}`),
    el("td", {}, when(s.last_activity_at)),
    el("td", { class: "muted", title: s.external_id }, (s.external_id || s.id).slice(0, 8)),
  ];
}

// ledger/lifecycle.py SessionStatus, in its order
const STATUSES = ["CREATED", "CONNECTING", "ACTIVE", "WAITING", "PROCESSING", "PAUSED",
  "COMPLETED", "FAILED", "TERMINATED", "ARCHIVED"];

function listView(params) {
  const offset = Math.max(0, Number(params.get("offset") || 0));
  const status = params.get("status") || "";
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
  const agentInput = el("input", { placeholder: "agent", value: agent, onchange: (e) => go({ agent: e.target.value, offset: 0 }) });

  view.replaceChildren(
    el("div", { class: "filters" }, statusSelect, agentInput),
    el("table", { id: "sessions" },
      el("thead", {}, el("tr", {}, ...["status", "agent", "project", "prompts", "tool calls", "tokens in / out", "last activity", "session"].map(
        (h, i) => el("th", { class: i >= 3 && i <= 5 ? "num" : null }, h)))),
      tbody),
    el("div", { class: "pager" }, prev, next, pageInfo),
  );

  const row = (s) => {
    const tr = el("tr", { class: "session-row", "data-id": s.id, onclick: () => { location.hash = "#/session/" + encodeURIComponent(s.id); } }, ...sessionCells(s));
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

  async function load() {
    const q = new URLSearchParams({ limit: PAGE, offset });
    if (status) q.set("status", status);
    if (agent) q.set("agent", agent);
    let data;
    try {
      data = await api("/v1/sessions?" + q);
    } catch (e) {
      if (!(e instanceof Unauthorized)) pageInfo.textContent = String(e);
      return;
    }
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
    let tr = rows.get(s.id);
    if (!matches(s)) {
      drop(s.id);
      return;
    }
    if (!tr && offset !== 0) return; // only page 1 takes in sessions from the stream
    if (tr) {
      tr.replaceChildren(...sessionCells(s));
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
  const meta = el("dl", { class: "meta" });
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
    el("p", {}, el("a", { href: "#/" }, "← all sessions")), title, note, meta,
    el("section", {}, el("h2", {}, "Prompt batches"), batches),
    el("section", {}, el("h2", {}, "Status timeline"), timeline),
    el("section", {}, el("h2", {}, "Ledger events (live)"), events),
  );

  function renderMeta(s) {
    title.replaceChildren("session ", s.external_id || s.id, " ", badge(s.status));
    const items = [
      ["agent", s.agent + (s.agent_type ? ` (${s.agent_type})` : "")], ["project", s.cwd], ["model", s.model],
      ["prompts", num(s.prompt_count)], ["tool calls", `${num(s.tool_call_count)} (${num(s.tool_error_count)} failed)`],
      ["tokens in / out", `${num(s.input_tokens)} / ${num(s.output_tokens)}`],
      ["cache write / read", `${num(s.cache_creation_input_tokens)} / ${num(s.cache_read_input_tokens)}`],
      ["started", when(s.started_at)], ["last activity", when(s.last_activity_at)], ["ended", when(s.ended_at)],
      ["events", num(s.event_count)], ["ledger id", s.id],
    ];
    meta.replaceChildren(...items.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "–")]));
  }

  function toolTable(calls) {
    return el("table", { class: "tools" },
      el("thead", {}, el("tr", {}, ...["tool", "status", "duration (ms)", "input", "output / error"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...calls.map((c) => el("tr", { "data-tool-use-id": c.tool_use_id, class: c.is_error ? "error" : null },
        el("td", {}, c.tool_name || "?"),
        el("td", {}, c.status, c.interrupted ? " (interrupted)" : ""),
        el("td", { class: "num" }, num(c.duration_ms)),
        el("td", {}, c.tool_input == null ? "–" : lazyPre("input", c.tool_input, "in:" + c.tool_use_id, openKeys)),
        el("td", {}, c.is_error && c.error ? el("div", { class: "error" }, c.error) : null,
          c.output == null ? (c.is_error ? null : "–") : lazyPre("output", c.output, "out:" + c.tool_use_id, openKeys)),
      ))));
  }

  function summaryBlock(sm) {
    if (!sm) return null;
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

  // While the reader selects text in the batches, a re-render would clear the
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

  function render(d) {
    if (selecting()) {
      deferred = d;
      return;
    }
    renderMeta(d);
    const summaries = new Map((d.summaries || []).map((sm) => [`${sm.scope}:${sm.batch}`, sm]));
    const byBatch = new Map();
    for (const c of d.tool_calls) {
      if (!byBatch.has(c.batch)) byBatch.set(c.batch, []);
      byBatch.get(c.batch).push(c);
    }
    const blocks = [];
    const sessionSummary = summaryBlock(summaries.get("session:0"));
    if (sessionSummary) blocks.push(sessionSummary);
    if (byBatch.has(0)) {
      blocks.push(el("div", { class: "batch", "data-batch": 0 }, el("strong", {}, "Before the first prompt"), toolTable(byBatch.get(0))));
    }
    for (const b of d.batches) {
      const calls = byBatch.get(b.batch) || [];
      blocks.push(el("div", { class: "batch", "data-batch": b.batch, "data-status": b.status },
        el("div", {}, el("strong", {}, `#${b.batch}`), " ", badge(b.status), " ",
          el("span", { class: "muted" }, `${b.prompt_kind || ""} · ${when(b.started_at)} · ${num(b.tool_call_count)} tool calls`,
            b.tool_error_count ? ` · ${b.tool_error_count} failed` : "", b.end_reason ? ` · ended: ${b.end_reason}` : "")),
        el("div", { class: "prompt" }, b.prompt || ""),
        calls.length ? toolTable(calls) : null,
        b.last_assistant_message ? lazyPre("last reply", b.last_assistant_message, "reply:" + b.batch, openKeys) : null,
        summaryBlock(summaries.get(`batch:${b.batch}`)),
      ));
    }
    // open outputs keep where the reader scrolled them to
    const scrolled = [...batches.querySelectorAll("details[open][data-key] > pre")]
      .filter((pre) => pre.scrollTop > 0)
      .map((pre) => [pre.parentElement.dataset.key, pre.scrollTop]);
    batches.replaceChildren(...blocks);
    for (const [key, top] of scrolled) {
      const pre = batches.querySelector(`details[data-key="${CSS.escape(key)}"] > pre`);
      if (pre) pre.scrollTop = top;
    }
    timeline.replaceChildren(...d.status_history.map((h) => el("li", {},
      when(h.at), " ", h.from_status || "—", " → ", badge(h.to_status), " ", el("span", { class: "muted" }, h.cause))));
    note.textContent = "";
    debug.rendered++;
  }

  let pending = null;
  function refresh() {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      try {
        const d = await api("/v1/sessions/" + encodeURIComponent(id));
        if (d) render(d);
        else note.textContent = "No such session yet; waiting for its events…";
      } catch (e) {
        if (!(e instanceof Unauthorized)) note.textContent = String(e);
      }
    }, 150);
  }

  function appended(d, position) {
    if (seen.has(position)) debug.duplicates++;
    seen.add(position);
    debug.positions.push(position);
    const detail = [d.tool_name, d.is_error ? "error" : null, d.prompt_kind].filter(Boolean).join(" ");
    events.append(el("li", { "data-position": position },
      `${position}  ${d.kind}  ${d.status ?? ""}  batch ${d.batch ?? "–"}  ${detail}  ${d.occurred_at || d.recorded_at || ""}`));
    while (events.children.length > MAX_EVENTS_SHOWN) events.firstElementChild.remove();
    refresh();
  }

  openStream({ session: id, after: "0" }, {
    open: refresh,
    "event.appended": appended,
    "session.updated": (d) => renderMeta(d.session),
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
