// The durable-mcp dashboard: polls /api/snapshot every second and renders it (and
// /api/history every 10 s, as charts); a run's page (#/runs/<id>) and a task's page
// (#/tasks/<id>) poll theirs instead. Actions go through a confirmation dialog. Everything
// from the server goes into the DOM as text (textContent), never as markup.
"use strict";

const POLL_MS = 1000;
const HISTORY_MS = 10000;
const HOUR_MS = 3600 * 1000;
const TOKEN = "durable-mcp-dashboard-token";
const TERMINAL = ["completed", "failed", "cancelled"];
const SVG = "http://www.w3.org/2000/svg";

let me = null; // /api/whoami's answer, read again after a sign-in
let canAct = false;
let last = null; // the last snapshot, redrawn when a filter changes
let historyAt = 0; // when /api/history was last read
let signingIn = false; // the login form is up: polling waits for it
let timer = null;
let busy = false;
let again = false;

// ------------------------------------------------------------------ helpers --

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  return td;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function link(text, href) {
  const a = el("a", text);
  a.href = href;
  return a;
}

function runHref(id) {
  return "#/runs/" + encodeURIComponent(id);
}

function taskHref(id) {
  return "#/tasks/" + encodeURIComponent(id);
}

// A cell linking to the page of run or task `id` (empty without one).
function linkCell(id, href) {
  const td = cell("", "id");
  if (id) td.appendChild(link(id, href(id)));
  return td;
}

function time(ms) {
  if (!ms) return "";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function ago(ms, now) {
  const s = Math.max(0, (now - ms) / 1000);
  if (s < 60) return s.toFixed(0) + " s ago";
  if (s < 3600) return (s / 60).toFixed(0) + " min ago";
  return (s / 3600).toFixed(1) + " h ago";
}

function payload(value, shown) {
  if (!shown) return cell("redacted", "redacted");
  return cell(value === undefined ? "" : JSON.stringify(value), "id");
}

function number(value) {
  if (value === null || value === undefined) return "–";
  if (Math.abs(value) >= 100 || Number.isInteger(value)) return value.toFixed(0);
  return value.toFixed(Math.abs(value) >= 10 ? 1 : 2);
}

// One row per item (`row` returns its cells); `keep(tr)` drops the rows a filter hides.
function rows(items, row, empty, columns, keep) {
  const all = items.map((item) => {
    const tr = document.createElement("tr");
    for (const td of row(item)) tr.appendChild(td);
    return tr;
  });
  const kept = keep ? all.filter(keep) : all;
  if (kept.length === 0) {
    const tr = document.createElement("tr");
    const td = cell(all.length === 0 ? empty : "no row matches the filter", "empty");
    td.colSpan = columns;
    tr.appendChild(td);
    kept.push(tr);
  }
  return kept;
}

// Replace the rows of table `id`.
function fill(id, items, row, empty, keep) {
  const body = document.querySelector("#" + id + " tbody");
  const columns = document.querySelectorAll("#" + id + " thead th").length;
  body.replaceChildren(...rows(items, row, empty, columns, keep));
}

// A new table with these column headers.
function table(headers, items, row, empty, className) {
  const t = el("table", null, className);
  const head = document.createElement("tr");
  for (const h of headers) head.appendChild(el("th", h));
  t.createTHead().appendChild(head);
  t.createTBody().replaceChildren(...rows(items, row, empty, headers.length));
  return t;
}

// A two-column table of [name, value] (a value is text or a node).
function fields(pairs) {
  const t = el("table", null, "fields");
  const body = t.createTBody();
  for (const [name, value] of pairs) {
    const tr = document.createElement("tr");
    tr.appendChild(el("th", name));
    const td = value instanceof Node ? cell("", "id") : cell(value, "id");
    if (value instanceof Node) td.appendChild(value);
    tr.appendChild(td);
    body.appendChild(tr);
  }
  return t;
}

function text(id, value) {
  document.getElementById(id).textContent = String(value);
}

// ------------------------------------------------------------------- the API --

class SignInNeeded extends Error {}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (body && body.error) return String(body.error);
  } catch (_) {
    // not JSON
  }
  return "HTTP " + response.status;
}

