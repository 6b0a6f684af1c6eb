// The web page of `awf serve`: the workflows with a start form each, the runs (live and
// past), and a run's page (graph, output, agent messages, tool calls, pending requests,
// cancel and resume). Views by path: `/` (home) and `/ui/runs/<id>` (a run).
import * as api from '/ui/static/api.js';
import { drawGraph } from '/ui/static/graph.js';

const main = document.getElementById('main');
const announcer = document.getElementById('announce');
/** What the current view must stop when another one replaces it (event streams, timers). */
let teardown = [];
/** Incremented whenever a view is left: an async step of an old view that sees another
 * value stops instead of touching the page. */
let viewGen = 0;

// ---------- small DOM helpers (no innerHTML with data) ----------

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else if (v === true) e.setAttribute(k, '');
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function announce(text) {
  announcer.textContent = text;
}

function fmtDuration(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

function fmtTime(v) {
  if (v === undefined || v === null || v === '') return '—';
  const d = typeof v === 'number' ? new Date(v) : new Date(String(v));
  return Number.isNaN(d.getTime()) ? String(v) : d.toLocaleString();
}

/** A status name of the API (running|queued|completed|failed|cancelled|pending, or a RunResult's
 * success|failure|cancelled) in the page's words. */
function runStatus(s) {
  switch (s) {
    case 'success': case 'completed': return 'completed';
    case 'failure': case 'failed': return 'failed';
    case 'cancelled': return 'cancelled';
    case 'pending': return 'pending';
    case 'queued': return 'queued';
    default: return s || 'running';
  }
}

function badge(status) {
  return h('span', { class: `badge status-${status}`, 'data-status': status }, status);
}

function errorBox(e) {
  return h('p', { class: 'error', role: 'alert' }, e instanceof Error ? e.message : String(e));
}

function stopView() {
  viewGen += 1;
  for (const f of teardown) {
    try { f(); } catch { /* already stopped */ }
  }
  teardown = [];
}

// ---------- navigation ----------

function go(path) {
  history.pushState(null, '', path);
  render();
}

document.addEventListener('click', (ev) => {
  const a = ev.target instanceof Element ? ev.target.closest('a[data-nav]') : null;
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin) return;
  ev.preventDefault();
  history.pushState(null, '', url.pathname + url.hash);
  render();
});
window.addEventListener('popstate', () => render());

function render() {
  stopView();
  signingIn = false;
  const m = location.pathname.match(/^\/ui\/runs\/([^/]+)\/?$/);
  if (m) runView(decodeURIComponent(m[1]));
  else homeView();
}

// ---------- sign-in (`awf serve --token-env`) ----------

/** Whether the sign-in form is what the page shows (several requests may be refused at once). */
let signingIn = false;

/** A request was answered 401: the current view stops and a form asks for the token, kept in
 * sessionStorage (api.setToken) and sent as `Authorization: Bearer`; then the view the
 * address names is rendered again. `refused`: a token had been sent and was wrong. */
function signIn(refused) {
  if (signingIn) return;
  stopView();
  signingIn = true;
  document.title = 'awf · sign in';
  const input = h('input', {
    type: 'password', id: 'token', name: 'token', required: true, autocomplete: 'off',
    spellcheck: 'false', 'aria-describedby': 'token-d',
  });
  const form = h('form', { class: 'card sign-in', 'aria-labelledby': 'signin-h' },
    h('h1', { id: 'signin-h' }, 'Sign in'),
    refused ? h('p', { class: 'error', role: 'alert' }, 'That token was refused.') : null,
    h('div', { class: 'field' },
      h('label', { for: 'token' }, 'API token'),
      input,
      h('small', { id: 'token-d' },
        'This server needs the token of its --token-env variable. It is kept in this tab only.')),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Sign in')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = input.value.trim();
    if (!t) return;
    api.setToken(t);
    render();
  });
  main.replaceChildren(form);
  announce(refused ? 'That token was refused; sign in again.' : 'Sign in with the API token.');
  input.focus();
}

window.addEventListener('awf:unauthorized', (ev) => signIn(!!(ev.detail && ev.detail.refused)));

// ---------- home: workflows and runs ----------

async function homeView() {
  document.title = 'awf';
  const wfSection = h('section', { id: 'workflows', 'aria-labelledby': 'wf-h' },
    h('h1', { id: 'wf-h' }, 'Workflows'));
  const wfList = h('div', { class: 'cards' }, h('p', { class: 'muted' }, 'Loading workflows…'));
  wfSection.append(wfList);
  const runsSection = h('section', { id: 'runs', 'aria-labelledby': 'runs-h' },
    h('h2', { id: 'runs-h' }, 'Runs'));
  const runsBox = h('div', { class: 'table-wrap' }, h('p', { class: 'muted' }, 'Loading runs…'));
  runsSection.append(runsBox);
  main.replaceChildren(wfSection, runsSection);
  if (location.hash) document.getElementById(location.hash.slice(1))?.scrollIntoView();

  loadWorkflows(wfList);
  loadRuns(runsBox);
}

