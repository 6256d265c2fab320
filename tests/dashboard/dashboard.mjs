// The durable-mcp dashboard in a real headless browser (Debian's chromium, driven by
// playwright-core; run by scripts/dashboard-test.sh, which starts the server with two
// dashboard API keys, a read-only one and one that may act):
//
//   node dashboard.mjs --dashboard http://127.0.0.1:P/ --mcp http://127.0.0.1:Q/mcp \
//        --chromium /usr/bin/chromium --playwright DIR --screenshot FILE \
//        --screenshot-run FILE --viewer-key SECRET --ops-key SECRET
//
// 1. no_credential_401: /api/snapshot without a token (or with a wrong one) is 401;
// 2. page_loads: the page asks for a key, the ops key is entered in its form, and it
//    renders a snapshot (the worker id and the principal appear);
// 3. shows_session: a session this script created as an MCP client appears in Sessions;
// 4. updates_live: a slow tools/call (`steps`) started after the page loaded appears in
//    the in-flight list with its worker, without a reload; then a screenshot;
// 5. charts: the four charts of the last hour are drawn (the server has metrics on);
// 6. filters: the text box and the state select hide the rows that do not match;
// 7. read_only_cannot_act: with the viewer key, the page shows a live run but no button,
//    and a POST of a cancel with that key is 403;
// 8. cancel_ends_a_live_run: Cancel on the run's row, a reason, Confirm in the dialog: the
//    run leaves the list and its client reads the error -32040 with the reason;
// 9. run_page: a live run's page (from its link) shows its attempt and steps; a
//    screenshot; then Kill from that page, and the page shows the action;
// 10. sign_out: the link forgets the key and brings the form back.
// Prints one PASS/FAIL line per check and closes with "N passed, M failed".
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values: opts } = parseArgs({
  options: {
    dashboard: { type: "string" },
    mcp: { type: "string" },
    chromium: { type: "string", default: "/usr/bin/chromium" },
    playwright: { type: "string" },
    screenshot: { type: "string" },
    "screenshot-run": { type: "string" },
    "viewer-key": { type: "string" },
    "ops-key": { type: "string" },
  },
});
for (const required of ["dashboard", "mcp", "playwright", "screenshot", "screenshot-run", "viewer-key", "ops-key"]) {
  if (!opts[required]) {
    console.error(`missing --${required}`);
    process.exit(2);
  }
}
const require = createRequire(join(opts.playwright, "package.json"));
const { chromium } = require("playwright-core");

const TIMEOUT = 20_000;
const VIEWER = opts["viewer-key"];
const OPS = opts["ops-key"];
const results = [];
async function check(name, body) {
  try {
    await body();
    results.push([name, true]);
    console.log(`PASS ${name}`);
  } catch (error) {
    results.push([name, false]);
    console.log(`FAIL ${name}: ${error && error.stack ? error.stack : error}`);
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function within(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms); });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const MCP_HEADERS = { accept: "application/json, text/event-stream", "content-type": "application/json" };

async function mcp(body, session) {
  const headers = { ...MCP_HEADERS };
  if (session) headers["mcp-session-id"] = session;
  return fetch(opts.mcp, { method: "POST", headers, body: JSON.stringify(body) });
}

async function initialize() {
  const response = await mcp({
    jsonrpc: "2.0", id: 0, method: "initialize",
    params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "dashboard-browser-test", version: "1" } },
  });
  if (response.status !== 200) throw new Error(`initialize: HTTP ${response.status}`);
  const session = response.headers.get("mcp-session-id");
  await response.text();
  const ack = await mcp({ jsonrpc: "2.0", method: "notifications/initialized" }, session);
  if (ack.status !== 202) throw new Error(`notifications/initialized: HTTP ${ack.status}`);
  return session;
}

// A `steps` call in a session of its own: its session, and its whole response body (the
// SSE stream, read to its end; an error if the connection is cut).
async function longCall(args) {
  const session = await initialize();
  const body = mcp({ jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "steps", arguments: args } }, session)
    .then((response) => response.text());
  body.catch(() => {}); // read (or given up) later
  return { session, body };
}

// The JSON-RPC messages of an SSE body.
function sseMessages(body) {
  return body.split(/\r?\n/).filter((line) => line.startsWith("data:")).flatMap((line) => {
    try {
      return [JSON.parse(line.slice(5))];
    } catch (_) {
      return [];
    }
  });
}

