// The page's only way to the server: the public HTTP API of `awf serve` (README, "awf serve").
// Success bodies come in AWF (Go)'s `{"body": ...}` envelope; errors are RFC 9457 problem
// documents ({title, status, detail, code, hints}).

/** An answer that was not 2xx: `status`, the problem document (`problem`), a readable message. */
export class ApiError extends Error {
  constructor(status, problem) {
    const p = problem || {};
    const hint = Array.isArray(p.hints) && p.hints.length ? ` (${p.hints.join('; ')})` : '';
    super(`${p.code ? p.code + ': ' : ''}${p.detail || p.title || 'HTTP ' + status}${hint}`);
    this.status = status;
    this.problem = p;
  }
}

// ---------- the bearer token (`awf serve --token-env`) ----------
// Kept in sessionStorage (this tab only, gone when it closes), sent as `Authorization: Bearer`
// on every request; never in a URL. A 401 forgets it and fires `awf:unauthorized` on window
// (detail `{refused}`: whether a token had been sent), on which the page asks for it.

const TOKEN_KEY = 'awf.token';

/** The token this tab signed in with, or null. */
export function token() {
  try { return sessionStorage.getItem(TOKEN_KEY); } catch { return null; }
}

/** Keeps `t` as the token of this tab (an empty `t` forgets it). */
export function setToken(t) {
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: requests go without a token */ }
}

/** `headers` with `authorization` added when a token is kept. */
function withAuth(headers) {
  const t = token();
  if (t) headers.authorization = `Bearer ${t}`;
  return headers;
}

/** A 401: forget the token, tell the page. */
function unauthorized() {
  const refused = !!token();
  setToken('');
  window.dispatchEvent(new CustomEvent('awf:unauthorized', { detail: { refused } }));
}

/**
 * Calls `method path` with an optional JSON `body`; resolves to the envelope's `body` (or
 * null for 204), rejects with ApiError (status 401 also fires `awf:unauthorized`).
 */
export async function api(method, path, body) {
  const init = { method, headers: withAuth({ accept: 'application/json' }) };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (r.status === 401) unauthorized();
  if (r.status === 204) return null;
  const text = await r.text();
  let v = null;
  try {
    v = text ? JSON.parse(text) : null;
  } catch {
    v = { detail: text.slice(0, 200) };
  }
  if (!r.ok) throw new ApiError(r.status, v);
  return v && typeof v === 'object' && 'body' in v ? v.body : v;
}

/** `GET /api/workflows`: [{name, scope, workflow, version, description}]. */
export async function listWorkflows() {
  const b = await api('GET', '/api/workflows');
  return (b && b.workflows) || [];
}

/** `GET /api/workflows/{scope}/{name}`: inputs, initial, states with their edges. */
export function getWorkflow(scope, workflow) {
  return api('GET', `/api/workflows/${enc(scope)}/${enc(workflow)}`);
}

/** `POST /api/workflows/{scope}/{name}/run` with `{"inputs"}`: resolves to the execution id. */
export async function runWorkflow(scope, workflow, inputs) {
  const b = await api('POST', `/api/workflows/${enc(scope)}/${enc(workflow)}/run`, { inputs });
  return b.execution_id;
}

/** `GET /api/executions`: live runs, then finished ones, then recorded ones. */
export async function listExecutions() {
  const b = await api('GET', '/api/executions');
  return (b && b.executions) || [];
}

/** `GET /api/history`: recorded runs, newest first ({id, workflow_name, status, duration_ms, ...}). */
export async function listHistory(limit = 50) {
  const b = await api('GET', `/api/history?limit=${limit}`);
  return (b && b.entries) || [];
}

/** `GET /api/executions/{id}`. */
export function getExecution(id) {
  return api('GET', `/api/executions/${enc(id)}`);
}

/** `GET /api/executions/{id}/workflow`: the workflow file the run ran (as getWorkflow). */
export function getExecutionWorkflow(id) {
  return api('GET', `/api/executions/${enc(id)}/workflow`);
}

/** `DELETE /api/executions/{id}`: cancels a live run (204). */
export function cancelExecution(id) {
  return api('DELETE', `/api/executions/${enc(id)}`);
}

/** `POST /api/executions/{id}/resume` (`{}`: from where it stopped, same inputs). */
export function resumeExecution(id) {
  return api('POST', `/api/executions/${enc(id)}/resume`, {});
}

