// The durable-mcp dashboard: polls /api/snapshot every second and renders it. Everything
// from the snapshot goes into the DOM as text (textContent), never as markup.
"use strict";

const POLL_MS = 1000;

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
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
  return cell(value === undefined ? "" : JSON.stringify(value));
}

// Replace the rows of table `id` with one row per item (`row` returns its cells).
function fill(id, items, row, empty) {
  const body = document.querySelector("#" + id + " tbody");
  const columns = document.querySelectorAll("#" + id + " thead th").length;
  const rows = items.map((item) => {
    const tr = document.createElement("tr");
    for (const td of row(item)) tr.appendChild(td);
    return tr;
  });
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const td = cell(empty, "empty");
    td.colSpan = columns;
    tr.appendChild(td);
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

function text(id, value) {
  document.getElementById(id).textContent = String(value);
}

function render(s) {
  const shown = s.show_payloads;
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

  fill("in-flight", s.in_flight, (r) => [
    cell(r.method), cell(r.target), cell(JSON.stringify(r.request_id)), cell(r.principal), cell(r.session),
    cell(r.owner === null ? "(released)" : r.owner), cell(r.lease, r.lease.startsWith("expired") ? "expired" : ""),
    cell(r.attempt), cell(r.task_id), payload(r.arguments, shown),
  ], "no request in flight");

  fill("sessions", s.sessions, (x) => [
    cell(x.id), cell(x.principal), cell(x.protocol_version), cell(x.client_name),
    cell(time(x.created_at_ms)), cell(ago(x.last_seen_ms, s.now_ms)),
    shown ? cell(JSON.stringify(x.state)) : cell(x.state_keys.length ? "keys: " + x.state_keys.join(", ") : ""),
  ], "no live session");

  const st = s.streams;
  text("streams-summary", "(" + st.total + (st.more ? "+" : "") + " in the store: " + st.open + " open, " + st.closed + " closed; the " + st.recent.length + " most recent)");
  fill("streams", st.recent, (x) => [
    cell(x.id), cell(x.principal), cell(x.session), cell(x.closed ? "closed" : "open", x.closed ? "closed" : "open"),
    cell(x.events), cell(x.retained),
  ], "no stream");

  fill("tasks", s.tasks, (t) => [
    cell(t.task_id), cell(t.principal), cell(t.design), cell(t.status), cell(t.status_message),
    cell(t.created_at), cell(t.last_updated_at), cell(t.open_questions),
  ], "no task");

  fill("recoveries", s.recoveries.runs, (r) => [
    cell(r.run_id), cell(r.method), cell(r.target), cell(r.owner), cell(r.attempt), cell(r.failures),
  ], "no recovered run in flight");
  const counters = s.recoveries.counters;
  fill("counters", counters ? Object.entries(counters) : [], ([name, value]) => [cell(name), cell(value)],
    counters ? "no recovery, takeover or lost lease counted yet" : "metrics are off (serve --metrics-listen)");

  fill("latency", s.store_latency, (l) => [
    cell(l.operation), cell(l.last_ms.toFixed(2)), cell(l.p50_ms.toFixed(2)), cell(l.max_ms.toFixed(2)), cell(l.samples),
  ], "no store call yet");
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const response = await fetch("/api/snapshot", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    status.textContent = "updated " + new Date().toLocaleTimeString();
    status.className = "status";
  } catch (error) {
    status.textContent = "update failed: " + error.message;
    status.className = "status stale";
  }
  setTimeout(poll, POLL_MS);
}

poll();
