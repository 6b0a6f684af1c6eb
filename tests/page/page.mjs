// Drives the web page of `awf serve` in Debian's Chromium with playwright-core (the test is
// tests/tests/http_page.rs, which starts the server and checks what this script reports
// against the API). Usage:
//
//   node tests/page/page.mjs <scenario>
//
// Environment: AWF_BASE (the server's URL), PAGE_ARTIFACTS (where screenshots go),
// PLAYWRIGHT_CORE (path of the playwright-core package), CHROMIUM (default /usr/bin/chromium),
// PAGE_FLAG (scenario `fail`: the file whose creation lets the failing step pass on resume).
//
// Scenarios: `approve` (start `deploy` from its form with an input, watch the states light up,
// approve the gate, see the run finish), `cancel` (start `sleeper`, cancel it from its page),
// `fail` (start `breaks`, see its step fail, create PAGE_FLAG, resume it), `layout` (the page
// at 1280 and 390 px wide: no horizontal scroll, labels, visible focus), `agent` (an agent
// step's tool call, its result and the agent's answer), `chat` (a conversation: the page
// answers two turns typed into its text field), `live` (a run started over the API appears in
// the runs table and is followed until cancelled), `broken` (an invalid workflow's card shows
// its error and no Run button), `resume_terminal` (start `checks`, which ends at a failure
// terminal, resume it: the latest attempt's colours, one "resumed" marker, no stale stderr),
// `inline_terminal` (start `inline`, which ends at its step's inline `on_failure` terminal:
// that node, `check's on_failure`, turns red),
// `token` (the server wants the token PAGE_TOKEN: sign in, a wrong token asked again, the
// right one lists the workflows, a run started and followed live across a dropped stream),
// `breakpoint` (PAGE_RUN, an interactive run waiting at a breakpoint: preview, decisions,
// inspect, skip, the run finishes), `secret` (start `keyed` from its form: the secret input's
// field is an empty password field, left empty the server applies its real default, typed the
// value is sent; the API's `***` is never sent).
//
// Prints one JSON line `{"ok": true, ...facts}` on success. Exits 1 with `{"ok": false,
// "error": ...}` when a check fails, the page logs a console error, throws, or a request fails
// (the only failure tolerated: net::ERR_ABORTED of a GET /api/... the page abandons, such as
// an event stream it closes when leaving a view).

import { mkdtempSync, rmSync, mkdirSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const scenario = process.argv[2];
const base = process.env.AWF_BASE;
const artifacts = process.env.PAGE_ARTIFACTS;
const pwPath = process.env.PLAYWRIGHT_CORE;
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!scenario || !base || !artifacts || !pwPath) {
  console.log(JSON.stringify({ ok: false, error: 'usage: AWF_BASE=… PAGE_ARTIFACTS=… PLAYWRIGHT_CORE=… node page.mjs <scenario>' }));
  process.exit(2);
}
const { chromium } = await import(join(pwPath, 'index.mjs'));
mkdirSync(artifacts, { recursive: true });
for (const f of readdirSync(artifacts)) {
  if (f.startsWith(`${scenario}-`) && f.endsWith('.png')) rmSync(join(artifacts, f));
}

const FLAGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];
const T = 60_000; // generous: the machine is shared

const problems = [];
const facts = { scenario };
const userDataDir = mkdtempSync(join(tmpdir(), 'awf-page-chromium-'));
let ctx;

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

async function shot(page, name) {
  const path = join(artifacts, `${scenario}-${name}.png`);
  await page.screenshot({ path, fullPage: true });
  (facts.screenshots ||= []).push(path);
}

/** Records every change of a graph node's class (state-*) in window.__transitions. */
function recordTransitions() {
  window.__transitions = [];
  const seen = new Map();
  const note = (el) => {
    if (!(el instanceof SVGElement) || !el.classList.contains('node')) return;
    const st = [...el.classList].find((c) => c.startsWith('state-'));
    const name = el.getAttribute('data-state');
    if (!st || seen.get(name) === st) return;
    seen.set(name, st);
    window.__transitions.push([name, st.slice(6)]);
  };
  new MutationObserver((records) => {
    for (const r of records) {
      if (r.type === 'attributes') note(r.target);
      for (const n of r.addedNodes || []) {
        if (n instanceof Element) {
          note(n);
          n.querySelectorAll?.('g.node').forEach(note);
        }
      }
    }
  }).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['class'] });
}