// fetch with the bearer token of this tab, if any; a 401 brings up the login form.
async function api(path, init) {
  const headers = new Headers((init && init.headers) || {});
  const token = sessionStorage.getItem(TOKEN);
  if (token) headers.set("Authorization", "Bearer " + token);
  const response = await fetch(path, { ...init, headers, cache: "no-store" });
  if (response.status === 401) {
    showLogin(token ? "this key was refused: " + (await errorText(response)) : "");
    throw new SignInNeeded("sign in needed");
  }
  return response;
}

async function json(path) {
  const response = await api(path);
  if (!response.ok) throw new HttpError(response.status, "HTTP " + response.status + ": " + (await errorText(response)));
  return response.json();
}

// ------------------------------------------------------------ signing in --

function view(name) {
  document.getElementById("login").hidden = name !== "login";
  document.getElementById("overview").hidden = name !== "overview";
  document.getElementById("detail").hidden = name !== "detail";
  if (name !== "overview") document.getElementById("errors").hidden = true;
}

function showLogin(error) {
  signingIn = true;
  sessionStorage.removeItem(TOKEN);
  me = null;
  canAct = false;
  last = null;
  view("login");
  document.getElementById("viewer").hidden = true;
  const message = document.getElementById("login-error");
  message.hidden = !error;
  message.textContent = error;
  const status = document.getElementById("status");
  status.textContent = "sign in needed";
  status.className = "status stale";
  document.getElementById("token").focus();
}

async function whoami() {
  try {
    me = await json("/api/whoami");
  } catch (error) {
    if (error instanceof HttpError && error.status === 403) {
      showLogin("this key may not read the dashboard: " + error.message);
      throw new SignInNeeded("sign in needed");
    }
    throw error;
  }
  canAct = Boolean(me.can_act);
  text("principal", me.principal);
  const role = document.getElementById("role");
  role.textContent = !me.auth ? "no authentication" : canAct ? "can act" : "read only";
  role.className = canAct ? "badge act" : "badge";
  document.getElementById("sign-out").hidden = !sessionStorage.getItem(TOKEN);
  document.getElementById("viewer").hidden = false;
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  const token = input.value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN, token);
  input.value = "";
  signingIn = false;
  me = null;
  historyAt = 0;
  poll();
});

document.getElementById("sign-out").addEventListener("click", (event) => {
  event.preventDefault();
  clearTimeout(timer);
  showLogin("");
});

// ------------------------------------------------------------------ actions --

const EXPLAIN = {
  "runs/cancel": "The run's worker cancels its handler at its next heartbeat; its client gets the error -32040 (cancelled by an operator, with the reason).",
  "runs/kill": "The run ends at once: its client gets the error -32040 (killed by an operator, with the reason), its journal entry is removed and its worker's later steps are refused.",
  "runs/retry": "The parked run is run again by the next recovery pass of any worker; its committed steps are replayed, not repeated.",
  "runs/purge": "The parked run ends as a kill does; its client gets the error -32040 (purged by an operator, with the reason).",
  "tasks/cancel": "The task is cancelled as a client's tasks/cancel does; its run is cancelled at its worker's next heartbeat.",
};

let pending = null;

function actionButton(label, kind, id, action) {
  const button = el("button", label, "action " + action);
  button.type = "button";
  button.dataset.action = action;
  button.addEventListener("click", () => confirmAction(kind, id, action, label));
  return button;
}

function runButtons(id, state) {
  if (!canAct) return [];
  const buttons = [actionButton("Cancel", "runs", id, "cancel"), actionButton("Kill", "runs", id, "kill")];
  if (state === "parked") buttons.push(actionButton("Retry", "runs", id, "retry"), actionButton("Purge", "runs", id, "purge"));
  return buttons;
}

function taskButtons(task) {
  if (!canAct || TERMINAL.includes(task.status)) return [];
  return [actionButton("Cancel", "tasks", task.task_id, "cancel")];
}

function actionCell(buttons) {
  const td = cell("", "act");
  for (const button of buttons) td.appendChild(button);
  return td;
}