/** `POST /api/executions/{id}/respond`: answers one pending request by its id (204). */
export function respond(id, body) {
  return api('POST', `/api/executions/${enc(id)}/respond`, body);
}

/** The SSE stream of a run's events (`GET /api/executions/{id}/events`, named events),
 * after position `after` when given (a resumed run's log goes on after its first attempt's).
 * An EventSource look-alike (see FetchEventSource): it can send the bearer token. */
export function events(id, after) {
  const q = after ? `?after=${enc(after)}` : '';
  return new FetchEventSource(`/api/executions/${enc(id)}/events${q}`);
}

/** How long a dropped stream waits before it reconnects (EventSource's default is 3 s). */
const RECONNECT_MS = 1000;

/**
 * What the page used EventSource for, read with fetch streaming so that it can send
 * `Authorization` (EventSource cannot send headers). The same contract: `addEventListener`
 * for named events (a MessageEvent with `data` and `lastEventId`) and `error`; `close()`;
 * `readyState` 0 connecting, 1 open, 2 closed. When the connection ends (the server closes
 * the stream after a run's last event, or the network drops it) `error` fires and, unless a
 * listener closed it, it reconnects after RECONNECT_MS with `Last-Event-ID` = the last `id:`
 * seen, so nothing is missed or repeated. An answer other than 200 `text/event-stream` (404,
 * 401) fires `error` and closes it for good, as EventSource does.
 */
export class FetchEventSource extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.readyState = 0;
    this.lastEventId = '';
    this.abort = null;
    this.run();
  }

  close() {
    this.readyState = 2;
    if (this.abort) this.abort.abort();
  }

  async run() {
    while (this.readyState !== 2) {
      const ctl = new AbortController();
      this.abort = ctl;
      let fatal = false;
      try {
        const headers = withAuth({ accept: 'text/event-stream' });
        if (this.lastEventId) headers['last-event-id'] = this.lastEventId;
        const r = await fetch(this.url, { headers, signal: ctl.signal, cache: 'no-store' });
        const ctype = r.headers.get('content-type') || '';
        if (r.status === 401) unauthorized();
        if (r.status !== 200 || !ctype.startsWith('text/event-stream') || !r.body) {
          fatal = true;
          try { await r.body?.cancel(); } catch { /* already closed */ }
        } else {
          this.readyState = 1;
          await this.read(r.body);
        }
      } catch {
        // The network dropped, or close() aborted the read.
      }
      if (this.readyState === 2) return;
      if (fatal) this.readyState = 2;
      else this.readyState = 0;
      this.dispatchEvent(new Event('error'));
      if (this.readyState === 2) return;
      await new Promise((res) => setTimeout(res, RECONNECT_MS));
    }
  }

  /** Parses the SSE text of `body` (WHATWG "event stream interpretation"), dispatching
   * each complete event; resolves when the body ends. */
  async read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let data = [];
    let name = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      if (this.readyState === 2) return;
      buf += value;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        // A '\r' that ends the chunk may be the first half of a '\r\n'.
        if (buf[nl] === '\r' && nl === buf.length - 1) break;
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith('\r\n', nl) ? 2 : 1));
        if (line === '') {
          if (data.length) {
            const ev = new MessageEvent(name || 'message', {
              data: data.join('\n'), lastEventId: this.lastEventId,
            });
            data = [];
            name = '';
            if (this.readyState === 2) return;
            this.dispatchEvent(ev);
          } else {
            name = '';
          }
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? '' : line.slice(colon + 1);
        if (v.startsWith(' ')) v = v.slice(1);
        if (field === 'data') data.push(v);
        else if (field === 'event') name = v;
        else if (field === 'id' && !v.includes('\0')) this.lastEventId = v;
      }
    }
  }
}

/** Every event name the stream can carry (RunEvent's `type`s, and `lagged`). */
export const EVENT_NAMES = [
  'run_started', 'step_started', 'step_retrying', 'output_chunk', 'log',
  'agent_message_chunk', 'agent_thought_chunk', 'tool_call', 'tool_call_result',
  'interaction_required', 'interaction_resolved', 'step_finished', 'child_run_started',
  'run_finished', 'lagged', 'process_gone', 'no_events',
];

function enc(s) {
  return encodeURIComponent(s);
}