async function loadWorkflows(box) {
  let list;
  try {
    list = await api.listWorkflows();
  } catch (e) {
    box.replaceChildren(errorBox(e));
    return;
  }
  if (!list.length) {
    box.replaceChildren(h('p', { class: 'muted' }, 'No workflows found (awf list shows the same).'));
    return;
  }
  box.replaceChildren(...list.map((w) => workflowCard(w)));
}

function workflowCard(w) {
  const slug = `${w.scope}-${w.workflow || w.name}`.replace(/[^A-Za-z0-9_-]/g, '_');
  const form = h('form', { class: 'run-form', 'data-workflow': w.name, 'aria-labelledby': `wf-${slug}` },
    h('p', { class: 'muted' }, 'Loading inputs…'));
  const card = h('article', { class: 'card workflow', 'data-workflow': w.name },
    h('h3', { id: `wf-${slug}` }, w.name),
    h('p', { class: 'meta' }, h('span', { class: 'scope' }, w.scope), w.version ? ` · v${w.version}` : ''),
    w.description ? h('p', { class: 'desc' }, w.description) : null,
    form);
  if (w.error) {
    // Broken (does not load or does not validate): its error, no Run button.
    card.classList.add('broken');
    form.replaceChildren(h('p', { class: 'error broken-error' }, `Broken: ${w.error}`));
    return card;
  }
  api.getWorkflow(w.scope, w.workflow || w.name).then(
    (detail) => fillForm(form, w, detail, slug),
    (e) => form.replaceChildren(errorBox(e)),
  );
  return card;
}

function inputType(t) {
  return typeof t === 'string' ? t : 'string';
}

function fillForm(form, w, detail, slug) {
  const inputs = (detail && detail.inputs) || [];
  const fields = [];
  const rows = inputs.map((inp) => {
    const id = `in-${slug}-${inp.name}`.replace(/[^A-Za-z0-9_-]/g, '_');
    const t = inputType(inp.type);
    const hint = [inp.description, t !== 'string' && t !== 'untyped' ? `type ${t}` : '',
      inp.required ? 'required' : '', inp.secret ? 'secret' : ''].filter(Boolean).join(' · ');
    const descId = `${id}-d`;
    let control;
    const def = inp.default;
    const choices = Array.isArray(inp.enum_values) ? inp.enum_values : [];
    const hasDefault = def !== undefined && def !== null;
    if (inp.secret) {
      // A secret input (any type): a password field never pre-filled. The API masks its
      // default (`***`), which is not a value: left empty, the run request leaves the input
      // out and the server applies the real default.
      control = h('input', { type: 'password', id, name: inp.name, 'aria-describedby': hint ? descId : null,
        required: inp.required && !hasDefault, autocomplete: 'off',
        placeholder: hasDefault ? 'default set — leave empty to use it' : null });
    } else if (choices.length && t !== 'boolean') {
      // `validation.enum`: one of the allowed values (an empty first choice when optional).
      control = h('select', { id, name: inp.name, 'aria-describedby': hint ? descId : null, required: inp.required },
        inp.required ? null : h('option', { value: '' }, '—'),
        choices.map((c) => h('option', { value: c }, c)));
      if (def !== undefined && def !== null) control.value = String(def);
    } else if (t === 'boolean') {
      control = h('input', { type: 'checkbox', id, name: inp.name, 'aria-describedby': hint ? descId : null,
        checked: def === true || def === 'true' });
    } else {
      const attrs = { id, name: inp.name, 'aria-describedby': hint ? descId : null, required: inp.required,
        autocomplete: 'off' };
      if (t === 'integer') Object.assign(attrs, { type: 'number', step: '1', inputmode: 'numeric' });
      else if (t === 'number') Object.assign(attrs, { type: 'number', step: 'any', inputmode: 'decimal' });
      else attrs.type = 'text';
      control = h('input', attrs);
      if (def !== undefined && def !== null) control.value = typeof def === 'string' ? def : JSON.stringify(def);
    }
    fields.push({ inp, t, control, secret: Boolean(inp.secret) });
    return h('div', { class: t === 'boolean' ? 'field check' : 'field' },
      h('label', { for: id }, inp.name, inp.required ? h('span', { class: 'req', 'aria-hidden': 'true' }, ' *') : ''),
      control,
      hint ? h('small', { id: descId }, hint) : null);
  });
  const status = h('p', { class: 'form-status', role: 'status' });
  const button = h('button', { type: 'submit' }, `Run ${w.name}`);
  form.replaceChildren(...rows, h('div', { class: 'actions' }, button), status);
  if (!inputs.length) form.prepend(h('p', { class: 'muted' }, 'No inputs.'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const values = {};
    for (const { inp, t, control, secret } of fields) {
      // A secret's field is text (a password field): its value is sent as typed, and an
      // empty one is left out (the server applies the default).
      if (secret) { if (control.value !== '') values[inp.name] = control.value; }
      else if (t === 'boolean') values[inp.name] = control.checked;
      else if (control.value !== '') values[inp.name] = t === 'integer' || t === 'number' ? Number(control.value) : control.value;
    }
    button.disabled = true;
    status.textContent = 'Starting…';
    try {
      const id = await api.runWorkflow(w.scope, w.workflow || w.name, values);
      go(`/ui/runs/${encodeURIComponent(id)}`);
    } catch (e) {
      status.replaceChildren(errorBox(e));
      button.disabled = false;
    }
  });
}