async function openPage(viewport = { width: 1280, height: 900 }) {
  ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: chromiumPath, headless: true, args: FLAGS, viewport, timeout: T,
  });
  const page = ctx.pages()[0] || await ctx.newPage();
  page.setDefaultTimeout(T);
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    // Scenario `token`: the browser logs each refused request (401) of the sign-in as
    // "Failed to load resource"; those are what the scenario provokes, counted in facts.
    if (scenario === 'token' && /status of 401/.test(m.text()) && new URL(m.location().url || base).pathname.startsWith('/api/')) {
      facts.refused_requests = (facts.refused_requests || 0) + 1;
      return;
    }
    problems.push(`console error: ${m.text()} (${m.location().url || ''})`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    const err = r.failure()?.errorText || '';
    // A read the page abandons (an event stream it closes when leaving a view, a list it
    // stops waiting for on navigation) is aborted by the browser: not a failure. Anything
    // else is (a refused or reset connection, an aborted POST or DELETE).
    if (err === 'net::ERR_ABORTED' && r.method() === 'GET' && new URL(r.url()).pathname.startsWith('/api/')) return;
    problems.push(`request failed: ${r.method()} ${r.url()}: ${err}`);
  });
  await page.addInitScript(recordTransitions);
  return page;
}

/** Starts `workflow` from its form on the home page, filling `values` (input name → text)
 * and choosing `choices` (input name → option of its select). */
async function startFromForm(page, workflow, values = {}, choices = {}) {
  await page.goto(`${base}/`);
  const card = page.locator(`article.workflow[data-workflow="${workflow}"]`);
  await card.waitFor();
  const form = card.locator('form.run-form');
  await form.locator('button[type=submit]').waitFor();
  for (const [name, v] of Object.entries(values)) {
    await form.locator(`input[name="${name}"]`).fill(v);
  }
  for (const [name, v] of Object.entries(choices)) {
    await form.getByLabel(name).selectOption(v);
  }
  await form.locator('button[type=submit]').click();
  await page.waitForURL(/\/ui\/runs\/[^/]+$/);
  const id = decodeURIComponent(new URL(page.url()).pathname.split('/').pop());
  facts.run_id = id;
  await page.locator('svg.graph g.node').first().waitFor();
  return id;
}

const node = (page, name) => page.locator(`svg.graph g.node[data-state="${name}"]`);
const finalStatus = (page) => page.locator('.final-status');

async function transitions(page) {
  return page.evaluate(() => window.__transitions.slice());
}

/** The index in `tr` of `[name, state]`, -1 when absent. */
function at(tr, name, state) {
  return tr.findIndex(([n, s]) => n === name && s === state);
}

async function approve() {
  const page = await openPage();
  await startFromForm(page, 'deploy', { target: 'moon' }, { region: 'us' });
  // The form's integer default went through unchanged.
  const gate = page.locator('.pending article.request[data-kind="approval"]');
  await gate.waitFor();
  check((await gate.locator('h3').textContent()).includes('Ship to moon?'), 'the gate shows its interpolated message');
  check(await node(page, 'build').getAttribute('class').then((c) => c.includes('state-succeeded')), 'build succeeded before the gate');
  check(await node(page, 'ship').getAttribute('class').then((c) => c.includes('state-running')), 'ship is running while asked');
  check(await node(page, 'verify').getAttribute('class').then((c) => c.includes('state-pending')), 'verify still pending');
  await shot(page, '1-gate');
  await gate.locator('button[data-option="approve"]').click();
  await gate.waitFor({ state: 'detached' });
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'completed', 'the run completed');
  const tr = await transitions(page);
  facts.transitions = tr;
  const order = [
    ['build', 'running'], ['build', 'succeeded'], ['ship', 'running'], ['ship', 'succeeded'],
    ['verify', 'running'], ['verify', 'succeeded'], ['done', 'succeeded'],
  ];
  let last = -1;
  for (const [n, s] of order) {
    const i = at(tr, n, s);
    check(i > last, `${n} became ${s} after the previous state change (${JSON.stringify(tr)})`);
    last = i;
  }
  const out = (name) => page.locator(`details.step[data-step="${name}"] pre.output`).textContent();
  facts.build_output = await out('build');
  facts.ship_output = await out('ship');
  check(facts.build_output.includes('building moon x2'), `build output streamed (${facts.build_output})`);
  check(facts.ship_output.includes('shipped to moon'), 'ship output streamed');
  check(await page.locator('button', { hasText: 'Cancel' }).isDisabled(), 'cancel disabled after the end');
  await shot(page, '2-finished');
  // Back on the home page, the run is listed as completed with a duration.
  await page.locator('a', { hasText: '← All runs' }).click();
  const row = page.locator(`table.runs tr[data-run="${facts.run_id}"]`);
  await row.waitFor();
  check(await row.getAttribute('data-status') === 'completed', 'the runs table lists it completed');
  // Its duration comes from the history or, while the run is in memory, from its stream.
  await row.locator('td.num', { hasText: /\d/ }).waitFor();
  facts.listed_duration = (await row.locator('td.num').textContent()).trim();
  await shot(page, '3-runs');
}

