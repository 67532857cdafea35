// The console in a real browser: headless Chromium driven by playwright-core, every
// page scanned by axe-core. `.ci/console-browser` starts `caseops serve` and runs
// this with:
//   CASEOPS_URL        the API's base URL (the console is at /ui)
//   CHROMIUM           the browser binary (default /usr/bin/chromium)
//   SCREENSHOTS        a folder for one PNG per page (optional)
//
// The story: the investigator signs in, starts a C-104 run through the API and
// watches it appear and park for approval; the supervisor approves it in the
// console and the investigator's list turns it completed live; its timeline shows
// the approval path. A second run is rejected, a third is decided twice (the second
// try shows 409), the audit chain verifies, and the second tenant sees none of it.
import { chromium } from "playwright-core";
import { createRequire } from "node:module";
import { mkdirSync } from "node:fs";
import path from "node:path";

const require = createRequire(import.meta.url);
const AXE = require.resolve("axe-core/axe.min.js");
const BASE = process.env.CASEOPS_URL;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.SCREENSHOTS || "";
const DEMO = "dev-key-tenant-demo";
const SUPERVISOR = "dev-key-tenant-demo-supervisor";
const OTHER = "dev-key-tenant-other";
const WAIT = 15000;

if (!BASE) {
  console.error("set CASEOPS_URL to the API's base URL");
  process.exit(2);
}
if (SHOTS) mkdirSync(SHOTS, { recursive: true });

let failures = 0;
let step = 0;
function say(text) {
  step += 1;
  console.log(`  ${String(step).padStart(2)}. ${text}`);
}
function check(ok, message) {
  if (!ok) throw new Error(message);
}