/** How often the runs table asks for runs started since (by anyone: the API, a terminal). */
const RUNS_POLL_MS = 3000;

function execRow(e) {
  return {
    id: e.execution_id, workflow: e.workflow_name, status: runStatus(e.status),
    live: e.phase === 'live' || (e.phase === undefined && e.status === 'running'),
    phase: e.phase, started: e.started_at, duration: e.duration_ms, step: e.current_step,
  };
}

async function loadRuns(box) {
  const gen = viewGen;
  let execs = [];
  let hist = [];
  const errors = [];
  await Promise.all([
    api.listExecutions().then((v) => { execs = v; }, (e) => errors.push(e)),
    api.listHistory().then((v) => { hist = v; }, (e) => errors.push(e)),
  ]);
  if (gen !== viewGen) return;
  const rows = new Map();
  for (const e of execs) rows.set(e.execution_id, execRow(e));
  for (const e of hist) {
    const id = e.id || e.execution_id;
    const r = rows.get(id) || { id, workflow: e.workflow_name, status: runStatus(e.status), live: false };
    r.started = r.started || e.started_at;
    if (!r.live) r.duration = e.duration_ms ?? r.duration;
    rows.set(id, r);
  }
  const empty = h('p', { class: 'muted', hidden: rows.size > 0 }, 'No runs yet.');
  const tbody = h('tbody');
  const table = h('table', { class: 'runs', hidden: rows.size === 0 },
    h('caption', { class: 'visually-hidden' }, 'Runs, live first'),
    h('thead', {}, h('tr', {},
      h('th', { scope: 'col' }, 'Run'), h('th', { scope: 'col' }, 'Workflow'),
      h('th', { scope: 'col' }, 'Status'), h('th', { scope: 'col' }, 'Started'),
      h('th', { scope: 'col' }, 'Duration'))),
    tbody);
  const timers = [];
  const shown = new Set();
  let streams = 0;
  const addRow = (r, first) => {
    shown.add(r.id);
    const statusCell = h('td', {}, badge(r.status), r.live && r.step ? h('span', { class: 'step' }, ` ${r.step}`) : '');
    const startedCell = h('td', {}, fmtTime(r.started));
    const durCell = h('td', { class: 'num' }, fmtDuration(r.duration));
    const tr = h('tr', { 'data-run': r.id, 'data-status': r.status },
      h('td', {}, h('a', { href: `/ui/runs/${encodeURIComponent(r.id)}`, 'data-nav': true, class: 'mono' }, r.id.slice(0, 8))),
      h('td', {}, r.workflow || ''), statusCell, startedCell, durCell);
    if (first) tbody.prepend(tr);
    else tbody.append(tr);
    // Live runs, and finished ones still in memory whose duration no record gave yet: their
    // stream (replayed from the start) says when they started and how long they took.
    if ((r.live || (r.phase === 'finished' && r.duration == null)) && streams < 25) {
      streams += 1;
      watchLiveRow(r, tr, statusCell, startedCell, durCell, timers);
    }
  };
  for (const r of [...rows.values()].sort((a, b) => Number(b.live) - Number(a.live))) addRow(r, false);
  box.replaceChildren(...errors.map(errorBox), empty, table);
  const tick = setInterval(() => { for (const t of timers) t(); }, 1000);
  teardown.push(() => clearInterval(tick));
  // Runs started since: added on top, then kept current by their streams.
  let polling = false;
  const poll = setInterval(async () => {
    if (polling) return;
    polling = true;
    try {
      const list = await api.listExecutions();
      if (gen !== viewGen) return;
      for (const e of list.slice().reverse()) {
        if (!shown.has(e.execution_id)) {
          addRow(execRow(e), true);
          empty.hidden = true;
          table.hidden = false;
        }
      }
    } catch {
      // The server went away or refused: the next tick tries again.
    } finally {
      polling = false;
    }
  }, RUNS_POLL_MS);
  teardown.push(() => clearInterval(poll));
}

