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

/**
 * Calls `method path` with an optional JSON `body`; resolves to the envelope's `body` (or
 * null for 204), rejects with ApiError.
 */
export async function api(method, path, body) {
  const init = { method, headers: { accept: 'application/json' } };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
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
 * after position `after` when given (a resumed run's log goes on after its first attempt's). */
export function events(id, after) {
  const q = after ? `?after=${enc(after)}` : '';
  return new EventSource(`/api/executions/${enc(id)}/events${q}`);
}

/** Every event name the stream can carry (RunEvent's `type`s, and `lagged`). */
export const EVENT_NAMES = [
  'run_started', 'step_started', 'step_retrying', 'output_chunk', 'log',
  'agent_message_chunk', 'agent_thought_chunk', 'tool_call', 'tool_call_result',
  'interaction_required', 'interaction_resolved', 'step_finished', 'child_run_started',
  'run_finished', 'lagged',
];

function enc(s) {
  return encodeURIComponent(s);
}