// The dashboard's API, with a key or none.
function api(path, key, init = {}) {
  const headers = { ...(init.headers || {}) };
  if (key) headers.authorization = `Bearer ${key}`;
  return fetch(new URL(path, opts.dashboard), { ...init, headers });
}

// The id of session `session`'s `steps` run, once the snapshot lists it.
async function runOf(session) {
  const deadline = Date.now() + TIMEOUT;
  while (Date.now() < deadline) {
    const response = await api("api/snapshot", OPS);
    if (response.status !== 200) throw new Error(`GET /api/snapshot with the ops key: HTTP ${response.status}`);
    const snapshot = await response.json();
    const run = snapshot.in_flight.find((r) => r.session === session && r.target === "steps");
    if (run) return run.run_id;
    await sleep(200);
  }
  throw new Error(`no steps run of session ${session} in flight`);
}

// Enters `key` in the page's sign-in form; then waits for the principal.
async function signIn(page, key, principal) {
  await page.locator("#login").waitFor({ state: "visible", timeout: TIMEOUT });
  await page.fill("#token", key);
  await page.click("#login button[type=submit]");
  await page.waitForFunction((who) => {
    const viewer = document.getElementById("viewer");
    return viewer && !viewer.hidden && document.getElementById("principal").textContent === who;
  }, principal, { timeout: TIMEOUT });
}

// The row of run `id` in the in-flight table.
function runRow(page, id) {
  return page.locator("#in-flight tbody tr", { has: page.locator("td:first-child", { hasText: id }) });
}

// Confirms the open dialog with `reason`; returns the result it shows, and closes it.
async function confirm(page, reason) {
  const dialog = page.locator("#confirm");
  await dialog.waitFor({ state: "visible", timeout: TIMEOUT });
  await page.fill("#confirm-reason", reason);
  await page.click("#confirm-ok");
  const result = page.locator("#confirm-result");
  await result.waitFor({ state: "visible", timeout: TIMEOUT });
  const text = await result.textContent();
  await page.click("#confirm-back");
  await dialog.waitFor({ state: "hidden", timeout: TIMEOUT });
  return text;
}