/** Keeps one live run's row current from its event stream. */
function watchLiveRow(r, tr, statusCell, startedCell, durCell, timers) {
  const es = api.events(r.id);
  teardown.push(() => es.close());
  let startedAt = null;
  let done = false;
  timers.push(() => {
    if (!done && startedAt) durCell.textContent = fmtDuration(Date.now() - startedAt);
  });
  const data = (ev) => { try { return JSON.parse(ev.data); } catch { return null; } };
  es.addEventListener('run_started', (ev) => {
    const d = data(ev);
    if (d && d.run_id === r.id) {
      // A resumed run's log replays its earlier attempts first: a start reopens the row.
      done = false;
      startedAt = d.at;
      startedCell.textContent = fmtTime(d.at);
    }
  });
  es.addEventListener('step_started', (ev) => {
    const d = data(ev);
    if (d && d.run_id === r.id) statusCell.replaceChildren(badge('running'), h('span', { class: 'step' }, ` ${d.event.step}`));
  });
  es.addEventListener('run_finished', (ev) => {
    const d = data(ev);
    if (!d || d.run_id !== r.id) return;
    // Not closed here (a resumed attempt may follow in the same stream); see 'error'.
    done = true;
    const st = runStatus(d.event.result.status);
    tr.dataset.status = st;
    statusCell.replaceChildren(badge(st));
    durCell.textContent = fmtDuration(d.event.result.duration_ms);
  });
  es.addEventListener('error', () => {
    // The stream ended after the run's last event: do not let the browser reconnect.
    if (done) es.close();
  });
}

// ---------- a run's page ----------

function nodeStatus(stepStatus) {
  switch (stepStatus) {
    case 'completed': return 'succeeded';
    case 'failed': return 'failed';
    case 'skipped': return 'skipped';
    case 'cancelled': return 'cancelled';
    case 'running': return 'running';
    default: return 'pending';
  }
}

async function runView(id) {
  document.title = `awf · run ${id.slice(0, 8)}`;
  const title = h('h1', {}, 'Run ', h('span', { class: 'mono' }, id.slice(0, 8)));
  const statusSlot = h('span', { class: 'run-status', role: 'status' }, badge('pending'));
  const meta = h('p', { class: 'meta' }, h('span', { class: 'mono', title: id }, id));
  const duration = h('span', { class: 'duration' }, '');
  const cancelBtn = h('button', { type: 'button', class: 'danger', disabled: true }, 'Cancel');
  const resumeBtn = h('button', { type: 'button', disabled: true }, 'Resume');
  const actionMsg = h('p', { class: 'form-status', role: 'status' });
  const pendingBox = h('section', { class: 'pending', 'aria-labelledby': 'pend-h', hidden: true },
    h('h2', { id: 'pend-h' }, 'Waiting for you'));
  const graphBox = h('div', { class: 'graph-wrap', id: 'graph' }, h('p', { class: 'muted' }, 'Loading the graph…'));
  const finalBox = h('section', { class: 'final', 'aria-labelledby': 'final-h', hidden: true },
    h('h2', { id: 'final-h' }, 'Result'));
  const stepsBox = h('div', { class: 'steps' });
  main.replaceChildren(
    h('div', { class: 'run-head' }, h('p', {}, h('a', { href: '/#runs', 'data-nav': true }, '← All runs')),
      title, h('p', {}, statusSlot, ' ', duration), meta,
      h('div', { class: 'actions' }, cancelBtn, resumeBtn), actionMsg),
    pendingBox,
    h('section', { 'aria-labelledby': 'graph-h' }, h('h2', { id: 'graph-h' }, 'Graph'), graphBox),
    finalBox,
    h('section', { 'aria-labelledby': 'steps-h' }, h('h2', { id: 'steps-h' }, 'Steps'), stepsBox),
  );

  const view = {
    id, graph: null, nodeStates: new Map(), steps: new Map(), pending: new Map(), seen: new Set(),
    startedAt: null, finished: false, stepsBox, pendingBox, statusSlot, duration, finalBox,
    cancelBtn, resumeBtn, actionMsg, es: null, tick: null,
  };

  cancelBtn.addEventListener('click', async () => {
    cancelBtn.disabled = true;
    actionMsg.textContent = 'Cancelling…';
    try {
      await api.cancelExecution(id);
      actionMsg.textContent = 'Cancel requested.';
    } catch (e) {
      actionMsg.replaceChildren(errorBox(e));
      cancelBtn.disabled = false;
    }
  });
  resumeBtn.addEventListener('click', async () => {
    resumeBtn.disabled = true;
    actionMsg.textContent = 'Resuming…';
    try {
      const b = await api.resumeExecution(id);
      const next = (b && b.execution_id) || id;
      actionMsg.textContent = 'Resumed.';
      if (next !== id) {
        go(`/ui/runs/${encodeURIComponent(next)}`);
      } else {
        // Same run id, a new leg: keep what the first leg did (its succeeded states stay
        // coloured); what failed, was cancelled or never reached (the failure terminal
        // included) is the new leg's to colour. Follow the new events (seen ones skipped).
        view.finished = false;
        view.finalBox.hidden = true;
        for (const [n, st] of view.nodeStates) {
          if (st === 'skipped' || st === 'failed' || st === 'cancelled') setNode(view, n, 'pending');
        }
        if (view.es) view.es.close();
        connect(view);
      }
    } catch (e) {
      actionMsg.replaceChildren(errorBox(e));
      resumeBtn.disabled = false;
    }
  });

  let exec;
  try {
    exec = await api.getExecution(id);
  } catch (e) {
    main.replaceChildren(h('h1', {}, 'Run not found'), errorBox(e), h('p', {}, h('a', { href: '/', 'data-nav': true }, 'Back')));
    return;
  }
  // The events carry the full id (the address may name a unique prefix of it).
  if (exec.execution_id) view.id = exec.execution_id;
  setRunStatus(view, runStatus(exec.status));
  meta.append(' · ', exec.workflow_name || '');
  await loadGraph(view, exec);
  if (exec.phase === 'recorded') {
    // Read from the store (a terminal's `awf run`, a run from before a restart): what the
    // record says first (the states, and the result of a finished run), then its recorded
    // events replayed from its transcript, as for a run in memory (the steps' output, the
    // result again at `run_finished`). A run with no transcript keeps what the record says.
    if (exec.states && typeof exec.states === 'object') {
      for (const [name, s] of Object.entries(exec.states)) setNode(view, name, nodeStatus(s && s.status));
    }
    if (!['running', 'queued', 'waiting'].includes(exec.status) && !exec.process_gone) {
      view.finished = true;
      finish(view, {
        status: exec.status, duration_ms: exec.duration_ms, terminal: exec.terminal,
        exit_code: exec.exit_code, message: exec.message, error: exec.error,
      });
    }
  }
  // The stream replays the whole log (states, output, requests asked and answered) and goes
  // on live; `pending` on the body is what is open now, shown at once.
  for (const p of exec.pending || []) addPending(view, p);
  connect(view);
}