async function cancel() {
  const page = await openPage();
  await startFromForm(page, 'sleeper');
  await page.locator('svg.graph g.node[data-state="nap"].state-running').waitFor();
  await page.locator('details.step[data-step="nap"] pre.output', { hasText: 'napping' }).waitFor();
  await shot(page, '1-running');
  const btn = page.locator('button', { hasText: 'Cancel' });
  check(!(await btn.isDisabled()), 'cancel enabled while running');
  await btn.click();
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'cancelled', 'the run shows cancelled');
  const cls = await node(page, 'nap').getAttribute('class');
  check(!cls.includes('state-running') && !cls.includes('state-succeeded'), `nap no longer running (${cls})`);
  facts.nap_class = cls;
  await shot(page, '2-cancelled');
}

async function fail() {
  const page = await openPage();
  const flag = process.env.PAGE_FLAG;
  check(flag, 'PAGE_FLAG set');
  await startFromForm(page, 'breaks');
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'failed', 'the run shows failed');
  check((await node(page, 'prepare').getAttribute('class')).includes('state-succeeded'), 'prepare succeeded');
  check((await node(page, 'risky').getAttribute('class')).includes('state-failed'), 'risky failed');
  const out = await page.locator('details.step[data-step="risky"] pre.output').textContent();
  check(out.includes('boom'), `the failing step's stderr is shown (${out})`);
  check(await page.locator('.final .error').count() === 1, 'the failure is shown');
  await shot(page, '1-failed');
  facts.failed_error = (await page.locator('.final .error').textContent()).trim();
  // Resume: the step passes now.
  writeFileSync(flag, 'ok\n');
  const resume = page.locator('button', { hasText: 'Resume' });
  check(!(await resume.isDisabled()), 'resume enabled after a failure');
  await resume.click();
  await page.locator('.final-status[data-status="completed"]').waitFor();
  check((await node(page, 'risky').getAttribute('class')).includes('state-succeeded'), 'risky succeeded on resume');
  check((await node(page, 'prepare').getAttribute('class')).includes('state-succeeded'), 'prepare keeps its first-leg state');
  check((await page.locator('details.step[data-step="risky"] pre.output').textContent()).includes('passed'), 'the resumed output');
  facts.resumed_run_id = decodeURIComponent(new URL(page.url()).pathname.split('/').pop());
  await shot(page, '2-resumed');
}

async function layout() {
  for (const width of [1280, 390]) {
    const page = await openPage({ width, height: 844 });
    await page.goto(`${base}/`);
    await page.locator('article.workflow[data-workflow="deploy"] form.run-form button[type=submit]').waitFor();
    const m = await page.evaluate(() => {
      const inputs = [...document.querySelectorAll('main input, main select')];
      return {
        scroll: document.documentElement.scrollWidth,
        client: document.documentElement.clientWidth,
        unlabelled: inputs.filter((i) => !i.labels || i.labels.length === 0).map((i) => i.id || i.name),
        inputs: inputs.length,
        landmarks: ['header', 'nav', 'main'].filter((t) => document.querySelector(t)).length,
        h1: document.querySelectorAll('h1').length,
        lang: document.documentElement.lang,
      };
    });
    check(m.scroll <= m.client, `no horizontal scroll at ${width} px (${m.scroll} > ${m.client})`);
    check(m.inputs > 0 && m.unlabelled.length === 0, `every input has a label (${m.unlabelled})`);
    check(m.landmarks === 3 && m.h1 === 1 && m.lang === 'en', 'semantic landmarks, one h1, a language');
    // Keyboard: the first input reached by Tab shows a focus outline.
    await page.locator('#main input').first().focus();
    await page.keyboard.press('Shift+Tab');
    await page.keyboard.press('Tab');
    const outline = await page.evaluate(() => {
      const a = document.activeElement;
      const s = getComputedStyle(a);
      return { tag: a.tagName, style: s.outlineStyle, width: s.outlineWidth };
    });
    check(outline.tag === 'INPUT' && outline.style !== 'none' && outline.width !== '0px', `visible focus (${JSON.stringify(outline)})`);
    await shot(page, `home-${width}`);
    // A run's page at this width.
    const id = await startFromForm(page, 'deploy', { target: `w${width}` });
    await page.locator('.pending article.request[data-kind="approval"]').waitFor();
    const g = await page.evaluate(() => {
      const svg = document.querySelector('svg.graph').getBoundingClientRect();
      return { right: svg.right, scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth };
    });
    check(g.scroll <= g.client && g.right <= g.client + 1, `the run page fits at ${width} px (${JSON.stringify(g)})`);
    await shot(page, `run-${width}`);
    // Opened afresh at its address, the run's page shows the open gate again (the
    // execution's `pending` and the replayed stream) and can still answer it.
    await page.goto(`${base}/ui/runs/${encodeURIComponent(id)}`);
    await page.locator('.pending article.request[data-kind="approval"]').waitFor();
    check(await page.locator('.pending article.request').count() === 1, 'one open request after a reload');
    await page.locator('button[data-option="reject"]').click();
    await page.locator('.final-status[data-status="failed"]').waitFor();
    (facts.runs ||= []).push(id);
    await ctx.close();
    ctx = undefined;
    rmSync(userDataDir, { recursive: true, force: true });
    mkdirSync(userDataDir, { recursive: true });
  }
}