/// Every serious or critical axe violation on the page fails the test.
const scanned = [];
async function scan(page, name) {
  await page.addScriptTag({ path: AXE });
  const result = await page.evaluate(async () =>
    // eslint-disable-next-line no-undef
    axe.run(document, { resultTypes: ["violations"] }),
  );
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  const minor = result.violations.length - bad.length;
  scanned.push(`${name}: ${bad.length} serious/critical, ${minor} minor`);
  if (bad.length > 0) {
    const list = bad
      .map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`)
      .join("\n    ");
    throw new Error(`axe on ${name}:\n    ${list}`);
  }
}

async function shot(page, name) {
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

async function api(method, key, route, body) {
  const headers = { "x-api-key": key };
  if (body) {
    headers["content-type"] = "application/json";
    headers["idempotency-key"] = `browser-${Date.now()}-${Math.random().toString(16).slice(2)}`;
  }
  const r = await fetch(BASE + route, { method, headers, body: body ? JSON.stringify(body) : undefined });
  return { status: r.status, json: await r.json().catch(() => null) };
}

async function runStatus(runId) {
  return (await api("GET", DEMO, `/v1/agent-runs/${runId}`)).json;
}

async function until(what, probe) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function startC104() {
  const { status, json } = await api("POST", DEMO, "/v1/cases/C-104/agent-runs", {
    goal: "Hand case C-104 to the assessors.",
  });
  check(status === 201 || status === 202, `starting a run: ${status} ${JSON.stringify(json)}`);
  return json.run_id;
}

async function signIn(context, key) {
  const page = await context.newPage();
  await page.goto(`${BASE}/ui/runs`);
  check(page.url().includes("/ui/sign-in"), `not sent to sign in: ${page.url()}`);
  await page.fill("#api_key", key);
  await Promise.all([page.waitForURL(/\/ui\/runs$/), page.click("button[type=submit]")]);
  return page;
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
// bypassCSP: axe is injected into pages whose policy forbids any script not ours.
const contextOptions = { bypassCSP: true, viewport: { width: 1280, height: 900 } };

try {
  const investigator = await browser.newContext(contextOptions);
  const supervisor = await browser.newContext(contextOptions);
  const other = await browser.newContext(contextOptions);

  say("the investigator signs in; the session cookie is HttpOnly and SameSite=Strict");
  {
    const page = await investigator.newPage();
    await page.goto(`${BASE}/ui/runs`);
    await page.waitForSelector("#api_key");
    await scan(page, "sign-in");
    await shot(page, "sign-in");
    await page.fill("#api_key", "not-a-key");
    await page.click("button[type=submit]");
    await page.waitForSelector("#sign-in-error");
    check((await page.textContent("#sign-in-error")).includes("not accepted"), "a wrong key is named");
    await scan(page, "sign-in (refused)");
    await page.close();
  }
  const runsPage = await signIn(investigator, DEMO);
  const cookie = (await investigator.cookies()).find((c) => c.name === "caseops_console");
  check(cookie && cookie.httpOnly && cookie.sameSite === "Strict" && cookie.path === "/ui", `cookie: ${JSON.stringify(cookie)}`);
  check(!(await runsPage.evaluate(() => document.cookie)).includes("caseops_console"), "script cannot read the session");
  await scan(runsPage, "runs (empty)");

  say("a C-104 run started through the API appears in the open list and parks for approval");
  const first = await startC104();
  await runsPage.waitForSelector(".live-note a", { timeout: WAIT });
  await runsPage.click(".live-note a");
  await runsPage.waitForSelector(`tr[data-run-id="${first}"]`, { timeout: WAIT });
  await runsPage.waitForSelector(`tr[data-run-id="${first}"] .badge[data-status="waiting_approval"]`, { timeout: WAIT });

  say("the investigator may read the queue but not decide");
  const queue = await investigator.newPage();
  await queue.goto(`${BASE}/ui/approvals`);
  check((await queue.textContent("main")).includes("not decide them"), "the missing scope is said");
  check((await queue.$$("form.decide")).length === 0, "no decision form without the scope");
  await queue.close();

  // Approving marks the case ready for good: the runs to reject and to decide
  // twice park first, while the case still needs the approval.
  const second = await startC104();
  const third = await startC104();
  for (const run of [second, third]) {
    await until(`run ${run} to park`, async () => (await runStatus(run)).status === "waiting_approval");
  }
  const approvalOf = async (runId) => {
    const list = (await api("GET", DEMO, "/v1/approvals?status=pending")).json.approvals;
    return `approval-${list.find((a) => a.run_id === runId).approval_id}`;
  };

  say("the supervisor rejects a second run; it stops");
  const sup = await signIn(supervisor, SUPERVISOR);
  await sup.goto(`${BASE}/ui/approvals`);
  const rejectId = await approvalOf(second);
  await sup.fill(`#${rejectId} textarea`, "the certificate is unreadable");
  await Promise.all([sup.waitForURL(/decided=/), sup.click(`#${rejectId} button[value=reject]`)]);
  check((await sup.textContent("main")).includes("is rejected"), "the rejection is confirmed");
  const stopped = await until("the second run to stop", async () => {
    const r = await runStatus(second);
    return r.status === "stopped" ? r : null;
  });
  check(stopped.stop_reason === "APPROVAL_REJECTED", `stop reason: ${stopped.stop_reason}`);

  say("a decision made twice shows 409, not a silent success");
  const tabA = await supervisor.newPage();
  const tabB = await supervisor.newPage();
  await tabA.goto(`${BASE}/ui/approvals`);
  await tabB.goto(`${BASE}/ui/approvals`);
  const thirdId = await approvalOf(third);
  await Promise.all([tabA.waitForURL(/decided=/), tabA.click(`#${thirdId} button[value=reject]`)]);
  const [answer] = await Promise.all([
    tabB.waitForNavigation(),
    tabB.click(`#${thirdId} button[value=approve]`),
  ]);
  check(answer.status() === 409, `second decision answered ${answer.status()}`);
  check((await tabB.textContent("[role=alert]")).includes("already decided"), "the conflict is said");
  await scan(tabB, "approvals (conflict)");
  await shot(tabB, "approvals-conflict");

  say("the supervisor approves the first in the console; the investigator's list turns it completed live");
  await sup.goto(`${BASE}/ui/approvals`);
  const approval = await approvalOf(first);
  const text = await sup.textContent(`#${approval}`);
  for (const needle of ["caseops_mark_case_ready_for_assessment", "C-104", "user:demo-investigator", "Evidence so far", "Expires"]) {
    check(text.includes(needle), `the approval shows ${needle}`);
  }
  await scan(sup, "approvals (pending)");
  await shot(sup, "approvals");
  await sup.fill(`#${approval} textarea`, "all three documents checked");
  await Promise.all([sup.waitForURL(/decided=/), sup.click(`#${approval} button[value=approve]`)]);
  check((await sup.textContent("main")).includes("is approved"), "the decision is confirmed");
  await runsPage.waitForSelector(`tr[data-run-id="${first}"] .badge[data-status="completed"]`, { timeout: WAIT });
  await runsPage.reload();
  await shot(runsPage, "runs");
  await scan(runsPage, "runs");

  say("its page draws the approval path and the timeline");
  await Promise.all([sup.waitForURL(/\/ui\/runs\//), sup.click("main .notice a")]);
  await sup.waitForSelector('h1 .badge[data-status="completed"]', { timeout: WAIT });
  for (const [from, to] of [
    ["tool_proposed", "waiting_approval"],
    ["waiting_approval", "tool_authorized"],
    ["planning", "completed"],
  ]) {
    check(await sup.$(`path.edge.taken[data-from="${from}"][data-to="${to}"]`), `the path takes ${from} → ${to}`);
  }
  const timelineRows = await sup.$$("table.timeline tbody tr");
  const checkpoints = (await api("GET", DEMO, `/v1/agent-runs/${first}/checkpoints`)).json;
  const expected = (checkpoints.checkpoints || checkpoints).length;
  check(timelineRows.length === expected, `timeline rows ${timelineRows.length} = checkpoints ${expected}`);
  check((await sup.textContent("main")).includes("user:demo-supervisor"), "who approved is on the run page");
  await scan(sup, "run");
  await shot(sup, "run");

  say("a form post without the session's CSRF token is refused");
  const forged = await tabA.evaluate(async (id) => {
    const r = await fetch(`/ui/approvals/${id}/decision`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "decision=approve",
    });
    return r.status;
  }, thirdId.replace(/^approval-/, ""));
  check(forged === 403, `a token-less post answered ${forged}`);

  say("the audit chain verifies on demand");
  await sup.goto(`${BASE}/ui/audit`);
  await Promise.all([sup.waitForURL(/verify=1/), sup.click("main form button")]);
  check((await sup.textContent("#verification")).includes("The chain holds"), "the chain holds");
  await scan(sup, "audit");
  await shot(sup, "audit");

  say("the second tenant sees none of it");
  const theirs = await signIn(other, OTHER);
  check(!(await theirs.content()).includes(first), "another tenant's run is not listed");
  check((await theirs.textContent("main")).includes("No runs match."), "an empty list");
  const missing = await theirs.goto(`${BASE}/ui/runs/${first}`);
  check(missing.status() === 404, `another tenant's run answered ${missing.status()}`);
  await scan(theirs, "run (absent)");
  await theirs.goto(`${BASE}/ui/approvals`);
  const queueText = await theirs.textContent("main");
  check(queueText.includes("Nothing waits") && queueText.includes("No approval was decided yet"), "an empty queue");

  say("signing out ends the session");
  await Promise.all([theirs.waitForURL(/\/ui\/sign-in/), theirs.click("header form button")]);
  await theirs.goto(`${BASE}/ui/runs`);
  check(theirs.url().includes("/ui/sign-in"), "signed out");
} catch (e) {
  failures += 1;
  console.error(`FAILED at step ${step}: ${e.stack || e}`);
} finally {
  await browser.close();
}

for (const line of scanned) console.log(`  axe ${line}`);
if (failures > 0) process.exit(1);
console.log(`console browser test: ${step} steps passed`);