async function loadGraph(view, exec) {
  const box = document.getElementById('graph');
  try {
    // The workflow file the run ran (also one outside the server's workflow directories,
    // such as a terminal's `awf run path/to/file.yaml`).
    const detail = await api.getExecutionWorkflow(view.id);
    view.graph = drawGraph(box, detail.states || [], detail.initial);
    for (const [n, s] of view.nodeStates) view.graph.setState(n, s);
  } catch (e) {
    box.replaceChildren(errorBox(e));
  }
}

function setNode(view, name, status) {
  view.nodeStates.set(name, status);
  if (view.graph) view.graph.setState(name, status);
  const s = view.steps.get(name);
  if (s) {
    s.badge.replaceWith((s.badge = badge(status)));
  }
}

function setRunStatus(view, status) {
  view.statusSlot.replaceChildren(badge(status));
  view.statusSlot.dataset.status = status;
  const live = status === 'running' || status === 'pending' || status === 'queued';
  view.cancelBtn.disabled = !live;
  view.resumeBtn.disabled = live || status === 'completed';
}

function stepBox(view, name) {
  let s = view.steps.get(name);
  if (s) return s;
  const b = badge(view.nodeStates.get(name) || 'pending');
  const out = h('pre', { class: 'output', 'aria-label': `Output of ${name}`, tabindex: '0' });
  const agent = h('div', { class: 'agent', hidden: true });
  const tools = h('ol', { class: 'tools', hidden: true, 'aria-label': `Tool calls of ${name}` });
  const sec = h('details', { class: 'step', 'data-step': name, open: true },
    h('summary', {}, h('span', { class: 'step-name' }, name), ' ', b),
    out, agent, tools);
  view.stepsBox.append(sec);
  s = { sec, badge: b, out, agent, tools, msg: null, thought: null, calls: new Map() };
  s.badge = b;
  view.steps.set(name, s);
  return s;
}

function appendOutput(s, text, stream) {
  const span = h('span', { class: stream === 'stderr' ? 'stderr' : 'stdout' }, text);
  s.out.append(span);
  s.out.scrollTop = s.out.scrollHeight;
}