function confirmAction(kind, id, action, label) {
  pending = { kind, id, action };
  text("confirm-title", label + " " + (kind === "runs" ? "run" : "task") + " " + id + "?");
  text("confirm-text", EXPLAIN[kind + "/" + action] || "");
  const reason = document.getElementById("confirm-reason");
  reason.value = "";
  document.getElementById("confirm-reason-label").hidden = false;
  document.getElementById("confirm-result").hidden = true;
  const ok = document.getElementById("confirm-ok");
  ok.hidden = false;
  ok.disabled = false;
  ok.textContent = "Confirm: " + action;
  text("confirm-back", "Back");
  document.getElementById("confirm").showModal();
  reason.focus();
}

document.getElementById("confirm-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!pending) return;
  const { kind, id, action } = pending;
  pending = null;
  const ok = document.getElementById("confirm-ok");
  ok.disabled = true;
  const reason = document.getElementById("confirm-reason").value.trim();
  const result = document.getElementById("confirm-result");
  try {
    const response = await api("/api/" + kind + "/" + encodeURIComponent(id) + "/" + action, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ reason: reason || null }),
    });
    if (response.ok) {
      result.textContent = "Done: " + action + " of " + id + ".\n" + JSON.stringify(await response.json(), null, 2);
      result.className = "result done";
    } else {
      result.textContent = action + " refused (HTTP " + response.status + "): " + (await errorText(response));
      result.className = "result failed";
    }
  } catch (error) {
    if (error instanceof SignInNeeded) {
      document.getElementById("confirm").close();
      return;
    }
    result.textContent = action + " failed: " + error.message;
    result.className = "result failed";
  }
  result.hidden = false;
  ok.hidden = true;
  document.getElementById("confirm-reason-label").hidden = true;
  text("confirm-back", "Close");
  document.getElementById("confirm-back").focus();
  poll();
});

document.getElementById("confirm-back").addEventListener("click", () => document.getElementById("confirm").close());
document.getElementById("confirm").addEventListener("close", () => { pending = null; });

// ------------------------------------------------------------------ filters --

function query() {
  return document.getElementById("filter").value.trim().toLowerCase();
}

// Whether a row's visible text (its buttons left out) holds the filter's text.
function matches(tr, q) {
  if (!q) return true;
  const words = [...tr.children].filter((td) => !td.classList.contains("act")).map((td) => td.textContent);
  return words.join(" ").toLowerCase().includes(q);
}

for (const id of ["filter", "run-state", "task-status"]) {
  document.getElementById(id).addEventListener("input", () => { if (last) render(last); });
}

// ------------------------------------------------------------------ overview --

function runState(run, now) {
  if (run.state) return run.state;
  if (run.parked) return "parked";
  return run.owner && run.lease_until_ms > now ? "running" : "waiting";
}