async function agent() {
  const page = await openPage();
  await startFromForm(page, 'reader', { question: 'what is the secret word?' });
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'completed', 'the agent run completed');
  const step = page.locator('details.step[data-step="ask"]');
  await step.locator('ol.tools li.tool-call').first().waitFor();
  facts.tool_calls = await step.locator('ol.tools li.tool-call').evaluateAll((els) =>
    els.map((e) => ({ name: e.dataset.tool, fidelity: e.dataset.fidelity, id: e.dataset.id, text: e.textContent })));
  // One entry per call: the agent's report and the router's record of it are merged.
  check(facts.tool_calls.length === 1, `one tool call shown (${JSON.stringify(facts.tool_calls)})`);
  const call = step.locator('ol.tools li.tool-call[data-tool="Read"][data-fidelity="router"]');
  await call.waitFor();
  facts.tool_fidelity = await call.getAttribute('data-fidelity');
  facts.tool_input = await call.locator('code').textContent();
  facts.tool_result = await call.locator('pre.tool-result').textContent();
  check(facts.tool_result.includes('PAPAYA'), `the tool's result is shown (${facts.tool_result})`);
  facts.agent_text = await step.locator('.agent').textContent();
  check(facts.agent_text.includes('the word is PAPAYA'), `the agent's answer is shown (${facts.agent_text})`);
  check((await node(page, 'ask').getAttribute('class')).includes('state-succeeded'), 'ask succeeded');
  await shot(page, '1-agent');
}

/** Answers the open text request (conversation turn or missing input) with `text`. */
async function answerText(page, text) {
  const req = page.locator('.pending article.request[data-kind="conversation_turn"]');
  await req.waitFor();
  const id = await req.getAttribute('data-request');
  await req.getByLabel('Answer').fill(text);
  await req.getByRole('button', { name: 'Send' }).click();
  await page.locator(`.pending article.request[data-request="${id}"]`).waitFor({ state: 'detached' });
}

async function chat() {
  const page = await openPage();
  await startFromForm(page, 'chat');
  const agent = page.locator('details.step[data-step="talk"] .agent');
  await agent.filter({ hasText: 'hi there' }).waitFor();
  await shot(page, '1-turn');
  await answerText(page, 'tell me more');
  await agent.filter({ hasText: 'more about it' }).waitFor();
  await answerText(page, 'exit');
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'completed', 'the conversation completed');
  facts.agent_text = await agent.textContent();
  await shot(page, '2-done');
}

/** The runs table picks up a run started elsewhere (here: by this script over the API, as
 * curl would) and follows it over its stream until it ends. */