function connect(view) {
  // A new leg of a resumed run: its events follow the ones already shown.
  const es = api.events(view.id, view.lastId);
  view.es = es;
  teardown.push(() => es.close());
  view.tick = setInterval(() => {
    if (!view.finished && view.startedAt) view.duration.textContent = fmtDuration(Date.now() - view.startedAt);
  }, 500);
  teardown.push(() => clearInterval(view.tick));
  const on = (name, f) => es.addEventListener(name, (ev) => {
    let d;
    try { d = JSON.parse(ev.data); } catch { return; }
    if (!d || !d.event) return;
    if (ev.lastEventId) view.lastId = ev.lastEventId;
    // Events of sub-workflow runs (parent_run_id set) are shown in their calling step's output.
    const own = d.run_id === view.id;
    f(d.event, d, own);
  });
  on('run_started', (e, d, own) => {
    if (!own) return;
    if (e.resumed_from) {
      // One marker for the new leg, above the steps it runs.
      view.stepsBox.append(h('p', { class: 'resumed-marker muted' }, `— resumed from ${e.resumed_from} —`));
      view.resumed = true;
      for (const st of view.steps.values()) st.rerun = false;
    }
    view.startedAt = d.at;
    view.finished = false;
    view.finalBox.hidden = true;
    setRunStatus(view, 'running');
  });
  on('step_started', (e, d, own) => {
    if (!own) return;
    setNode(view, e.step, 'running');
    const box = stepBox(view, e.step);
    if (view.resumed && box.out.childNodes.length && !box.rerun) {
      // Run again by the new leg: the earlier attempt's output (its stderr) is kept apart,
      // folded, and the output shown is this attempt's.
      box.rerun = true;
      const old = h('pre', { class: 'previous-output' });
      old.append(...box.out.childNodes);
      box.out.before(h('details', { class: 'previous-attempt' }, h('summary', {}, 'previous attempt'), old));
    }
    announce(`${e.step} running`);
  });
  on('step_retrying', (e, d, own) => {
    if (!own) return;
    appendOutput(stepBox(view, e.step), `\n[retry: attempt ${e.attempt} in ${fmtDuration(e.delay_ms)}]\n`, 'stderr');
  });
  on('output_chunk', (e, d, own) => {
    if (!own) return;
    appendOutput(stepBox(view, e.step), e.text, e.stream);
  });
  on('log', (e, d, own) => {
    if (!own || !e.step) return;
    appendOutput(stepBox(view, e.step), `[${e.level}] ${e.message}\n`, e.level === 'warn' ? 'stderr' : 'stdout');
  });
  const chunk = (cls) => (e, d, own) => {
    if (!own) return;
    const s = stepBox(view, e.step);
    s.agent.hidden = false;
    const key = cls === 'thought' ? 'thought' : 'msg';
    if (!s[key] || s.agent.lastElementChild !== s[key]) {
      s[key] = h('p', { class: `agent-${cls}` });
      s.agent.append(s[key]);
    }
    s[key].append(e.text);
  };
  on('agent_message_chunk', chunk('message'));
  on('agent_thought_chunk', chunk('thought'));
  on('tool_call', (e, d, own) => {
    if (!own) return;
    // The agent's own report of a call to awf's proxy (`mcp__awf-proxy__Read`): the proxy
    // reports the same call itself (router fidelity), which is the one shown (as `awf run`).
    if (e.fidelity === 'agent_emitted' && /awf[-_]proxy/.test(e.name)) return;
    const s = stepBox(view, e.step);
    s.tools.hidden = false;
    const input = JSON.stringify(e.input);
    if (e.fidelity === 'router') {
      // The same call the agent reported already (same id, or same tool and arguments still
      // without a result): one entry, now the router's.
      for (const [cid, c] of s.calls) {
        if (c.fidelity === 'agent_emitted' && c.res.hidden && (cid === e.id || (c.name === e.name && c.input === input))) {
          s.calls.delete(cid);
          c.fidelity = 'router';
          c.li.dataset.fidelity = 'router';
          c.li.dataset.id = e.id;
          s.calls.set(e.id, c);
          return;
        }
      }
    }
    const res = h('pre', { class: 'tool-result', hidden: true });
    const li = h('li', { class: 'tool-call', 'data-tool': e.name, 'data-fidelity': e.fidelity, 'data-id': e.id },
      h('span', { class: 'tool-name' }, e.name), ' ',
      h('code', {}, input), res);
    s.calls.set(e.id, { li, res, name: e.name, input, fidelity: e.fidelity });
    s.tools.append(li);
  });
  on('tool_call_result', (e, d, own) => {
    if (!own) return;
    const s = stepBox(view, e.step);
    const c = s.calls.get(e.id);
    // A merged call's agent-side result (its id is the router's now) adds nothing.
    if (!c || (c.fidelity === 'router' && e.fidelity !== 'router')) return;
    c.res.hidden = false;
    c.res.textContent = e.output;
    if (e.is_error) c.li.classList.add('tool-error');
  });
  on('interaction_required', (e, d, own) => {
    if (!own) return;
    addPending(view, e.request);
  });
  on('interaction_resolved', (e, d, own) => {
    if (!own) return;
    removePending(view, e.request_id);
  });
  on('step_finished', (e, d, own) => {
    if (!own) return;
    const st = nodeStatus(e.state && e.state.status);
    setNode(view, e.step, st);
    const s = stepBox(view, e.step);
    if (e.state && e.state.error) appendOutput(s, `\n${e.state.error}\n`, 'stderr');
    announce(`${e.step} ${st}`);
  });
  on('run_finished', (e, d, own) => {
    if (!own) return;
    // Not closed here: a resumed run's log holds its earlier attempts, and the next one's
    // events follow in the same stream; the server ends it after the last (see 'error').
    view.finished = true;
    finish(view, e.result);
  });
  es.addEventListener('error', () => {
    // The stream ended after the run's last event: do not let the browser reconnect.
    if (view.finished) es.close();
  });
  // The closing frames of a stream that has no `run_finished` to give: the run's awf
  // process is gone, its events were not recorded, or it never started (a missing input
  // refused or cancelled). Nothing follows: no reconnection.
  for (const name of ['process_gone', 'no_events', 'not_started']) {
    es.addEventListener(name, (ev) => {
      let d = null;
      try { d = JSON.parse(ev.data); } catch { /* said below without it */ }
      view.finished = true;
      es.close();
      if (name === 'process_gone') {
        // It runs no more: nothing to cancel, `resume` continues it.
        view.cancelBtn.disabled = true;
        view.resumeBtn.disabled = false;
      }
      if (name === 'no_events' && d && d.status) {
        // How it ended, from its state file: its recorded events stop short of that.
        setRunStatus(view, runStatus(d.status));
      }
      if (name === 'not_started') {
        // Ended before its first state: its status (failed or cancelled) and why.
        view.cancelBtn.disabled = true;
        for (const id of [...view.pending.keys()]) removePending(view, id);
        if (d && d.status) setRunStatus(view, runStatus(d.status));
        // Nothing of it was recorded: there is nothing to resume (start it again instead).
        view.resumeBtn.disabled = true;
      }
      if (d && d.message) view.actionMsg.textContent = d.message;
    });
  }
  es.addEventListener('lagged', (ev) => {
    // Only a server that does not record its runs' events (AWF_RECORD=off) says this: the
    // events before `resume_position` left its memory and cannot be read again, so
    // restarting the view would lose them again (and again: it looped). Say so and go on
    // with what follows.
    let d = null;
    try { d = JSON.parse(ev.data); } catch { /* said without the position */ }
    const at = d && d.resume_position ? ` (up to event ${d.resume_position - 1})` : '';
    view.actionMsg.textContent = `Some of this run's events were not kept${at}: its output here is incomplete.`;
  });
}