function render(s) {
  const shown = s.show_payloads;
  if (typeof s.can_act === "boolean") canAct = s.can_act;
  document.body.classList.toggle("can-act", canAct);
  text("worker", s.worker_id);
  const badge = document.getElementById("payloads");
  badge.textContent = shown ? "payloads shown" : "payloads redacted";
  badge.className = shown ? "badge shown" : "badge";
  const errors = document.getElementById("errors");
  errors.hidden = s.errors.length === 0;
  errors.textContent = s.errors.join("\n");

  text("count-sessions", s.sessions.length);
  text("count-open", s.streams.open);
  text("count-runs", s.in_flight.length);
  text("count-tasks", s.tasks.length);
  text("count-recovered", s.recoveries.runs.length);

  const q = query();
  const wantedState = document.getElementById("run-state").value;
  const wantedStatus = document.getElementById("task-status").value;

  const runs = s.in_flight.filter((r) => !wantedState || runState(r, s.now_ms) === wantedState);
  fill("in-flight", runs, (r) => {
    const state = runState(r, s.now_ms);
    return [
      linkCell(r.run_id, runHref), cell(state, state + " nowrap"), cell(r.method, "nowrap"), cell(r.target), cell(JSON.stringify(r.request_id)),
      cell(r.principal), cell(r.session, "id"), cell(r.owner === null ? "(released)" : r.owner),
      cell(r.lease, r.lease.startsWith("expired") ? "expired nowrap" : "nowrap"), cell(r.attempt), linkCell(r.task_id, taskHref),
      payload(r.arguments, shown), actionCell(runButtons(r.run_id, state)),
    ];
  }, s.in_flight.length ? "no run in this state" : "no request in flight", (tr) => matches(tr, q));

  fill("sessions", s.sessions, (x) => [
    cell(x.id, "id"), cell(x.principal), cell(x.protocol_version), cell(x.client_name),
    cell(time(x.created_at_ms)), cell(ago(x.last_seen_ms, s.now_ms)),
    shown ? cell(JSON.stringify(x.state), "id") : cell(x.state_keys.length ? "keys: " + x.state_keys.join(", ") : ""),
  ], "no live session", (tr) => matches(tr, q));

  const st = s.streams;
  text("streams-summary", "(" + st.total + (st.more ? "+" : "") + " in the store: " + st.open + " open, " + st.closed + " closed; the " + st.recent.length + " most recent)");
  fill("streams", st.recent, (x) => [
    cell(x.id, "id"), cell(x.principal), cell(x.session, "id"), cell(x.closed ? "closed" : "open", x.closed ? "closed" : "open"),
    cell(x.events), cell(x.retained),
  ], "no stream");

  const tasks = s.tasks.filter((t) => !wantedStatus || t.status === wantedStatus);
  fill("tasks", tasks, (t) => [
    linkCell(t.task_id, taskHref), cell(t.principal), cell(t.design), cell(t.status), cell(t.status_message),
    cell(t.created_at), cell(t.last_updated_at), cell(t.open_questions), actionCell(taskButtons(t)),
  ], s.tasks.length ? "no task with this status" : "no task", (tr) => matches(tr, q));

  fill("recoveries", s.recoveries.runs, (r) => [
    linkCell(r.run_id, runHref), cell(r.method), cell(r.target), cell(r.owner), cell(r.attempt), cell(r.failures),
  ], "no recovered run in flight");
  const counters = s.recoveries.counters;
  fill("counters", counters ? Object.entries(counters) : [], ([name, value]) => [cell(name), cell(value)],
    counters ? "no recovery, takeover or lost lease counted yet" : "metrics are off (serve --metrics-listen)");

  fill("latency", s.store_latency, (l) => [
    cell(l.operation), cell(l.last_ms.toFixed(2)), cell(l.p50_ms.toFixed(2)), cell(l.max_ms.toFixed(2)), cell(l.samples),
  ], "no store call yet");
}

// ------------------------------------------------------------------- charts --

const CHARTS = [
  { title: "calls per second", series: [["calls_per_s", "calls/s"]] },
  { title: "latency, ms", series: [["p50_ms", "p50"], ["p99_ms", "p99"]] },
  { title: "errors per interval", series: [["errors", "errors"]] },
  { title: "recoveries per interval", series: [["recoveries", "recoveries"]] },
];

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