async function liveList() {
  const page = await openPage();
  await page.goto(`${base}/`);
  await page.locator('#runs').getByText('No runs yet.').waitFor();
  const r = await fetch(`${base}/api/workflows/env/sleeper/run`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"inputs":{}}',
  });
  check(r.status === 202, `POST run: ${r.status}`);
  const id = (await r.json()).body.execution_id;
  facts.run_id = id;
  const row = page.locator(`table.runs tr[data-run="${id}"]`);
  await row.waitFor();
  await page.locator(`table.runs tr[data-run="${id}"] .step`, { hasText: 'nap' }).waitFor();
  check(await row.getAttribute('data-status') === 'running', 'listed running');
  // Its duration ticks while it runs.
  const d0 = (await row.locator('td.num').textContent()).trim();
  await page.waitForFunction(([sel, d]) => {
    const t = document.querySelector(sel)?.textContent.trim();
    return t && t !== d && t !== '—';
  }, [`table.runs tr[data-run="${id}"] td.num`, d0]);
  await shot(page, '1-running');
  const c = await fetch(`${base}/api/executions/${id}`, { method: 'DELETE' });
  check(c.status === 204, `DELETE: ${c.status}`);
  await page.locator(`table.runs tr[data-run="${id}"][data-status="cancelled"]`).waitFor();
  await shot(page, '2-cancelled');
}

async function broken() {
  const page = await openPage();
  await page.goto(`${base}/`);
  const card = page.locator('article.workflow[data-workflow="invalid"]');
  await card.locator('.broken-error').waitFor();
  check((await card.getAttribute('class')).includes('broken'), 'the card is marked broken');
  facts.broken_error = (await card.locator('.broken-error').textContent()).trim();
  check(await card.locator('button').count() === 0, 'a broken workflow has no Run button');
  // A valid one beside it still has its form.
  await page.locator('article.workflow[data-workflow="breaks"] form.run-form button[type=submit]').waitFor();
  await shot(page, '1-broken');
}

async function resumeTerminal() {
  const page = await openPage();
  const flag = process.env.PAGE_FLAG;
  check(flag, 'PAGE_FLAG set');
  await startFromForm(page, 'checks');
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'failed', 'the run shows failed');
  check((await node(page, 'failed').getAttribute('class')).includes('state-failed'), 'the failure terminal is red');
  writeFileSync(flag, 'ok\n');
  await page.locator('button', { hasText: 'Resume' }).click();
  await page.locator('.final-status[data-status="completed"]').waitFor();
  const classes = {};
  for (const n of ['one', 'check', 'failed', 'done']) classes[n] = await node(page, n).getAttribute('class');
  facts.classes = classes;
  check(classes.check.includes('state-succeeded'), `check succeeded on resume (${classes.check})`);
  check(classes.done.includes('state-succeeded'), `done reached (${classes.done})`);
  check(!classes.failed.includes('state-failed'), `the first attempt's failure terminal is no longer red (${classes.failed})`);
  check(classes.one.includes('state-succeeded'), `one keeps its first-leg state (${classes.one})`);
  const text = await page.locator('.steps').textContent();
  const markers = text.split('resumed from check').length - 1;
  facts.markers = markers;
  check(markers === 1, `one "resumed" marker, not ${markers}`);
  const out = await page.locator('details.step[data-step="check"] pre.output').textContent();
  facts.check_output = out;
  check(out.includes('passed') && !out.includes('boom'), `no stale stderr under the succeeded step (${out})`);
  await shot(page, '2-resumed');
}

/** Start `inline`, whose step ends at its inline `on_failure` terminal: that node
 * (`check's on_failure`, the name the run's result gives it) turns red, and no node carries
 * the internal `__inline_error_` name. */
async function inlineTerminal() {
  const page = await openPage();
  await startFromForm(page, 'inline');
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'failed', 'the run shows failed');
  facts.nodes = await page.locator('svg.graph g.node').evaluateAll((els) => els.map((e) => e.getAttribute('data-state')));
  check(!facts.nodes.some((n) => n.startsWith('__inline_error_')), `no internal name (${facts.nodes})`);
  const terminal = node(page, "check's on_failure");
  check(await terminal.count() === 1, `one node "check's on_failure" (${facts.nodes})`);
  facts.terminal_class = await terminal.getAttribute('class');
  check(facts.terminal_class.includes('state-failed'), `the inline failure terminal is red (${facts.terminal_class})`);
  facts.final_text = (await finalStatus(page).textContent()).trim();
  await shot(page, '1-failed');
}

/** In the page: the first event stream of each document is cut (its body errors, as when the
 * network drops) right after the frame of its first `interaction_required`; the page must
 * reconnect with `Last-Event-ID` on its own. */