function finish(view, result) {
  const status = runStatus(result.status);
  setRunStatus(view, status);
  view.duration.textContent = fmtDuration(result.duration_ms);
  for (const id of [...view.pending.keys()]) removePending(view, id);
  if (result.terminal) {
    setNode(view, result.terminal, status === 'completed' ? 'succeeded' : status === 'cancelled' ? 'cancelled' : 'failed');
  }
  // States the run never reached.
  if (view.graph) {
    for (const [name, s] of view.graph.states()) if (s === 'pending') setNode(view, name, 'skipped');
  }
  const box = view.finalBox;
  box.hidden = false;
  box.replaceChildren(...[h('h2', { id: 'final-h' }, 'Result'),
    h('p', { class: 'final-status', 'data-status': status }, badge(status),
      ` after ${fmtDuration(result.duration_ms)}`, result.terminal ? ` at ${result.terminal}` : '',
      ` (exit ${result.exit_code})`),
    result.message ? h('p', {}, result.message) : null,
    result.error ? h('p', { class: 'error' }, `${result.error.code}: ${result.error.message}`) : null,
  ].filter(Boolean));
  announce(`run ${status}`);
}

// ---------- pending requests ----------

/** What a request asks, from the event's `request` (InteractionRequest) or from an entry of
 * the execution's `pending` list ({request_id, kind, step, prompt, options, input}). */
function requestText(req) {
  const input = typeof req.input === 'string' ? { name: req.input } : req.input || {};
  switch (req.kind) {
    case 'approval': return req.message || req.prompt || 'Approve?';
    case 'missing_input': return req.prompt || `Value for input “${input.name}”${input.description ? ': ' + input.description : ''}`;
    // The prompt is what a terminal shows before reading (`>`); the agent's answer is above.
    case 'conversation_turn': return `Your reply${req.step ? ' in ' + req.step : ''}`;
    case 'breakpoint': return req.prompt || `Paused before ${req.step || 'the next state'}`;
    default: return req.prompt || req.kind;
  }
}

/** A breakpoint's decisions: `options` of a pending request (GET), or, for the request of
 * an `interaction_required` event, the same list built here (retry only after a state ran). */
function breakpointDecisions(req) {
  const opts = (req.options || []).filter((o) => o.kind === 'decision');
  if (opts.length) return opts;
  return [
    { id: 'continue', name: 'Continue' }, { id: 'skip', name: 'Skip' }, { id: 'abort', name: 'Abort' },
    req.previous ? { id: 'retry', name: 'Retry the previous state' } : null,
    { id: 'inspect', name: 'Inspect' },
    { id: 'edit', name: 'Edit a value' },
  ].filter(Boolean);
}