// The smallest 1, 2 or 5 times a power of ten at or above `value` (at least 1).
function ceiling(value) {
  if (!(value > 1)) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

// One small line chart of the last hour: a polyline per series and run of non-null points.
function chart(spec, points) {
  const W = 300;
  const H = 70;
  const figure = el("figure", null, "chart");
  const caption = el("figcaption");
  caption.appendChild(el("span", spec.title, "title"));
  const latest = points[points.length - 1];
  spec.series.forEach(([field, label], i) => {
    const value = latest ? latest[field] : null;
    caption.appendChild(el("span", (spec.series.length > 1 ? label + " " : "") + number(value), "key s" + i));
  });
  figure.appendChild(caption);

  const end = latest ? latest.at_ms : Date.now();
  const max = ceiling(Math.max(0, ...points.flatMap((p) => spec.series.map(([field]) => p[field] || 0))));
  const x = (at) => Math.max(0, W - ((end - at) / HOUR_MS) * W).toFixed(1);
  const y = (v) => (H - (v / max) * (H - 4)).toFixed(1);
  const drawing = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": spec.title + ", last hour" });
  drawing.appendChild(svg("line", { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, class: "axis" }));
  drawing.appendChild(svg("line", { x1: 0, y1: 4, x2: W, y2: 4, class: "grid" }));
  const top = svg("text", { x: 2, y: 13, class: "label" });
  top.textContent = number(max);
  drawing.appendChild(top);
  if (points.length === 0) {
    const note = svg("text", { x: W / 2, y: H / 2 + 4, class: "label", "text-anchor": "middle" });
    note.textContent = "no point yet: one every 10 s";
    drawing.appendChild(note);
  }
  spec.series.forEach(([field], i) => {
    let run = [];
    const flush = () => {
      if (run.length === 1) drawing.appendChild(svg("circle", { cx: run[0][0], cy: run[0][1], r: 2, class: "series s" + i }));
      if (run.length > 1) drawing.appendChild(svg("polyline", { points: run.map((p) => p.join(",")).join(" "), class: "series s" + i }));
      run = [];
    };
    for (const p of points) {
      if (p[field] === null || p[field] === undefined) flush();
      else run.push([x(p.at_ms), y(p[field])]);
    }
    flush();
  });
  figure.appendChild(drawing);
  const axis = el("div", null, "when");
  axis.appendChild(el("span", "1 h ago"));
  axis.appendChild(el("span", "now"));
  figure.appendChild(axis);
  return figure;
}

function renderHistory(h) {
  const box = document.getElementById("charts");
  if (!h.metrics) {
    text("charts-summary", "");
    box.replaceChildren(el("p", "metrics are off on this worker (serve --metrics-listen)", "empty"));
    return;
  }
  text("charts-summary", "(this worker, " + number(h.interval_ms / 1000) + " s intervals, " + h.points.length + " so far)");
  box.replaceChildren(...CHARTS.map((spec) => chart(spec, h.points)));
}

// --------------------------------------------------------- run and task pages --

function heading(tag, words, id) {
  const h = el(tag, words + " ");
  h.appendChild(el("code", id));
  return h;
}

function buttons(list) {
  const div = el("div", null, "buttons");
  for (const button of list) div.appendChild(button);
  return div;
}

// A run's timeline, as nodes: its entry, attempts, steps, stream messages and actions.
function timeline(t) {
  const nodes = [];
  const run = t.run;
  const now = Date.now();
  const state = run ? runState(run, now) : null;
  if (run) {
    nodes.push(fields([
      ["state", el("span", state, state)],
      ["method", run.method],
      ["tool / target", run.target],
      ["request id", JSON.stringify(run.request_id)],
      ["principal", run.principal],
      ["session", run.session],
      ["accepted", time(run.accepted_ms)],
      ["worker", (run.owner || "(released)") + (state === "running" ? ", lease until " + time(run.lease_until_ms) : "")],
      ["attempt", run.attempt + (run.failures ? " (" + run.failures + " ended without an outcome)" : "")],
      ...(run.task_id ? [["task", link(run.task_id, taskHref(run.task_id))]] : []),
    ]));
    if (run.parked) {
      nodes.push(el("p", "Parked (" + run.parked.reason + ") since " + time(run.parked.at_ms) + ":\n" + run.parked.error, "errors parked"));
    }
    if (canAct) nodes.push(buttons(runButtons(run.run_id, state)));
  } else {
    nodes.push(el("p", "Not in the journal: it finished, was killed or purged (its stream and the actions on it stay until retention removes them).", "note"));
  }

  nodes.push(el("h3", "Attempts"));
  const attempts = run ? run.attempts || [] : [];
  nodes.push(table(["attempt", "worker", "started", "ended", "ended at"], attempts, (a) => [
    cell(a.attempt), cell(a.worker), cell(time(a.started_ms)),
    a.ended ? cell(a.ended.how, a.ended.how === "handed_over" ? "" : "bad") : cell(state === "parked" ? "" : "(running)", "open"),
    cell(a.ended ? time(a.ended.at_ms) : ""),
  ], run ? "no attempt recorded" : "its attempts left the journal with it", "attempts"));

  nodes.push(el("h3", "Steps and answers"));
  nodes.push(table(["kind", "name", "committed", "attempt", "worker", "bytes", "ran ms"], t.steps, (s) => [
    cell(s.kind), cell(s.name), cell(time(s.at_ms)), cell(s.attempt), cell(s.worker), cell(s.bytes), cell(s.ms),
  ], "no committed step", "steps"));

  const stream = t.stream;
  const streamHeading = el("h3", "Stream messages ");
  streamHeading.appendChild(el("small", "(" + stream.state + ")"));
  nodes.push(streamHeading);
  nodes.push(table(["seq", "kind", "method or error", "bytes"], stream.messages, (m) => [
    cell(m.seq), cell(m.kind),
    m.error ? cell(m.error.code + ": " + m.error.message, "bad") : cell(m.method),
    cell(m.bytes),
  ], "no message", "messages"));

  nodes.push(el("h3", "Operator actions"));
  nodes.push(table(["when", "action", "by", "reason"], t.actions, (a) => [
    cell(time(a.at_ms)), cell(a.action), cell(a.by), cell(a.reason),
  ], "no action", "actions"));
  return nodes;
}

async function runPage(id) {
  const t = await json("/api/runs/" + encodeURIComponent(id));
  return [heading("h2", "Run", id), ...timeline(t)];
}

async function taskPage(id) {
  const answer = await json("/api/tasks/" + encodeURIComponent(id));
  const task = answer.task;
  const nodes = [heading("h2", "Task", id)];
  nodes.push(fields([
    ["status", el("span", task.status, TERMINAL.includes(task.status) ? "closed" : "open")],
    ["message", task.status_message],
    ["principal", task.principal],
    ["design", task.design],
    ["created", task.created_at],
    ["updated", task.last_updated_at],
    ["ttl", task.ttl_ms === null || task.ttl_ms === undefined ? "" : number(task.ttl_ms / 1000) + " s"],
    ["open questions", task.open_questions],
    ["session", task.session],
    ["run", task.run_id ? link(task.run_id, runHref(task.run_id)) : ""],
  ]));
  if (canAct) nodes.push(buttons(taskButtons(task)));
  if (answer.timeline) {
    nodes.push(heading("h2", "Its run", task.run_id || ""));
    nodes.push(...timeline(answer.timeline));
  } else {
    nodes.push(el("p", "Nothing is left of its run (finished, and retention removed its stream).", "note"));
  }
  return nodes;
}

// ------------------------------------------------------------------ polling --

function route() {
  const match = /^#\/(runs|tasks)\/(.+)$/.exec(location.hash);
  if (!match) return { page: "overview" };
  let id = match[2];
  try {
    id = decodeURIComponent(id);
  } catch (_) {
    // left as it is
  }
  return { page: match[1] === "runs" ? "run" : "task", id };
}

async function refresh() {
  if (me === null) await whoami();
  const where = route();
  if (where.page === "overview") {
    view("overview");
    const snapshot = await json("/api/snapshot");
    last = snapshot;
    render(snapshot);
    if (Date.now() - historyAt >= HISTORY_MS) {
      historyAt = Date.now();
      try {
        renderHistory(await json("/api/history"));
      } catch (error) {
        if (error instanceof SignInNeeded) throw error;
        text("charts-summary", "(history unavailable: " + error.message + ")");
      }
    }
    return;
  }
  view("detail");
  document.body.classList.toggle("can-act", canAct);
  const body = document.getElementById("detail-body");
  try {
    body.replaceChildren(...(where.page === "run" ? await runPage(where.id) : await taskPage(where.id)));
  } catch (error) {
    if (!(error instanceof HttpError) || error.status !== 404) throw error;
    body.replaceChildren(heading("h2", where.page === "run" ? "Run" : "Task", where.id),
      el("p", "Nothing is known of it (" + error.message + ").", "note"));
  }
}

function schedule(ms) {
  clearTimeout(timer);
  timer = setTimeout(poll, ms);
}

async function poll() {
  clearTimeout(timer);
  if (signingIn) return;
  if (busy) {
    again = true;
    return;
  }
  busy = true;
  const status = document.getElementById("status");
  try {
    await refresh();
    status.textContent = "updated " + new Date().toLocaleTimeString();
    status.className = "status";
  } catch (error) {
    if (!(error instanceof SignInNeeded)) {
      status.textContent = "update failed: " + error.message;
      status.className = "status stale";
    }
  }
  busy = false;
  if (signingIn) return;
  schedule(again ? 0 : POLL_MS);
  again = false;
}

window.addEventListener("hashchange", () => {
  document.getElementById("detail-body").replaceChildren();
  window.scrollTo(0, 0);
  poll();
});

poll();