function cutFirstStream() {
  const orig = window.fetch.bind(window);
  let cut = false;
  window.fetch = async (input, init) => {
    const r = await orig(input, init);
    const url = typeof input === 'string' ? input : input.url;
    if (cut || !new URL(url, location.href).pathname.endsWith('/events') || !r.body) return r;
    cut = true;
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let seen = '';
    const body = new ReadableStream({
      async pull(ctl) {
        const { value, done } = await reader.read();
        if (done) { ctl.close(); return; }
        ctl.enqueue(value);
        seen += dec.decode(value, { stream: true });
        const at = seen.indexOf('event: interaction_required');
        if (at >= 0 && seen.indexOf('\n\n', at) >= 0) {
          window.__cut = true;
          reader.cancel().catch(() => {});
          ctl.error(new TypeError('network error (cut by the test)'));
        }
      },
      cancel() { return reader.cancel(); },
    });
    return new Response(body, { status: r.status, statusText: r.statusText, headers: r.headers });
  };
}

/** `token` (the server wants PAGE_TOKEN): the page asks for it, a wrong one is refused and
 * asked again, the right one lists the workflows; `deploy` is started from its form and
 * followed live through its gate, its stream cut while the gate waits (cutFirstStream) and
 * resumed with `Last-Event-ID`; the token is never in a URL. */
async function tokenScenario() {
  const secret = process.env.PAGE_TOKEN;
  check(secret, 'PAGE_TOKEN is set');
  const page = await openPage();
  await page.addInitScript(cutFirstStream);
  const urls = [];
  const resumes = [];
  page.on('request', (r) => {
    urls.push(r.url());
    if (new URL(r.url()).pathname.endsWith('/events')) {
      const h = r.headers();
      check(h.authorization === `Bearer ${secret}`, `the event stream sends the token (${JSON.stringify(h.authorization)})`);
      if (h['last-event-id']) resumes.push(h['last-event-id']);
    }
  });
  await page.goto(`${base}/`);
  const form = page.locator('form.sign-in');
  await form.waitFor();
  check(await page.locator('article.workflow').count() === 0, 'no workflow shown before signing in');
  await shot(page, '1-sign-in');
  await form.getByLabel('API token').fill('not-the-token');
  await form.locator('button[type=submit]').click();
  await page.locator('form.sign-in [role=alert]', { hasText: 'refused' }).waitFor();
  check(await page.evaluate(() => sessionStorage.getItem('awf.token')) === null, 'a refused token is forgotten');
  await shot(page, '2-refused');
  await page.locator('form.sign-in').getByLabel('API token').fill(secret);
  await page.locator('form.sign-in button[type=submit]').click();
  await page.locator('article.workflow[data-workflow="deploy"]').waitFor();
  facts.listed = await page.locator('article.workflow').count();
  check(await page.evaluate(() => sessionStorage.getItem('awf.token')) === secret, 'the token is kept in sessionStorage');
  await shot(page, '3-signed-in');
  // A reload keeps the tab signed in; the run is started from the form and followed live.
  await startFromForm(page, 'deploy', { target: 'moon' }, { region: 'us' });
  const gate = page.locator('.pending article.request[data-kind="approval"]');
  await gate.waitFor();
  const deadline = Date.now() + T;
  while (!resumes.length && Date.now() < deadline) await page.waitForTimeout(200);
  facts.resumed_after = resumes.slice();
  check(await page.evaluate(() => window.__cut === true), 'the first stream was cut');
  check(resumes.length > 0 && Number(resumes[0]) > 0, `the stream reconnected with Last-Event-ID (${JSON.stringify(resumes)})`);
  await gate.locator('button[data-option="approve"]').click();
  await gate.waitFor({ state: 'detached' });
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'completed', 'the run completed');
  const tr = await transitions(page);
  facts.transitions = tr;
  for (const n of ['build', 'ship', 'verify']) {
    check(tr.filter(([m, st]) => m === n && st === 'succeeded').length === 1, `${n} succeeded once (${JSON.stringify(tr)})`);
  }
  const out = (name) => page.locator(`details.step[data-step="${name}"] pre.output`).textContent();
  facts.build_output = await out('build');
  facts.verify_output = await out('verify');
  check(facts.build_output === 'building moon x2\n', `build output once (${JSON.stringify(facts.build_output)})`);
  check(facts.verify_output === 'verified\n', `verify output once, after the reconnect (${JSON.stringify(facts.verify_output)})`);
  await shot(page, '4-finished');
  const leaked = urls.filter((u) => u.includes(secret) || u.includes(encodeURIComponent(secret)));
  check(!leaked.length, `the token is in no URL (${leaked.join(', ')})`);
  facts.requests = urls.length;
}