/** What a breakpoint shows about the state about to run: its place, command, timeout, routes. */
function previewBox(p) {
  const routes = (p.routes || []).map((r) => h('li', {},
    h('span', { class: 'mono' }, r.on), r.when ? ` when ${r.when}` : '',
    ' → ', r.target ? h('span', { class: 'mono' }, r.target) : (r.inline_error ? `fails: ${r.inline_error}` : '—')));
  return h('div', { class: 'preview' },
    h('p', { class: 'meta' }, `state ${p.position} of ${p.total}`,
      p.timeout_ms ? ` · timeout ${fmtDuration(p.timeout_ms)}` : ''),
    p.command ? h('pre', { class: 'command', 'aria-label': 'Command about to run', tabindex: '0' }, p.command) : null,
    routes.length ? h('ul', { class: 'routes' }, routes) : null);
}

/** The body of `POST .../respond` for `req` answered with `answer`. */
function answerBody(req, answer) {
  return { request_id: req.request_id, ...answer };
}

function addPending(view, req) {
  if (!req || !req.request_id || view.pending.has(req.request_id)) return;
  const msg = h('p', { class: 'form-status', role: 'status' });
  const headId = `req-${req.request_id}`.replace(/[^A-Za-z0-9_-]/g, '_');
  const card = h('article', { class: 'card request', 'data-request': req.request_id, 'data-kind': req.kind,
    'aria-labelledby': headId },
    h('h3', { id: headId }, requestText(req)),
    req.step ? h('p', { class: 'meta' }, `step ${req.step}`) : null);
  const send = async (answer, controls) => {
    for (const c of controls) c.disabled = true;
    msg.textContent = 'Sending…';
    try {
      await api.respond(view.id, answerBody(req, answer));
      msg.textContent = 'Answered.';
    } catch (e) {
      msg.replaceChildren(errorBox(e));
      for (const c of controls) c.disabled = false;
    }
  };
  if (req.kind === 'approval') {
    const opts = req.options && req.options.length ? req.options
      : [{ id: 'approve', name: 'Approve', kind: 'allow_once' }, { id: 'reject', name: 'Reject', kind: 'reject_once' }];
    const buttons = [];
    for (const o of opts) {
      const b = h('button', { type: 'button', 'data-option': o.id,
        class: o.kind && o.kind.startsWith('reject') ? 'danger' : '' }, o.name || o.id);
      b.addEventListener('click', () => send({ option: o.id }, buttons));
      buttons.push(b);
    }
    card.append(h('div', { class: 'actions' }, buttons));
  } else if (req.kind === 'breakpoint') {
    const p = req.preview;
    if (p) card.append(previewBox(p));
    const buttons = [];
    const decisions = breakpointDecisions(req);
    for (const o of decisions.filter((d) => d.id !== 'edit')) {
      const b = h('button', { type: 'button', 'data-decision': o.id, class: o.id === 'abort' ? 'danger' : '' }, o.name || o.id);
      b.addEventListener('click', () => send({ decision: o.id }, buttons));
      buttons.push(b);
    }
    card.append(h('div', { class: 'actions' }, buttons));
    // `edit` takes a value: `decision: "edit NAME=VALUE"`.
    if (decisions.some((d) => d.id === 'edit')) {
      const fid = `${headId}-edit`;
      const input = h('input', { id: fid, type: 'text', name: 'edit', autocomplete: 'off',
        placeholder: 'NAME=VALUE', required: true });
      const b = h('button', { type: 'submit', 'data-decision': 'edit' }, 'Edit');
      const form = h('form', { class: 'edit' },
        h('div', { class: 'field' }, h('label', { for: fid }, 'Edit a value (NAME=VALUE)'), input),
        h('div', { class: 'actions' }, b));
      buttons.push(input, b);
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        send({ decision: `edit ${input.value}` }, buttons);
      });
      card.append(form);
    }
  } else {
    const fid = `${headId}-v`;
    const inputName = typeof req.input === 'string' ? req.input : (req.input && req.input.name) || '';
    const secret = req.kind === 'missing_input' && /secret|token|password|key/i.test(inputName);
    const input = h('input', { id: fid, type: secret ? 'password' : 'text', name: 'value', autocomplete: 'off',
      required: req.kind === 'missing_input' });
    const b = h('button', { type: 'submit' }, 'Send');
    const form = h('form', {}, h('div', { class: 'field' }, h('label', { for: fid }, 'Answer'), input), h('div', { class: 'actions' }, b));
    if (req.input && req.problem) form.prepend(h('p', { class: 'error' }, req.problem));
    if (req.kind === 'conversation_turn') {
      input.setAttribute('aria-describedby', `${fid}-d`);
      form.querySelector('.field').append(h('small', { id: `${fid}-d` }, 'Empty, exit or quit ends the conversation.'));
    }
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      send({ value: input.value }, [input, b]);
    });
    card.append(form);
  }
  card.append(msg);
  view.pending.set(req.request_id, card);
  view.pendingBox.append(card);
  view.pendingBox.hidden = false;
  announce(`waiting for you: ${requestText(req)}`);
}

function removePending(view, requestId) {
  const card = view.pending.get(requestId);
  if (!card) return;
  card.remove();
  view.pending.delete(requestId);
  if (!view.pending.size) view.pendingBox.hidden = true;
}

// ---------- start ----------

render();
