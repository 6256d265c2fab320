// The durable-mcp dashboard in a real headless browser (Debian's chromium, driven by
// playwright-core; run by scripts/dashboard-test.sh, which starts the server):
//
//   node dashboard.mjs --dashboard http://127.0.0.1:P/ --mcp http://127.0.0.1:Q/mcp \
//        --chromium /usr/bin/chromium --playwright DIR --screenshot FILE
//
// 1. page_loads: the page loads and renders a snapshot (the worker id appears);
// 2. shows_session: a session this script created as an MCP client appears in Sessions;
// 3. updates_live: a slow tools/call (`steps`) started after the page loaded appears in
//    the in-flight list with its worker, without a reload; then a screenshot.
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
  },
});
for (const required of ["dashboard", "mcp", "playwright", "screenshot"]) {
  if (!opts[required]) {
    console.error(`missing --${required}`);
    process.exit(2);
  }
}
const require = createRequire(join(opts.playwright, "package.json"));
const { chromium } = require("playwright-core");

const TIMEOUT = 20_000;
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

const profile = mkdtempSync(join(tmpdir(), "dashboard-chromium-"));
let context;
let slowCall;
try {
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
  page.on("console", (message) => { if (message.type() === "error") console.log(`[browser console] ${message.text()}`); });
  page.on("pageerror", (error) => console.log(`[browser error] ${error.message}`));

  await check("page_loads", async () => {
    const response = await page.goto(opts.dashboard, { waitUntil: "load", timeout: TIMEOUT });
    if (!response || response.status() !== 200) throw new Error(`GET ${opts.dashboard}: ${response && response.status()}`);
    await page.waitForFunction(() => {
      const worker = document.getElementById("worker");
      return worker && worker.textContent !== "…" && worker.textContent.length > 0;
    }, null, { timeout: TIMEOUT });
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
      return [...document.querySelectorAll("#in-flight tbody tr")].some((tr) => tr.children[1] && tr.children[1].textContent === "steps");
    }, null, { timeout: TIMEOUT });
    const mark = await page.evaluate(() => window.__dashboardTestMark);
    if (mark !== "loaded-once") throw new Error("the page was reloaded");
    const row = await page.locator("#in-flight tbody tr", { hasText: "steps" }).first().textContent();
    if (!row.includes("tools/call") || !row.includes("expires in")) throw new Error(`in-flight row: ${row}`);
    // Arguments are redacted by default.
    if (!row.includes("redacted")) throw new Error(`arguments shown without --dashboard-show-payloads: ${row}`);
    await page.screenshot({ path: opts.screenshot, fullPage: true });
    console.log(`screenshot: ${opts.screenshot}`);
  });
  if (slowCall) {
    const body = await slowCall;
    if (!body.includes('"steps"')) console.log(`note: the steps call answered ${body.slice(0, 200)}`);
  }
} catch (error) {
  results.push(["browser", false]);
  console.log(`FAIL browser: ${error && error.stack ? error.stack : error}`);
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
const passed = results.filter(([, ok]) => ok).length;
const failed = results.length - passed;
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