/** `breakpoint` (PAGE_RUN: an interactive run of `abc` the test started over the API, waiting
 * before `b`): the card shows the preview and the terminal's decisions; Inspect logs the
 * context and asks again; Skip passes `b` by; the run completes with `c` run. */
async function breakpointScenario() {
  const id = process.env.PAGE_RUN;
  check(id, 'PAGE_RUN is set');
  facts.run_id = id;
  const page = await openPage();
  await page.goto(`${base}/ui/runs/${encodeURIComponent(id)}`);
  const card = page.locator('.pending article.request[data-kind="breakpoint"]');
  await card.waitFor();
  const first = await card.getAttribute('data-request');
  facts.command = (await card.locator('pre.command').textContent()).trim();
  check(facts.command === 'echo bee', `the preview shows the command (${facts.command})`);
  check((await card.locator('ul.routes').textContent()).includes('c'), 'the preview shows the route to c');
  facts.decisions = await card.locator('button[data-decision]').evaluateAll((bs) => bs.map((b) => b.dataset.decision));
  check(JSON.stringify(facts.decisions) === JSON.stringify(['continue', 'skip', 'abort', 'retry', 'inspect', 'edit']),
    `the terminal's decisions (${JSON.stringify(facts.decisions)})`);
  await shot(page, '1-breakpoint');
  await card.locator('button[data-decision="inspect"]').click();
  // Inspect logs the context under the state and asks again (a new request).
  await page.locator(`.pending article.request[data-kind="breakpoint"]:not([data-request="${first}"])`).waitFor();
  const again = page.locator('.pending article.request[data-kind="breakpoint"]');
  check(await again.count() === 1, 'one breakpoint card after inspect');
  await again.locator('button[data-decision="skip"]').click();
  await again.waitFor({ state: 'detached' });
  await finalStatus(page).waitFor();
  check(await finalStatus(page).getAttribute('data-status') === 'completed', 'the run completed');
  check(await node(page, 'c').getAttribute('class').then((c) => c.includes('state-succeeded')), 'c succeeded');
  const cOut = await page.locator('details.step[data-step="c"] pre.output').textContent();
  check(cOut.includes('sea'), `c's output (${cOut})`);
  await shot(page, '2-finished');
}

/** A run recorded by `awf run` in a terminal before the server started (PAGE_RUN_ID, of a
 * workflow file outside the server's workflow directories): its page draws the file's graph,
 * replays the recorded events (steps and their output), shows the result and duration, and
 * colours the terminal it ended at. */
async function recorded() {
  const page = await openPage();
  const id = process.env.PAGE_RUN_ID;
  facts.run_id = id;
  // A unique prefix of the id is enough.
  await page.goto(`${base}/ui/runs/${encodeURIComponent(id.slice(0, 8))}`);
  await page.locator('svg.graph g.node').first().waitFor();
  await finalStatus(page).waitFor();
  facts.final_status = await finalStatus(page).getAttribute('data-status');
  facts.final_text = (await finalStatus(page).textContent()).trim();
  const out = page.locator('details.step[data-step="greet"] pre.output');
  await out.filter({ hasText: 'hello from the terminal' }).waitFor();
  facts.greet_output = await out.textContent();
  facts.steps = await page.locator('details.step').evaluateAll((els) => els.map((e) => e.getAttribute('data-step')));
  facts.nodes = await page.locator('svg.graph g.node').evaluateAll((els) => els.map((e) => [e.getAttribute('data-state'), [...e.classList].find((c) => c.startsWith('state-'))]));
  facts.duration = (await page.locator('.run-head .duration').textContent()).trim();
  facts.meta = (await page.locator('.run-head p.meta').textContent()).trim();
  facts.graph_error = await page.locator('#graph .error').count();
  await shot(page, '1-recorded');
}

/** A run that never starts (started over the API with `ask_missing_inputs`, cancelled while
 * it asks for its input): its stream ends with a `not_started` frame, and the page says so
 * (status, the message, no Cancel) instead of waiting for a `run_finished` that never comes. */