const profile = mkdtempSync(join(tmpdir(), "dashboard-chromium-"));
let context;
let slowCall;
const calls = [];
try {
  await check("no_credential_401", async () => {
    for (const [what, key] of [["no token", null], ["a wrong token", "not-a-key"]]) {
      const response = await api("api/snapshot", key);
      if (response.status !== 401) throw new Error(`GET /api/snapshot with ${what}: HTTP ${response.status}`);
      const challenge = response.headers.get("www-authenticate") || "";
      if (!challenge.startsWith("Bearer")) throw new Error(`WWW-Authenticate: ${challenge}`);
      const body = await response.json();
      if (typeof body.error !== "string") throw new Error(`body: ${JSON.stringify(body)}`);
    }
  });

  // A fresh profile each run; the browser is the system's, never downloaded.
  context = await chromium.launchPersistentContext(profile, {
    executablePath: opts.chromium,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const watch = (p, name) => {
    p.on("console", (message) => { if (message.type() === "error") console.log(`[${name} console] ${message.text()}`); });
    p.on("pageerror", (error) => console.log(`[${name} error] ${error.message}`));
  };
  watch(page, "browser");

  await check("page_loads", async () => {
    const response = await page.goto(opts.dashboard, { waitUntil: "load", timeout: TIMEOUT });
    if (!response || response.status() !== 200) throw new Error(`GET ${opts.dashboard}: ${response && response.status()}`);
    await signIn(page, OPS, "key:ops");
    await page.waitForFunction(() => {
      const worker = document.getElementById("worker");
      return worker && worker.textContent !== "…" && worker.textContent.length > 0;
    }, null, { timeout: TIMEOUT });
    const role = await page.locator("#role").textContent();
    if (role !== "can act") throw new Error(`role: ${role}`);
    // Marks this document: a reload would lose it.
    await page.evaluate(() => { window.__dashboardTestMark = "loaded-once"; });
  });

  const session = await initialize();
  await check("shows_session", async () => {
    await page.waitForFunction((id) => {
      return [...document.querySelectorAll("#sessions tbody tr")].some((tr) => tr.textContent.includes(id) && tr.textContent.includes("anonymous"));
    }, session, { timeout: TIMEOUT });
  });

  await check("updates_live", async () => {
    const before = await page.locator("#in-flight tbody").textContent();
    if (before.includes("steps")) throw new Error(`a steps call is listed before one started: ${before}`);
    // Three durable steps of 1.5 s: in flight for ~4.5 s.
    slowCall = mcp({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "steps", arguments: { count: 3, step_ms: 1500 } } }, session)
      .then((response) => response.text());
    await page.waitForFunction(() => {
      return [...document.querySelectorAll("#in-flight tbody tr")].some((tr) => [...tr.children].some((td) => td.textContent === "steps"));
    }, null, { timeout: TIMEOUT });
    const mark = await page.evaluate(() => window.__dashboardTestMark);
    if (mark !== "loaded-once") throw new Error("the page was reloaded");
    const row = await page.locator("#in-flight tbody tr", { hasText: "steps" }).first().textContent();
    if (!row.includes("tools/call") || !row.includes("expires in") || !row.includes("running")) throw new Error(`in-flight row: ${row}`);
    // Arguments are redacted by default.
    if (!row.includes("redacted")) throw new Error(`arguments shown without --dashboard-show-payloads: ${row}`);
    // The ops key may act: the row has its buttons.
    if (!row.includes("Cancel") || !row.includes("Kill") || row.includes("Retry")) throw new Error(`buttons of a running run: ${row}`);
    await page.screenshot({ path: opts.screenshot, fullPage: true });
    console.log(`screenshot: ${opts.screenshot}`);
  });

  await check("charts", async () => {
    await page.waitForFunction(() => document.querySelectorAll("#charts figure svg").length === 4, null, { timeout: TIMEOUT });
    const titles = await page.locator("#charts figcaption .title").allTextContents();
    const expected = ["calls per second", "latency, ms", "errors per interval", "recoveries per interval"];
    if (JSON.stringify(titles) !== JSON.stringify(expected)) throw new Error(`chart titles: ${titles}`);
  });

  await check("filters", async () => {
    const rows = (id) => page.locator(`#${id} tbody tr`).allTextContents();
    // The session's id: only its row (and its run's) stay.
    await page.fill("#filter", session.slice(-12).toUpperCase());
    await page.waitForFunction((id) => {
      const sessions = [...document.querySelectorAll("#sessions tbody tr")];
      return sessions.length === 1 && sessions[0].textContent.includes(id);
    }, session, { timeout: TIMEOUT });
    await page.fill("#filter", "no row has this text");
    await page.waitForFunction(() => document.querySelector("#sessions tbody tr").textContent === "no row matches the filter", null, { timeout: TIMEOUT });
    // (The steps call may have ended by now: then the table says there is none.)
    const inFlight = await rows("in-flight");
    if (inFlight.length !== 1 || !/no row matches|no request in flight/.test(inFlight[0])) throw new Error(`in flight, filtered out: ${inFlight}`);
    await page.fill("#filter", "");
    // The steps call runs: none is parked.
    await page.selectOption("#run-state", "parked");
    await page.waitForFunction(() => !document.querySelector("#in-flight tbody").textContent.includes("steps"), null, { timeout: TIMEOUT });
    await page.selectOption("#run-state", "");
    const all = await rows("sessions");
    if (!all.some((row) => row.includes(session))) throw new Error(`the filter stays after it was cleared: ${all}`);
  });

  // A long call for the viewer to look at and the ops key to cancel: 500 steps of 40 ms.
  const first = await longCall({ count: 500, step_ms: 40 });
  calls.push(first.body);
  const firstRun = await runOf(first.session);

  await check("read_only_cannot_act", async () => {
    const viewer = await context.newPage();
    watch(viewer, "viewer");
    try {
      await viewer.goto(opts.dashboard, { waitUntil: "load", timeout: TIMEOUT });
      await signIn(viewer, VIEWER, "key:viewer");
      await runRow(viewer, firstRun).waitFor({ state: "visible", timeout: TIMEOUT });
      const role = await viewer.locator("#role").textContent();
      if (role !== "read only") throw new Error(`role: ${role}`);
      const buttons = await viewer.locator("main button:visible").count();
      if (buttons !== 0) throw new Error(`${buttons} button(s) shown to a viewer who cannot act`);
      if (await viewer.locator("#in-flight th.act").isVisible()) throw new Error("the actions column is shown");
      // The run's page has none either.
      await viewer.click(`#in-flight a:text-is("${firstRun}")`);
      await viewer.locator("#detail table.attempts").waitFor({ state: "visible", timeout: TIMEOUT });
      if ((await viewer.locator("main button:visible").count()) !== 0) throw new Error("buttons on the run page");
    } finally {
      await viewer.close();
    }
    const response = await api(`api/runs/${encodeURIComponent(firstRun)}/cancel`, VIEWER, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ reason: "a viewer tries" }),
    });
    if (response.status !== 403) throw new Error(`POST cancel with the viewer key: HTTP ${response.status} ${await response.text()}`);
    const body = await response.json();
    if (typeof body.error !== "string") throw new Error(`body: ${JSON.stringify(body)}`);
  });

  await check("cancel_ends_a_live_run", async () => {
    const reason = "stuck on a lock (dashboard test)";
    const row = runRow(page, firstRun);
    await row.waitFor({ state: "visible", timeout: TIMEOUT });
    await row.getByRole("button", { name: "Cancel" }).click();
    const title = await page.locator("#confirm-title").textContent();
    if (!title.includes("Cancel") || !title.includes(firstRun)) throw new Error(`dialog: ${title}`);
    const result = await confirm(page, reason);
    if (!result.includes('"action": "cancel"') || !result.includes('"by": "key:ops"') || !result.includes(reason)) {
      throw new Error(`result: ${result}`);
    }
    await row.waitFor({ state: "detached", timeout: TIMEOUT });
    const body = await within(first.body, TIMEOUT, "the cancelled call's stream");
    const outcome = sseMessages(body).find((message) => message.id === 7);
    if (!outcome || !outcome.error || outcome.error.code !== -32040 || !outcome.error.message.includes(reason)) {
      throw new Error(`the client read: ${body.slice(0, 600)}`);
    }
  });

  await check("run_page", async () => {
    // Twelve steps of 1 s: a few are committed by the time of the screenshot.
    const second = await longCall({ count: 12, step_ms: 1000 });
    calls.push(second.body);
    const id = await runOf(second.session);
    const link = page.locator(`#in-flight a:text-is("${id}")`);
    await link.waitFor({ state: "visible", timeout: TIMEOUT });
    await link.click();
    await page.waitForFunction((run) => location.hash === "#/runs/" + encodeURIComponent(run), id, { timeout: TIMEOUT });
    await page.locator("#detail table.attempts tbody tr", { hasText: "dashboard-test-worker" }).waitFor({ timeout: TIMEOUT });
    await page.waitForFunction(() => {
      const steps = [...document.querySelectorAll("#detail table.steps tbody tr")];
      return steps.filter((tr) => tr.children[0].textContent === "step").length >= 3;
    }, null, { timeout: TIMEOUT });
    const fields = await page.locator("#detail table.fields").first().textContent();
    if (!/running|waiting/.test(fields) || !fields.includes("steps") || !fields.includes("anonymous")) throw new Error(`run fields: ${fields}`);
    const step = await page.locator("#detail table.steps tbody tr").first().textContent();
    if (!step.includes("dashboard-test-worker")) throw new Error(`step row: ${step}`);
    await page.screenshot({ path: opts["screenshot-run"], fullPage: true });
    console.log(`screenshot: ${opts["screenshot-run"]}`);

    // Kill from the run's page: the page then shows it out of the journal, and the action.
    await page.locator("#detail").getByRole("button", { name: "Kill" }).click();
    const result = await confirm(page, "done looking");
    if (!result.includes('"action": "kill"')) throw new Error(`result: ${result}`);
    await page.locator("#detail p.note", { hasText: "Not in the journal" }).waitFor({ timeout: TIMEOUT });
    await page.locator("#detail table.actions tbody tr", { hasText: "done looking" }).waitFor({ timeout: TIMEOUT });
    await page.click("#back");
    await page.locator("#overview").waitFor({ state: "visible", timeout: TIMEOUT });
  });

  await check("sign_out", async () => {
    await page.click("#sign-out");
    await page.locator("#login").waitFor({ state: "visible", timeout: TIMEOUT });
    const kept = await page.evaluate(() => Object.keys(sessionStorage).length);
    if (kept !== 0) throw new Error(`sessionStorage keeps ${kept} item(s)`);
    if (await page.locator("#overview").isVisible()) throw new Error("the overview is still shown");
  });

  if (slowCall) {
    const body = await within(slowCall, TIMEOUT, "the first steps call").catch((error) => error.message);
    if (!body.includes('"steps"')) console.log(`note: the steps call answered ${body.slice(0, 200)}`);
  }
} catch (error) {
  results.push(["browser", false]);
  console.log(`FAIL browser: ${error && error.stack ? error.stack : error}`);
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
  await Promise.allSettled(calls.map((call) => within(call, 2_000, "a call")));
}
const passed = results.filter(([, ok]) => ok).length;
const failed = results.length - passed;
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