async function notStarted() {
  const r = await fetch(`${base}/api/workflows/env/asker/run`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"ask_missing_inputs": true}',
  });
  check(r.status === 202, `POST run: ${r.status}`);
  const id = (await r.json()).body.execution_id;
  facts.run_id = id;
  const page = await openPage();
  await page.goto(`${base}/ui/runs/${encodeURIComponent(id)}`);
  await page.locator('section.pending:not([hidden])').waitFor();
  await shot(page, '1-asking');
  const c = await fetch(`${base}/api/executions/${id}`, { method: 'DELETE' });
  check(c.status === 204, `DELETE: ${c.status}`);
  await page.locator('.run-status[data-status="cancelled"]').waitFor();
  await page.locator('p.form-status', { hasText: 'never started' }).waitFor();
  facts.status = await page.locator('.run-status').getAttribute('data-status');
  facts.message = (await page.locator('p.form-status', { hasText: 'never started' }).textContent()).trim();
  facts.cancel_disabled = await page.locator('button', { hasText: 'Cancel' }).isDisabled();
  facts.resume_disabled = await page.locator('button', { hasText: 'Resume' }).isDisabled();
  facts.pending_hidden = await page.locator('section.pending').isHidden();
  await shot(page, '2-not-started');
}

/** `secret` (workflow `keyed`: a secret input `api_token` with a default, a plain `region`
 * with one): the secret's field is an empty password field saying a default is set, never
 * holding the API's mask; submitted empty, the request leaves the input out (the server
 * applies the real default); typed, the value is sent. No request ever carries `***`. */
async function secretScenario() {
  const page = await openPage();
  const posted = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname.endsWith('/run')) posted.push(r.postData() || '');
  });
  const fieldFacts = async () => {
    await page.goto(`${base}/`);
    const form = page.locator('article.workflow[data-workflow="keyed"] form.run-form');
    await form.locator('button[type=submit]').waitFor();
    const f = form.locator('input[name="api_token"]');
    return {
      type: await f.getAttribute('type'),
      value: await f.inputValue(),
      autocomplete: await f.getAttribute('autocomplete'),
      placeholder: await f.getAttribute('placeholder'),
      region: await form.locator('input[name="region"]').inputValue(),
      masks: await page.locator('input, select, textarea').evaluateAll((els) => els.filter((e) => e.value.includes('***')).length),
    };
  };
  facts.field = await fieldFacts();
  check(facts.field.type === 'password', `the secret's field is a password field (${facts.field.type})`);
  check(facts.field.value === '', `the secret's field is empty (${JSON.stringify(facts.field.value)})`);
  check(facts.field.autocomplete === 'off', 'no autocomplete on the secret');
  check(/default set/.test(facts.field.placeholder || ''), `the placeholder says a default is set (${facts.field.placeholder})`);
  check(facts.field.region === 'eu', `a plain input keeps its default (${facts.field.region})`);
  check(facts.field.masks === 0, 'no field holds the mask');
  await shot(page, '1-form');
  await startFromForm(page, 'keyed');
  await finalStatus(page).waitFor();
  facts.default_run = facts.run_id;
  facts.default_output = await page.locator('details.step[data-step="use"] pre.output').textContent();
  // Typed, the value goes with the request.
  await startFromForm(page, 'keyed', { api_token: 'typed-t0ken' });
  await finalStatus(page).waitFor();
  facts.typed_run = facts.run_id;
  facts.typed_output = await page.locator('details.step[data-step="use"] pre.output').textContent();
  facts.posted = posted.map((p) => JSON.parse(p));
  check(facts.posted.length === 2, `two run requests (${posted.length})`);
  check(!('api_token' in facts.posted[0].inputs), `left empty, the secret is left out (${posted[0]})`);
  check(facts.posted[1].inputs.api_token === 'typed-t0ken', `typed, the secret is sent (${posted[1]})`);
  check(!posted.some((p) => p.includes('***')), `no request sends the mask (${posted.join(' ')})`);
  await shot(page, '2-finished');
}

const scenarios = { secret: secretScenario, recorded, not_started: notStarted, breakpoint: breakpointScenario, token: tokenScenario, approve, cancel, fail, layout, agent, chat, live: liveList, broken, resume_terminal: resumeTerminal, inline_terminal: inlineTerminal };
let code = 0;
try {
  if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`);
  await scenarios[scenario]();
  if (problems.length) throw new Error(problems.join('\n'));
  console.log(JSON.stringify({ ok: true, ...facts }));
} catch (e) {
  code = 1;
  try {
    const page = ctx?.pages()[0];
    if (page) await shot(page, 'failure');
  } catch { /* no page to take */ }
  console.log(JSON.stringify({ ok: false, error: String(e && e.stack || e), problems, ...facts }));
} finally {
  await ctx?.close().catch(() => {});
  rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(code);
