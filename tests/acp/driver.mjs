// The editor side of the ACP end-to-end tests (tests/tests/acp_sdk.rs): the official ACP
// TypeScript SDK (`@agentclientprotocol/sdk`, pinned by scripts/install-peers.sh) drives
// `awf acp-serve` through one named scenario, every line the server writes on stdout is
// validated against the ACP v1 JSON schema the SDK ships (schema/v1/schema.json) plus a strict
// "no field the schema does not name" walk, and one JSON verdict is printed on stdout:
//
//   {"scenario", "ok", "checks": [{"name", "ok", "detail"}], "invalid": [{"line", "errors"}],
//    "frames": [{"dir": "recv"|"send"|"raw", "t": ms since spawn, "line"}], "stderr", "exit"}
//
// Usage: node driver.mjs --scenario NAME [--modules DIR] -- AWF ARGS...
//   DIR: the node_modules holding the pinned SDK and ajv (default: ../../.cache/acp-npm/node_modules)
//   AWF ARGS: the server command line (e.g. /path/awf acp-serve --workflow echo)
// The server inherits this process's environment and working directory (the test's sandbox).
// Scenario list: `node driver.mjs --list`. Reference: shared/spec/acp.md §5, §2.13, §6, §1.

import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Readable, Writable } from "node:stream";

const here = dirname(fileURLToPath(import.meta.url));
const argv = process.argv.slice(2);
const dash = argv.indexOf("--");
const opts = argv.slice(0, dash < 0 ? argv.length : dash);
const serverCmd = dash < 0 ? [] : argv.slice(dash + 1);
const opt = (name, dflt) => {
  const i = opts.indexOf(name);
  return i < 0 ? dflt : opts[i + 1];
};
const modules = resolve(opt("--modules", join(here, "..", "..", ".cache", "acp-npm", "node_modules")));
const sdkDir = join(modules, "@agentclientprotocol", "sdk");
const acp = await import(pathToFileURL(join(sdkDir, "dist", "v1", "stable", "acp.js")).href);
const require = createRequire(join(modules, "noop.js"));
const Ajv2020 = require("ajv/dist/2020.js").default ?? require("ajv/dist/2020.js");
const SCHEMA = JSON.parse(readFileSync(join(sdkDir, "schema", "v1", "schema.json"), "utf8"));

// ---------------------------------------------------------------------------------------------
// Schema validation.

const ajv = new Ajv2020({ strict: false, allErrors: true });
for (const [name, lo, hi] of [
  ["uint16", 0, 65535],
  ["uint32", 0, 4294967295],
  ["int32", -2147483648, 2147483647],
  ["uint64", 0, Number.MAX_SAFE_INTEGER],
  ["int64", -Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
]) {
  ajv.addFormat(name, { type: "number", validate: (x) => Number.isInteger(x) && x >= lo && x <= hi });
}
ajv.addFormat("double", { type: "number", validate: (x) => Number.isFinite(x) });
ajv.addFormat("uri", { type: "string", validate: (x) => /^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(x) });
ajv.addSchema(SCHEMA, "acp");
const compiled = new Map();
const validator = (ptr) => {
  if (!compiled.has(ptr)) compiled.set(ptr, ajv.compile({ $ref: `acp${ptr}` }));
  return compiled.get(ptr);
};
const def = (name) => `#/$defs/${name}`;

// What the agent's answer to each client request must be.
const RESPONSE_DEF = {
  initialize: "InitializeResponse",
  authenticate: "AuthenticateResponse",
  "session/new": "NewSessionResponse",
  "session/load": "LoadSessionResponse",
  "session/list": "ListSessionsResponse",
  "session/resume": "ResumeSessionResponse",
  "session/close": "CloseSessionResponse",
  "session/delete": "DeleteSessionResponse",
  "session/set_mode": "SetSessionModeResponse",
  "session/set_config_option": "SetSessionConfigOptionResponse",
  "session/prompt": "PromptResponse",
};
// What the agent may ask of the client.
const REQUEST_DEF = {
  "session/request_permission": "RequestPermissionRequest",
  "fs/read_text_file": "ReadTextFileRequest",
  "fs/write_text_file": "WriteTextFileRequest",
  "terminal/create": "CreateTerminalRequest",
  "terminal/output": "TerminalOutputRequest",
  "terminal/release": "ReleaseTerminalRequest",
  "terminal/wait_for_exit": "WaitForTerminalExitRequest",
  "terminal/kill": "KillTerminalRequest",
  "elicitation/create": "CreateElicitationRequest",
};
const NOTIFICATION_DEF = { "session/update": "SessionNotification", "$/cancel_request": "CancelRequestNotification" };

const deref = (ptr) => {
  let node = SCHEMA;
  for (const part of ptr.replace(/^#\//, "").split("/")) node = node?.[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  return node;
};

// Fields of `inst` that `schema` (at JSON pointer `ptr`) does not name, as dotted paths. Walks
// $ref/allOf and the anyOf/oneOf branches that the instance satisfies; objects whose schema
// names no properties (maps, `_meta`, free JSON) are open.
function extraKeys(inst, ptr, path = "", depth = 0) {
  if (depth > 40 || inst === null || typeof inst !== "object") return [];
  if (Array.isArray(inst)) {
    const items = collect(inst, ptr).items;
    if (!items.length) return [];
    return inst.flatMap((x, i) => items.flatMap((p) => extraKeys(x, p, `${path}[${i}]`, depth + 1)).filter(
      // an extra key counts only when no item schema accepts it
      (e, _, all) => items.length === 1 || all.filter((y) => y === e).length === items.length,
    ));
  }
  const { props, open } = collect(inst, ptr);
  if (open || props.size === 0) return [];
  const out = [];
  for (const [k, v] of Object.entries(inst)) {
    if (!props.has(k)) {
      out.push(path ? `${path}.${k}` : k);
      continue;
    }
    const subs = props.get(k);
    const perSub = subs.map((p) => extraKeys(v, p, path ? `${path}.${k}` : k, depth + 1));
    // a key is extra only when every schema naming the field rejects it
    if (perSub.every((l) => l.length)) out.push(...perSub[0]);
  }
  return out;
}

function collect(inst, ptr, acc = { props: new Map(), open: false, items: [] }, seen = new Set()) {
  if (seen.has(ptr)) return acc;
  seen.add(ptr);
  const s = deref(ptr);
  if (s === true || s === undefined || s === null) {
    acc.open = true;
    return acc;
  }
  if (typeof s !== "object") return acc;
  if (s.$ref) collect(inst, s.$ref, acc, seen);
  if (s.additionalProperties === true || typeof s.additionalProperties === "object" || s.patternProperties || s.unevaluatedProperties === true) acc.open = true;
  if (s.properties) for (const k of Object.keys(s.properties)) {
    if (!acc.props.has(k)) acc.props.set(k, []);
    acc.props.get(k).push(`${ptr}/properties/${k.replace(/~/g, "~0").replace(/\//g, "~1")}`);
  }
  if (s.items && typeof s.items === "object") acc.items.push(`${ptr}/items`);
  (s.allOf ?? []).forEach((_, i) => collect(inst, `${ptr}/allOf/${i}`, acc, seen));
  for (const key of ["anyOf", "oneOf"]) {
    (s[key] ?? []).forEach((_, i) => {
      const p = `${ptr}/${key}/${i}`;
      if (validator(p)(inst)) collect(inst, p, acc, seen);
    });
  }
  return acc;
}

// ---------------------------------------------------------------------------------------------
// The connection: spawn, tee every line, the SDK client app.

const t0 = Date.now();
const now = () => Date.now() - t0;
const frames = [];
const invalid = [];
const checks = [];
const waiters = new Set();
const sentMethods = new Map(); // id (as JSON) -> method of our requests
let stderr = "";
let exited = null;
let expectExit = false; // set by the scenarios that end the server themselves

function check(name, ok, detail = "") {
  checks.push({ name, ok: !!ok, detail: typeof detail === "string" ? detail : JSON.stringify(detail) });
  return !!ok;
}

function validateReceived(line) {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch (e) {
    invalid.push({ line: line.slice(0, 300), errors: [`not JSON: ${e.message}`] });
    return null;
  }
  const errs = [];
  const run = (ptr, value, what) => {
    const v = validator(ptr);
    if (!v(value)) errs.push(`${what}: ${ajv.errorsText(v.errors, { separator: "; " }).slice(0, 600)}`);
    else for (const k of extraKeys(value, ptr)) errs.push(`${what}: field \`${k}\` is not in the schema`);
  };
  if (typeof msg !== "object" || msg === null || Array.isArray(msg)) {
    errs.push("not a JSON-RPC object");
  } else {
    // an agent message, or a protocol-level one ($/cancel_request) that either side may send
    const asAgent = validator("#/anyOf/0")(msg) || !validator("#/anyOf/2")(msg);
    run(asAgent ? "#/anyOf/0" : "#/anyOf/2", msg, asAgent ? "frame (agent message)" : "frame (protocol-level message)");
    const envelope = ["jsonrpc", "id", "method", "params", "result", "error"];
    for (const k of Object.keys(msg)) if (!envelope.includes(k)) errs.push(`envelope field \`${k}\``);
    if (msg.method && msg.id !== undefined) {
      const d = REQUEST_DEF[msg.method];
      if (d) run(def(d), msg.params, `${msg.method} params`);
      else if (!msg.method.startsWith("_")) errs.push(`request of unknown method ${msg.method}`);
    } else if (msg.method) {
      const d = NOTIFICATION_DEF[msg.method];
      if (d) run(def(d), msg.params, `${msg.method} params`);
      else if (!msg.method.startsWith("_")) errs.push(`notification of unknown method ${msg.method}`);
    } else if ("result" in msg) {
      const m = sentMethods.get(JSON.stringify(msg.id));
      const d = m && RESPONSE_DEF[m];
      if (d) run(def(d), msg.result, `${m} result`);
    } else if ("error" in msg) {
      run(def("Error"), msg.error, "error");
    }
  }
  if (errs.length) invalid.push({ line: line.slice(0, 600), errors: errs });
  return msg;
}

function record(dir, line) {
  const f = { dir, t: now(), line };
  if (dir === "recv") f.json = validateReceived(line);
  else {
    try {
      f.json = JSON.parse(line);
    } catch {
      f.json = null;
    }
    if (f.json && f.json.id !== undefined && f.json.method) sentMethods.set(JSON.stringify(f.json.id), f.json.method);
  }
  frames.push(f);
  for (const w of [...waiters]) w();
}

// (`--list`, or no server given: a no-op process stands in, the verdict says what is missing)
const argvOfServer = serverCmd.length && !opts.includes("--list") ? serverCmd : [process.execPath, "-e", ""];
const child = spawn(argvOfServer[0], argvOfServer.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
child.stderr.on("data", (b) => {
  if (stderr.length < 200_000) stderr += b.toString("utf8");
});
const exitPromise = new Promise((res) => child.on("exit", (code, signal) => {
  exited = { code, signal, t: now() };
  for (const w of [...waiters]) w();
  res(exited);
}));
child.on("error", (e) => {
  stderr += `\n[driver] spawn failed: ${e.message}`;
});
child.stdin.on("error", () => {});

// The SDK reads one branch of the server's stdout; the other is split into lines here.
const [forSdk, forTee] = Readable.toWeb(child.stdout).tee();
(async () => {
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of forTee) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.length) record("recv", line);
    }
  }
  if (buf.length) record("recv", buf);
})();
// What the SDK writes goes through here, so every sent line is recorded too.
const stdinWeb = new WritableStream({
  write(chunk) {
    const text = new TextDecoder().decode(chunk);
    for (const line of text.split("\n")) if (line.length) record("send", line);
    return new Promise((res, rej) => child.stdin.write(chunk, (e) => (e ? rej(e) : res())));
  },
});
const stream = acp.ndJsonStream(stdinWeb, forSdk);

// Raw bytes straight to the server's stdin (framing tests), recorded as `raw` (truncated).
function sendRaw(text) {
  frames.push({ dir: "raw", t: now(), line: text.length > 300 ? `${text.slice(0, 300)}…(${text.length} bytes)` : text });
  return new Promise((res) => child.stdin.write(text, () => res()));
}

// Waits until `pred()` holds (re-checked on every frame, at exit and every 20 ms); rejects after `ms`.
function until(what, pred, ms = 30_000) {
  return new Promise((res, rej) => {
    // re-checked on every frame, and every 20 ms for conditions set by the handlers
    const poll = setInterval(() => w(), 20);
    const timer = setTimeout(() => {
      waiters.delete(w);
      clearInterval(poll);
      rej(new Error(`timed out after ${ms} ms waiting for ${what}`));
    }, ms);
    const w = () => {
      let v;
      try {
        v = pred();
      } catch (e) {
        v = undefined;
      }
      if (v) {
        clearTimeout(timer);
        clearInterval(poll);
        waiters.delete(w);
        res(v);
      }
    };
    waiters.add(w);
    w();
  });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const withTimeout = (what, p, ms = 30_000) =>
  Promise.race([p, sleep(ms).then(() => { throw new Error(`timed out after ${ms} ms: ${what}`); })]);

const recv = () => frames.filter((f) => f.dir === "recv" && f.json);
const updates = (sessionId) =>
  recv().filter((f) => f.json.method === "session/update" && (!sessionId || f.json.params?.sessionId === sessionId));
const responseTo = (method, pred = () => true) => {
  // the frame index of the answer to our last request of `method` matching pred(params)
  const sent = frames.filter((f) => f.dir === "send" && f.json?.method === method && f.json.id !== undefined && pred(f.json.params));
  const last = sent.at(-1);
  if (!last) return null;
  return recv().find((f) => f.json.id !== undefined && !f.json.method && JSON.stringify(f.json.id) === JSON.stringify(last.json.id)) ?? null;
};
const textOf = (u) => {
  // the text an update carries (chunks and tool call content)
  const out = [];
  if (u?.content?.type === "text") out.push(u.content.text);
  for (const c of Array.isArray(u?.content) ? u.content : []) if (c?.content?.type === "text") out.push(c.content.text);
  return out.join("");
};

// Client handlers: each scenario sets what the "user" answers.
const editor = {
  permission: async () => ({ outcome: { outcome: "cancelled" } }),
  elicitation: async () => ({ action: "cancel" }),
  files: new Map(), // path -> buffer text for fs delegation
  asked: [], // every request the agent sent us, in order: {method, params}
};
const app = acp
  .client({ name: "awf-acp-sdk-test" })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
    editor.asked.push({ method: "session/request_permission", params });
    return editor.permission(params);
  })
  .onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => {
    editor.asked.push({ method: "fs/read_text_file", params });
    if (!editor.files.has(params.path)) throw acp.RequestError.resourceNotFound?.(params.path) ?? new acp.RequestError(-32002, `no buffer ${params.path}`);
    return { content: editor.files.get(params.path) };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, async ({ params }) => {
    editor.asked.push({ method: "fs/write_text_file", params });
    editor.files.set(params.path, params.content);
    return {};
  })
  .onRequest(acp.methods.client.elicitation.create, async ({ params }) => {
    editor.asked.push({ method: "elicitation/create", params });
    return editor.elicitation(params);
  })
  .onNotification("*", async () => {});

const CAPS_NONE = { fs: { readTextFile: false, writeTextFile: false }, terminal: false };
const CAPS_FS = { fs: { readTextFile: true, writeTextFile: true }, terminal: false };
const CAPS_ELICIT = { ...CAPS_NONE, elicitation: { form: {} } };

async function init(cx, caps = CAPS_NONE, protocolVersion = 1) {
  return withTimeout("initialize", cx.request(acp.methods.agent.initialize, {
    protocolVersion,
    clientCapabilities: caps,
    clientInfo: { name: "awf-acp-sdk-test", version: "1.0.0" },
  }), 30_000);
}
const CWD = process.cwd();
async function newSession(cx, extra = {}) {
  const s = await withTimeout("session/new", cx.buildSession({ cwd: CWD, mcpServers: [], ...extra }).start());
  return s;
}
// The session's next message; one read at a time is pending per session, shared by whoever
// awaits it (a turn whose prompt was refused leaves its reader waiting: the next turn takes
// the message over instead of losing it to that stale reader).
function nextOf(session) {
  if (!session._pending) session._pending = session.nextUpdate().then(
    (m) => {
      session._pending = null;
      return m;
    },
    (e) => {
      session._pending = null;
      throw e;
    },
  );
  return session._pending;
}
// Sends a prompt and reads its updates until the stop; gives {stop, error, updates}.
async function turn(session, prompt, ms = 60_000) {
  const got = [];
  let stop = null;
  let error = null;
  const gen = (session._gen = (session._gen ?? 0) + 1);
  const p = session.prompt(prompt).catch((e) => {
    error = e;
  });
  const reader = (async () => {
    for (;;) {
      let m;
      try {
        m = await nextOf(session);
      } catch (e) {
        if (session._gen !== gen) return;
        if (!error) error = e;
        return;
      }
      if (session._gen !== gen) return;
      if (m.kind === "stop") {
        stop = m.stopReason;
        return;
      }
      got.push(m.update);
    }
  })();
  await withTimeout(`prompt ${JSON.stringify(prompt).slice(0, 80)}`, Promise.race([p.then(() => (error ? null : reader)), reader]), ms);
  if (error) return { stop: null, error, updates: got };
  await withTimeout("stop", reader, ms);
  return { stop, error, updates: got };
}
const errInfo = (e) => (e ? { code: e.code, message: e.message, data: e.data } : null);
const hasCode = (e, code, awf) => e && e.code === code && (!awf || JSON.stringify(e.data ?? "").includes(awf));

// Whether no session/update of `sid` came after the response to the prompt (until the next prompt).
function noUpdateAfterResponse(sid) {
  const all = frames;
  const bad = [];
  for (let i = 0; i < all.length; i++) {
    const f = all[i];
    if (f.dir !== "send" || f.json?.method !== "session/prompt" || f.json.params?.sessionId !== sid) continue;
    const id = JSON.stringify(f.json.id);
    const ri = all.findIndex((g, j) => j > i && g.dir === "recv" && g.json && !g.json.method && JSON.stringify(g.json.id) === id);
    if (ri < 0) continue;
    const next = all.findIndex((g, j) => j > ri && g.dir === "send" && g.json?.method === "session/prompt" && g.json.params?.sessionId === sid);
    const end = next < 0 ? all.length : next;
    for (let j = ri + 1; j < end; j++) {
      const g = all[j];
      const u = g.json?.params?.update;
      if (g.dir === "recv" && g.json?.method === "session/update" && g.json.params?.sessionId === sid && u?.sessionUpdate !== "available_commands_update" && u?.sessionUpdate !== "current_mode_update")
        bad.push(g.line.slice(0, 200));
    }
  }
  return bad;
}
const toolCalls = (ups) => ups.filter((u) => u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update");
// Tool calls of a turn that did not end completed or failed (status of the last update that
// set one; a tool_call without status is pending).
function unfinishedCards(ups) {
  const last = new Map();
  for (const u of toolCalls(ups)) {
    if (u.sessionUpdate === "tool_call") last.set(u.toolCallId, u.status ?? "pending");
    else if (u.status) last.set(u.toolCallId, u.status);
  }
  return [...last].filter(([, st]) => st !== "completed" && st !== "failed");
}
const statusesOf = (ups, id) => toolCalls(ups).filter((u) => u.toolCallId === id).map((u) => u.status).filter(Boolean);

// Own processes of the server: its descendants, read from /proc (never a machine-wide pattern).
function descendants(pid) {
  const { readdirSync } = awaitFs;
  const kids = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(d));
    } catch {}
  }
  const out = [];
  const stack = [pid];
  while (stack.length) for (const k of kids.get(stack.pop()) ?? []) {
    out.push(k);
    stack.push(k);
  }
  return out;
}
const awaitFs = await import("node:fs");
const cmdline = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
  } catch {
    return [];
  }
};
const zombie = (pid) => {
  try {
    return /\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true;
  }
};
// The server's live descendants except awf's own watchdog helper (`awf __watchdog`, or the
// shell waiting in its place, `/bin/sh -c … <awf> __watchdog`; it lives as long as the
// server), as "pid command line" strings.
function stepProcesses(pid) {
  return descendants(pid)
    .filter((k) => !zombie(k) && cmdline(k).at(-1) !== "__watchdog")
    .map((k) => `${k} ${cmdline(k).join(" ")}`)
    .filter((x) => !/^\d+ $/.test(x));
}

// ---------------------------------------------------------------------------------------------
// Scenarios. Each gets the SDK's ClientContext; the workflows are the sandbox's (acp_sdk.rs).

const SCENARIOS = {
  // Sessions survive a restart (tests/tests/replay.rs): a first server runs a turn ("restart-
  // before", its session id in the check "session id"); a second one, started on the same
  // data root, lists it, replays it on session/load, and the session goes on
  // ("restart-after --session ID").
  async "restart-before"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, "/input-echo message=before-restart");
    check("the turn ends", r.stop === "end_turn", r.stop);
    const call = r.updates.find((u) => u.sessionUpdate === "tool_call");
    check("rawInput is the rendered command", call?.rawInput?.command === 'echo "echo: before-restart"', call);
    check("session id", true, s.sessionId);
  },
  async "restart-after"(cx) {
    const id = opt("--session", "");
    const ir = await init(cx);
    check("loadSession advertised", ir.agentCapabilities?.loadSession === true, ir.agentCapabilities);
    const l = await withTimeout("session/list", cx.request(acp.methods.agent.session.list, {}));
    check("session/list lists the session from before the restart",
      l.sessions.some((x) => x.sessionId === id && x.cwd === CWD && (x.title ?? "").includes("before-restart")), l);
    const n = updates(id).length;
    await withTimeout("session/load", cx.request(acp.methods.agent.session.load, { sessionId: id, cwd: CWD, mcpServers: [] }));
    const loadResp = responseTo("session/load");
    const rep = updates(id).slice(n).filter((f) => frames.indexOf(f) < frames.indexOf(loadResp)).map((f) => f.json.params.update);
    check("the prompt replayed before the response", rep.some((u) => u.sessionUpdate === "user_message_chunk" && textOf(u).includes("/input-echo message=before-restart")), rep);
    const call = rep.find((u) => u.sessionUpdate === "tool_call");
    check("the step's tool call replayed with its rendered command", call?.rawInput?.command === 'echo "echo: before-restart"', rep);
    check("the step completed in the replay", rep.some((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed"), rep);
    check("the output replayed", rep.some((u) => textOf(u).includes("echo: before-restart")), rep);
    const m = updates(id).length;
    const resp = await withTimeout("session/prompt", cx.request(acp.methods.agent.session.prompt,
      { sessionId: id, prompt: [{ type: "text", text: "/input-echo message=after-restart" }] }));
    const after = updates(id).slice(m).map((f) => f.json.params.update);
    check("the session goes on after the restart", resp?.stopReason === "end_turn" && after.some((u) => textOf(u).includes("echo: after-restart")), { resp, after });
  },
  // §2.13: integer protocolVersion, agentCapabilities, empty authMethods; §1.2: 2 answered with 1.
  async initialize(cx) {
    const r = await init(cx);
    check("protocolVersion is 1", r.protocolVersion === 1, r);
    check("agentCapabilities is an object", typeof r.agentCapabilities === "object", r);
    check("authMethods is empty", Array.isArray(r.authMethods ?? []) && (r.authMethods ?? []).length === 0, r);
    check("agentInfo names awf", r.agentInfo?.name === "awf" && typeof r.agentInfo?.version === "string", r);
    const r2 = await init(cx, CAPS_NONE, 2);
    check("a request for version 2 is answered with 1", r2.protocolVersion === 1, r2);
    const pc = r.agentCapabilities?.promptCapabilities ?? {};
    check("image and audio not advertised", !pc.image && !pc.audio, pc);
  },

  // §5: the session/new response precedes available_commands_update, which lists the workflows.
  async commands(cx) {
    await init(cx);
    const t = now();
    const s = await newSession(cx);
    check("session/new answers within 5 s", now() - t < 5000, `${now() - t} ms`);
    const sid = s.sessionId;
    check("sessionId is a string", typeof sid === "string" && sid.length > 0, sid);
    const f = await until("available_commands_update", () =>
      updates(sid).find((u) => u.json.params.update.sessionUpdate === "available_commands_update"));
    const resp = responseTo("session/new");
    check("response before available_commands_update", resp && frames.indexOf(resp) < frames.indexOf(f), { resp: resp?.t, cmds: f.t });
    const cmds = f.json.params.update.availableCommands;
    const by = Object.fromEntries(cmds.map((c) => [c.name, c]));
    for (const name of ["trivial", "input-echo", "long-running", "approval", "fails", "secret"])
      check(`/${name} advertised`, by[name], cmds.map((c) => c.name));
    check("every command has a description", cmds.every((c) => typeof c.description === "string" && c.description.length > 0), cmds);
    check("trivial's description is the workflow's", by.trivial?.description === "Does nothing", by.trivial);
    check("input-echo has an input hint naming `message`", /message/.test(by["input-echo"]?.input?.hint ?? ""), by["input-echo"]);
  },

  // §2.13 /trivial → success; each step a tool_call pending/in_progress → completed; all
  // updates before the response; a plan of the states.
  async trivial(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, "/trivial");
    check("stopReason end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    const calls = toolCalls(r.updates);
    const first = calls.find((u) => u.sessionUpdate === "tool_call");
    check("the step is a tool_call", first, r.updates);
    if (first) {
      check("tool_call kind execute", first.kind === "execute", first);
      check("tool_call has a title", typeof first.title === "string" && first.title.length > 0, first);
      const st = [first.status ?? "pending", ...statusesOf(r.updates, first.toolCallId).slice(1)];
      check("status ends completed", st.at(-1) === "completed", st);
      check("status passes in_progress", st.includes("in_progress"), st);
      check("rawInput has the rendered command", JSON.stringify(first.rawInput ?? {}).includes("true") ||
        toolCalls(r.updates).some((u) => u.toolCallId === first.toolCallId && JSON.stringify(u.rawInput ?? {}).includes("true")), first);
    }
    check("every card of the turn finished", unfinishedCards(r.updates).length === 0, unfinishedCards(r.updates));
    const plans = r.updates.filter((u) => u.sessionUpdate === "plan");
    check("a plan update lists the states", plans.some((u) => u.entries.length >= 1), r.updates.map((u) => u.sessionUpdate));
    check("the first plan is sent before the step's card", plans.length && r.updates.indexOf(plans[0]) < r.updates.findIndex((u) => u.sessionUpdate === "tool_call"), r.updates.map((u) => u.sessionUpdate));
    check("the last plan has the step completed", plans.length && plans.at(-1).entries.some((e) => e.status === "completed"), plans.at(-1));
    check("no update of the turn after its response", noUpdateAfterResponse(s.sessionId).length === 0, noUpdateAfterResponse(s.sessionId));
  },

  // §2.13 /input-echo: quoted value and the --input= form reach the step; its output reaches the editor.
  async "input-echo"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, '/input-echo message="a b"');
    check("stopReason end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the output `echo: a b` reaches the editor", r.updates.some((u) => textOf(u).includes("echo: a b")), r.updates);
    const r2 = await turn(s, "/input-echo --input=message=streamhello");
    check("--input= form: end_turn", r2.stop === "end_turn", errInfo(r2.error) ?? r2.stop);
    check("streamhello in an agent_message_chunk or the step's content", r2.updates.some((u) => textOf(u).includes("streamhello")), r2.updates);
    const r3 = await turn(s, "/input-echo --input message=spaced");
    check("--input k=v form", r3.updates.some((u) => textOf(u).includes("echo: spaced")), r3.updates);
  },

  // A failing step: end_turn with a message, the tool call failed (acp.md 2.5, 1.6).
  async fails(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, "/fails");
    check("stopReason end_turn (a failed run is not an error)", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    const calls = toolCalls(r.updates);
    check("the step's tool call ends failed", calls.some((u) => u.status === "failed"), calls);
    check("every card of the turn finished", unfinishedCards(r.updates).length === 0, unfinishedCards(r.updates));
    check("a message says the workflow failed", r.updates.some((u) => u.sessionUpdate === "agent_message_chunk" && /fail/i.test(textOf(u))), r.updates);
  },

  // Invalid prompts: not a slash command without a default workflow, unknown workflow.
  async "invalid-prompt"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, "/no-such-workflow");
    check("unknown workflow: an answer, not a hang", r.stop === "end_turn" || r.error, r.stop);
    check("unknown workflow is named", r.updates.some((u) => textOf(u).includes("no-such-workflow")) || JSON.stringify(errInfo(r.error) ?? "").includes("no-such-workflow"), { u: r.updates, e: errInfo(r.error) });
    const r2 = await turn(s, "/Bad_Name");
    check("a bad name is refused", r2.stop === "end_turn" || r2.error, r2.stop);
  },

  // Free text goes to the default workflow (--workflow) as its `prompt` input.
  async "default-workflow"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, "hello from the editor");
    check("stopReason end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the text is the default workflow's prompt input", r.updates.some((u) => textOf(u).includes("prompt: hello from the editor")), r.updates);
  },

  // Approval gate → session/request_permission with the four ACP kinds; allow runs the step.
  async "approval-allow"(cx) {
    await init(cx);
    const s = await newSession(cx);
    editor.permission = async (p) => {
      const o = p.options.find((x) => x.kind === "allow_once");
      return o ? { outcome: { outcome: "selected", optionId: o.optionId } } : { outcome: { outcome: "cancelled" } };
    };
    const r = await turn(s, "/approval");
    const asked = editor.asked.filter((a) => a.method === "session/request_permission");
    check("one permission request", asked.length === 1, asked);
    const kinds = (asked[0]?.params.options ?? []).map((o) => o.kind).sort();
    check("options: allow_once, allow_always, reject_once, reject_always", JSON.stringify(kinds) === JSON.stringify(["allow_always", "allow_once", "reject_always", "reject_once"]), kinds);
    check("the request names the session", asked[0]?.params.sessionId === s.sessionId, asked[0]?.params);
    check("the request's toolCall is the gated step's card", asked[0] && toolCalls(r.updates).some((u) => u.toolCallId === asked[0].params.toolCall.toolCallId), { asked: asked[0]?.params.toolCall, calls: toolCalls(r.updates) });
    check("stopReason end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the gated step ran", r.updates.some((u) => textOf(u).includes("deployed")), r.updates);
    check("every card of the turn finished (the approval's too)", unfinishedCards(r.updates).length === 0, unfinishedCards(r.updates));
  },

  // reject_once: the step does not run; the rejected route is taken.
  async "approval-reject"(cx) {
    await init(cx);
    const s = await newSession(cx);
    editor.permission = async (p) => {
      const o = p.options.find((x) => x.kind === "reject_once");
      return { outcome: { outcome: "selected", optionId: o?.optionId ?? "none" } };
    };
    const r = await turn(s, "/approval");
    check("stopReason end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the gated step did not run", !r.updates.some((u) => textOf(u).includes("deployed")), r.updates);
    check("the rejected route ran", r.updates.some((u) => textOf(u).includes("rejected-route")), r.updates);
    check("every card of the turn finished (the approval's too)", unfinishedCards(r.updates).length === 0, unfinishedCards(r.updates));
  },

  // allow_always is remembered per session and gate: the second run is not asked; another
  // session is asked again.
  async "approval-always"(cx) {
    await init(cx);
    const s = await newSession(cx);
    editor.permission = async (p) => {
      const o = p.options.find((x) => x.kind === "allow_always");
      return { outcome: { outcome: "selected", optionId: o.optionId } };
    };
    const r1 = await turn(s, "/approval");
    const r2 = await turn(s, "/approval");
    const asked = editor.asked.filter((a) => a.method === "session/request_permission");
    check("asked once for two runs in one session", asked.length === 1, asked.length);
    check("both runs deployed", [r1, r2].every((r) => r.updates.some((u) => textOf(u).includes("deployed"))), [r1.stop, r2.stop]);
    const s2 = await newSession(cx);
    await turn(s2, "/approval");
    check("another session is asked again", editor.asked.filter((a) => a.method === "session/request_permission").length === 2, editor.asked.length);
  },

  // Modes: `auto` approves every gate without asking; `ask` asks again.
  async modes(cx) {
    await init(cx);
    const s = await newSession(cx);
    const modes = s.modes;
    check("session/new offers modes ask and auto", modes && modes.availableModes.some((m) => m.id === "ask") && modes.availableModes.some((m) => m.id === "auto"), modes);
    check("the current mode is ask", modes?.currentModeId === "ask", modes);
    await withTimeout("set_mode", cx.request(acp.methods.agent.session.setMode, { sessionId: s.sessionId, modeId: "auto" }));
    await until("current_mode_update", () => updates(s.sessionId).find((u) => u.json.params.update.sessionUpdate === "current_mode_update" && u.json.params.update.currentModeId === "auto"), 10_000).catch(() => null);
    check("current_mode_update auto", updates(s.sessionId).some((u) => u.json.params.update.sessionUpdate === "current_mode_update" && u.json.params.update.currentModeId === "auto"), "");
    editor.permission = async () => ({ outcome: { outcome: "cancelled" } });
    const r = await turn(s, "/approval");
    check("auto: no permission request", editor.asked.length === 0, editor.asked);
    check("auto: the gated step ran", r.updates.some((u) => textOf(u).includes("deployed")), r.updates);
    let err = null;
    await cx.request(acp.methods.agent.session.setMode, { sessionId: s.sessionId, modeId: "nope" }).catch((e) => (err = e));
    check("an unknown mode is -32602", err?.code === -32602, errInfo(err));
  },

  // §2.13: /long-running (sleep 30) + cancel after it started → cancelled within 6 s, no child left.
  async cancel(cx) {
    await init(cx);
    const s = await newSession(cx);
    const p = turn(s, "/long-running", 60_000);
    await until("the step in progress", () => updates(s.sessionId).some((f) => f.json.params.update.status === "in_progress"));
    const pid = child.pid;
    await sleep(300);
    const before = stepProcesses(pid);
    const t = now();
    await cx.notify(acp.methods.agent.session.cancel, { sessionId: s.sessionId });
    const r = await p;
    const took = now() - t;
    check("stopReason cancelled", r.stop === "cancelled", errInfo(r.error) ?? r.stop);
    check("cancelled within 6 s", took < 6000, `${took} ms`);
    check("the step had a `sleep` running", before.some((x) => / sleep 30/.test(x) || /sleep 30$/.test(x)), before);
    await until("no child left", () => stepProcesses(pid).length === 0, 10_000).catch(() => null);
    check("no child left after the cancel", stepProcesses(pid).length === 0, stepProcesses(pid));
    check("no update of the turn after its response", noUpdateAfterResponse(s.sessionId).length === 0, noUpdateAfterResponse(s.sessionId));
    // the session lives on: the in-flight flag was cleared
    const r2 = await turn(s, "/trivial");
    check("the next prompt is accepted after a cancel", r2.stop === "end_turn", errInfo(r2.error) ?? r2.stop);
  },

  // A child that ignores SIGTERM: SIGKILL after the grace, the prompt still answers
  // cancelled within 6 s and no child is left.
  async "cancel-stubborn"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const p = turn(s, "/stubborn", 60_000);
    await until("the step in progress", () => updates(s.sessionId).some((f) => f.json.params.update.status === "in_progress"));
    await sleep(300);
    const pid = child.pid;
    const t = now();
    await cx.notify(acp.methods.agent.session.cancel, { sessionId: s.sessionId });
    const r = await p;
    check("stopReason cancelled", r.stop === "cancelled", errInfo(r.error) ?? r.stop);
    check("cancelled within 6 s", now() - t < 6000, `${now() - t} ms`);
    await until("no child left", () => stepProcesses(pid).length === 0, 10_000).catch(() => null);
    check("no child left (SIGKILL after the grace)", stepProcesses(pid).length === 0, stepProcesses(pid));
  },

  // Go's leak test: 20 more sessions and prompts do not grow the server's threads or fds.
  async leak(cx) {
    await init(cx);
    const count = () => {
      const status = readFileSync(`/proc/${child.pid}/status`, "utf8");
      const threads = Number(/Threads:\s+(\d+)/.exec(status)?.[1]);
      return { threads, fds: awaitFs.readdirSync(`/proc/${child.pid}/fd`).length };
    };
    for (let i = 0; i < 3; i++) await turn(await newSession(cx), "/trivial");
    await sleep(500);
    const warm = count();
    for (let i = 0; i < 20; i++) {
      const s = await newSession(cx);
      const r = await turn(s, "/trivial");
      if (r.stop !== "end_turn") {
        check(`prompt ${i} end_turn`, false, errInfo(r.error) ?? r.stop);
        return;
      }
      await cx.request(acp.methods.agent.session.close, { sessionId: s.sessionId }).catch(() => {});
    }
    await sleep(500);
    const after = count();
    // A leak grows with the prompts (20 more here); tokio's blocking pool may add a few idle
    // threads on a loaded machine, so a small constant is allowed.
    check("threads do not grow", after.threads <= warm.threads + 4, { warm, after });
    check("file descriptors do not grow", after.fds <= warm.fds + 4, { warm, after });
  },

  // AWF (Go)'s test sends session/cancel as a request: accepted, the run cancelled.
  async "cancel-request"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const p = turn(s, "/long-running", 60_000);
    await until("the step in progress", () => updates(s.sessionId).some((f) => f.json.params.update.status === "in_progress"));
    const t = now();
    let cerr = null;
    await withTimeout("session/cancel as a request", cx.request("session/cancel", { sessionId: s.sessionId }), 10_000).catch((e) => (cerr = e));
    const r = await p;
    check("request-form cancel is not refused", !cerr || cerr.code !== -32601, errInfo(cerr));
    check("stopReason cancelled", r.stop === "cancelled", errInfo(r.error) ?? r.stop);
    check("cancelled within 6 s", now() - t < 6000, `${now() - t} ms`);
  },

  // `$/cancel_request` of the prompt (the SDK's cancellationSignal): the prompt still gets its
  // answer, `cancelled` (or -32800), within 6 s, and the run's child is gone.
  async "cancel-request-id"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const ac = new AbortController();
    let err = null;
    const p = cx.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "/long-running" }] }, { cancellationSignal: ac.signal }).catch((e) => {
      err = e;
      return null;
    });
    await until("the step in progress", () => updates(s.sessionId).some((f) => f.json.params.update.status === "in_progress"));
    await sleep(300);
    const t = now();
    ac.abort();
    const r = await withTimeout("the cancelled prompt's answer", p, 30_000);
    check("$/cancel_request sent", frames.some((f) => f.dir === "send" && f.json?.method === "$/cancel_request"), "");
    check("answered cancelled or -32800", r?.stopReason === "cancelled" || err?.code === -32800, { r, err: errInfo(err) });
    check("within 6 s", now() - t < 6000, `${now() - t} ms`);
    await until("no child left", () => stepProcesses(child.pid).length === 0, 10_000).catch(() => null);
    check("no child left", stepProcesses(child.pid).length === 0, stepProcesses(child.pid));
  },

  // An approval gate with a timeout and an editor that never answers: the request is withdrawn
  // ($/cancel_request) and the gate's on_timeout decides.
  async "approval-timeout"(cx) {
    await init(cx);
    const s = await newSession(cx);
    editor.permission = () => new Promise(() => {});
    const r = await turn(s, "/approval-timeout", 60_000);
    check("end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the permission request was withdrawn", frames.some((f) => f.dir === "recv" && f.json?.method === "$/cancel_request"), "");
    check("on_timeout: reject took the rejected route", r.updates.some((u) => textOf(u).includes("rejected-route")) && !r.updates.some((u) => textOf(u).includes("deployed")), r.updates);
  },

  // A cancel arriving right after the prompt (while it is being set up) is not lost.
  async "cancel-race"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const t = now();
    const p = turn(s, "/long-running", 60_000);
    await cx.notify(acp.methods.agent.session.cancel, { sessionId: s.sessionId });
    const r = await p;
    check("stopReason cancelled", r.stop === "cancelled", errInfo(r.error) ?? r.stop);
    check("answered within 6 s", now() - t < 6000, `${now() - t} ms`);
    check("no update of the turn after its response", noUpdateAfterResponse(s.sessionId).length === 0, noUpdateAfterResponse(s.sessionId));
    const r2 = await turn(s, "/trivial");
    check("the next prompt runs", r2.stop === "end_turn", errInfo(r2.error) ?? r2.stop);
  },

  // Cancel while a permission request is pending and the editor never answers it.
  async "cancel-permission"(cx) {
    await init(cx);
    const s = await newSession(cx);
    let asked = false;
    editor.permission = () => {
      asked = true;
      return new Promise(() => {}); // never answered
    };
    const p = turn(s, "/approval", 60_000);
    await until("the permission request", () => asked);
    const t = now();
    await cx.notify(acp.methods.agent.session.cancel, { sessionId: s.sessionId });
    const r = await p;
    check("stopReason cancelled", r.stop === "cancelled", errInfo(r.error) ?? r.stop);
    check("within 6 s", now() - t < 6000, `${now() - t} ms`);
    check("the gated step did not run", !r.updates.some((u) => textOf(u).includes("deployed")), r.updates);
  },

  // One prompt in flight per session: -32602 with USER.ACP.PROMPT_IN_FLIGHT; then accepted.
  async "in-flight"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const p = turn(s, "/long-running", 60_000);
    await until("the step in progress", () => updates(s.sessionId).some((f) => f.json.params.update.status === "in_progress"));
    let err = null;
    await withTimeout("second prompt", cx.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "/trivial" }] }), 10_000).catch((e) => (err = e));
    check("second prompt: -32602 with USER.ACP.PROMPT_IN_FLIGHT", hasCode(err, -32602, "USER.ACP.PROMPT_IN_FLIGHT"), errInfo(err));
    await cx.notify(acp.methods.agent.session.cancel, { sessionId: s.sessionId });
    const r = await p;
    check("the first prompt is cancelled", r.stop === "cancelled", errInfo(r.error) ?? r.stop);
    const r2 = await turn(s, "/trivial");
    check("then a prompt is accepted", r2.stop === "end_turn", errInfo(r2.error) ?? r2.stop);
  },

  // Unknown session: -32002 naming it, for prompt, cancel-as-request, set_mode and load.
  async "unknown-session"(cx) {
    await init(cx);
    let err = null;
    await cx.request(acp.methods.agent.session.prompt, { sessionId: "sess_nope", prompt: [{ type: "text", text: "/trivial" }] }).catch((e) => (err = e));
    check("prompt: -32002", err?.code === -32002, errInfo(err));
    check("the error names the session", JSON.stringify(errInfo(err)).includes("sess_nope"), errInfo(err));
    err = null;
    await cx.request(acp.methods.agent.session.load, { sessionId: "sess_nope", cwd: CWD, mcpServers: [] }).catch((e) => (err = e));
    check("load of an unknown session: -32002", err?.code === -32002, errInfo(err));
  },

  // Prompt blocks: image refused with USER.ACP.UNSUPPORTED_BLOCK; resource_link and an
  // embedded text resource become inputs.
  async multimodal(cx) {
    const init1 = await init(cx);
    const s = await newSession(cx);
    let err = null;
    let r = null;
    try {
      r = await turn(s, [{ type: "text", text: "/trivial" }, { type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" }]);
    } catch (e) {
      err = e;
    }
    const said = JSON.stringify([errInfo(r?.error ?? err), r?.updates ?? []]);
    check("an image is refused with USER.ACP.UNSUPPORTED_BLOCK", said.includes("USER.ACP.UNSUPPORTED_BLOCK"), said.slice(0, 400));
    check("…and not run", !(r?.updates ?? []).some((u) => u.sessionUpdate === "tool_call"), r?.updates);
    // An attachment binds to the `key=` typed right before it (docs/compatibility.md).
    const link = await turn(s, [{ type: "text", text: "/input-echo message=" }, { type: "resource_link", uri: "file:///tmp/linked.txt", name: "linked.txt" }]);
    check("resource_link: end_turn", link.stop === "end_turn", errInfo(link.error) ?? link.stop);
    check("resource_link becomes the input (its path)", link.updates.some((u) => textOf(u).includes("echo: /tmp/linked.txt")), link.updates);
    const loose = await turn(s, [{ type: "text", text: "/input-echo" }, { type: "resource_link", uri: "file:///tmp/linked.txt", name: "linked.txt" }]);
    check("an attachment bound to no input is said, not dropped", loose.error || loose.updates.some((u) => /attachment/i.test(textOf(u))), loose.updates);
    if (init1.agentCapabilities?.promptCapabilities?.embeddedContext) {
      const emb = await turn(s, [{ type: "text", text: "/input-echo message=" }, { type: "resource", resource: { uri: "file:///tmp/message", text: "embedded words", mimeType: "text/plain" } }]);
      check("an embedded text resource becomes an input", emb.updates.some((u) => textOf(u).includes("echo: embedded words")), emb.updates);
    } else check("embeddedContext advertised (embedded text resources are inputs)", false, init1.agentCapabilities);
  },

  // Two sessions prompting at once: both finish, each sees only its own updates.
  async concurrent(cx) {
    await init(cx);
    const a = await newSession(cx);
    const b = await newSession(cx);
    const [ra, rb] = await Promise.all([turn(a, "/input-echo message=from-a"), turn(b, "/input-echo message=from-b")]);
    check("session a end_turn", ra.stop === "end_turn", errInfo(ra.error) ?? ra.stop);
    check("session b end_turn", rb.stop === "end_turn", errInfo(rb.error) ?? rb.stop);
    check("a sees from-a only", ra.updates.some((u) => textOf(u).includes("from-a")) && !ra.updates.some((u) => textOf(u).includes("from-b")), "");
    check("b sees from-b only", rb.updates.some((u) => textOf(u).includes("from-b")) && !rb.updates.some((u) => textOf(u).includes("from-a")), "");
    check("distinct session ids", a.sessionId !== b.sessionId, [a.sessionId, b.sessionId]);
  },

  // The secret's value never reaches a frame, not even split across output chunks.
  async secret(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, "/secret");
    check("stopReason end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the masked output reaches the editor", r.updates.some((u) => textOf(u).includes("***")), r.updates);
    // the Rust test checks every raw frame for the value itself
  },

  // A secret-named input typed in the prompt: masked in the step's output and in the replay
  // of session/load (the Rust test checks every frame for the value).
  async "secret-input"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, "/use-token api_token=sk-typed-secret-98765");
    check("end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the step ran, its output masked", r.updates.some((u) => textOf(u).includes("using ***")), r.updates);
    await withTimeout("session/load", cx.request(acp.methods.agent.session.load, { sessionId: s.sessionId, cwd: CWD, mcpServers: [] }));
    check("the replay has the prompt, masked", updates(s.sessionId).some((f) => f.json.params.update.sessionUpdate === "user_message_chunk" && textOf(f.json.params.update).includes("api_token=***")), "");
  },

  // Framing: invalid JSON and an over-10-MiB line get -32700 (id null, not echoed); the
  // connection lives on; unknown `_` request -32601; an unknown notification is ignored.
  async "parse-errors"(cx) {
    await init(cx);
    await sendRaw("{bad json\n");
    const pe = await until("-32700 for {bad json", () => recv().find((f) => f.json.error?.code === -32700), 10_000).catch(() => null);
    check("invalid JSON: -32700", pe, "");
    check("…with id null", pe && pe.json.id === null, pe?.line);
    check("…without echoing the line", pe && !pe.line.includes("{bad json"), pe?.line);
    const r = await init(cx);
    check("still alive: initialize answered", r.protocolVersion === 1, r);
    const big = `{"jsonrpc":"2.0","id":"big","method":"initialize","params":{"pad":"${"x".repeat(10 * 1024 * 1024 + 16)}"}}\n`;
    const n = recv().filter((f) => f.json.error?.code === -32700).length;
    await sendRaw(big);
    const pe2 = await until("-32700 for the big line", () => recv().filter((f) => f.json.error?.code === -32700)[n], 30_000).catch(() => null);
    check("over 10 MiB: -32700", pe2, "");
    check("…not echoed", pe2 && pe2.line.length < 4096, pe2?.line?.length);
    const r2 = await init(cx);
    check("still alive after the big line", r2.protocolVersion === 1, r2);
    let err = null;
    await withTimeout("_awf/unknown", cx.request("_awf/unknown", {}), 10_000).catch((e) => (err = e));
    check("unknown _ request: -32601", err?.code === -32601, errInfo(err));
    await cx.notify("_awf/unknown_notification", {});
    await sendRaw('{"jsonrpc":"2.0","method":"no/such_notification","params":{}}\n');
    const s = await newSession(cx);
    const t = await turn(s, "/trivial");
    check("unknown notifications ignored, server works", t.stop === "end_turn", t.stop);
  },

  // session/load: the session's transcript replayed as updates before the response, then
  // prompts continue; session/list lists it; session/close ends it.
  async load(cx) {
    const ir = await init(cx);
    check("loadSession advertised", ir.agentCapabilities?.loadSession === true, ir.agentCapabilities);
    const s = await newSession(cx);
    const r = await turn(s, "/input-echo message=before-load");
    check("first turn end_turn", r.stop === "end_turn", r.stop);
    const nBefore = updates(s.sessionId).length;
    const resp = await withTimeout("session/load", cx.request(acp.methods.agent.session.load, { sessionId: s.sessionId, cwd: CWD, mcpServers: [] }));
    const loadResp = responseTo("session/load");
    const replay = updates(s.sessionId).slice(nBefore).filter((f) => frames.indexOf(f) < frames.indexOf(loadResp));
    const rep = replay.map((f) => f.json.params.update);
    check("the user's prompt replayed as user_message_chunk", rep.some((u) => u.sessionUpdate === "user_message_chunk" && textOf(u).includes("/input-echo message=before-load")), rep);
    check("the step's tool call replayed", rep.some((u) => u.sessionUpdate === "tool_call"), rep);
    check("the output replayed", rep.some((u) => textOf(u).includes("before-load")), rep);
    check("load result is an object", resp && typeof resp === "object", resp);
    const r2 = await turn(s, "/input-echo message=after-load");
    check("the session continues after load", r2.stop === "end_turn" && r2.updates.some((u) => textOf(u).includes("after-load")), r2.stop);
    const caps = ir.agentCapabilities?.sessionCapabilities ?? {};
    if (caps.list) {
      const l = await cx.request(acp.methods.agent.session.list, {});
      check("session/list lists it", l.sessions.some((x) => x.sessionId === s.sessionId && x.cwd === CWD), l);
    } else check("session list advertised", false, caps);
    if (caps.close) {
      await cx.request(acp.methods.agent.session.close, { sessionId: s.sessionId });
      let err = null;
      await cx.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "/trivial" }] }).catch((e) => (err = e));
      check("a closed session is unknown (-32002)", err?.code === -32002, errInfo(err));
    } else check("session close advertised", false, caps);
  },

  // session/load of a session whose run is parked on a question: the replay comes first, then
  // the next prompt answers the question and the same run goes on.
  async "load-parked"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r1 = await turn(s, "/ask-name");
    check("first turn ends with the question", r1.stop === "end_turn" && r1.updates.some((u) => /name/i.test(textOf(u))), r1.updates);
    const n = updates(s.sessionId).length;
    await withTimeout("session/load", cx.request(acp.methods.agent.session.load, { sessionId: s.sessionId, cwd: CWD, mcpServers: [] }));
    const rep = updates(s.sessionId).slice(n).map((f) => f.json.params.update);
    check("the replay has the prompt", rep.some((u) => u.sessionUpdate === "user_message_chunk" && textOf(u).includes("/ask-name")), rep);
    const r2 = await turn(s, "Grace");
    check("after the load, the answer continues the same run", r2.stop === "end_turn" && r2.updates.some((u) => textOf(u).includes("hello Grace")), r2.updates);
  },

  // Missing input, client with elicitation (form): asked by elicitation/create; the run goes on.
  async elicitation(cx) {
    await init(cx, CAPS_ELICIT);
    const s = await newSession(cx);
    editor.elicitation = async (p) => {
      const props = Object.keys(p.requestedSchema?.properties ?? {});
      return { action: "accept", content: Object.fromEntries(props.map((k) => [k, "from-the-form"])) };
    };
    const r = await turn(s, "/ask-name");
    const asked = editor.asked.filter((a) => a.method === "elicitation/create");
    check("asked with elicitation/create", asked.length === 1, editor.asked.map((a) => a.method));
    check("form mode, the input `name` in the schema", asked[0]?.params.mode === "form" && asked[0]?.params.requestedSchema?.properties?.name, asked[0]?.params);
    check("end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the answer reached the step", r.updates.some((u) => textOf(u).includes("hello from-the-form")), r.updates);
  },

  // No elicitation, an enum input: a permission request whose options are the enum values.
  async "elicitation-enum"(cx) {
    await init(cx);
    const s = await newSession(cx);
    editor.permission = async (p) => {
      const o = p.options.find((x) => x.name.includes("staging") || x.optionId.includes("staging"));
      return o ? { outcome: { outcome: "selected", optionId: o.optionId } } : { outcome: { outcome: "cancelled" } };
    };
    const r = await turn(s, "/ask-env");
    const asked = editor.asked.filter((a) => a.method === "session/request_permission");
    const names = (asked[0]?.params.options ?? []).map((o) => `${o.optionId}|${o.name}`).join(",");
    check("asked with a permission request", asked.length === 1, editor.asked.map((a) => a.method));
    check("its options are the enum values", ["dev", "staging", "prod"].every((v) => names.includes(v)), names);
    check("end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the chosen value reached the step", r.updates.some((u) => textOf(u).includes("env=staging")), r.updates);
    check("every card of the turn finished", unfinishedCards(r.updates).length === 0, unfinishedCards(r.updates));
  },

  // Neither: the turn ends with the question; the next prompt answers it; the same run continues.
  async "elicitation-text"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r1 = await turn(s, "/ask-name");
    check("first turn ends end_turn", r1.stop === "end_turn", errInfo(r1.error) ?? r1.stop);
    check("…with the question (naming the input)", r1.updates.some((u) => u.sessionUpdate === "agent_message_chunk" && /name/i.test(textOf(u))), r1.updates);
    check("…and the step has not run", !r1.updates.some((u) => textOf(u).includes("hello ")), r1.updates);
    const r2 = await turn(s, "Ada");
    check("the answer turn ends end_turn", r2.stop === "end_turn", errInfo(r2.error) ?? r2.stop);
    check("the same run continued with the answer", r2.updates.some((u) => textOf(u).includes("hello Ada")), r2.updates);
  },

  // An agent step (the real claude CLI against the scripted LLM): its text is an
  // agent_message_chunk and its own tool call (Read) a tool call nested under the step's card,
  // completed by the end of the step.
  async "agent-tools"(cx) {
    await init(cx);
    const s = await newSession(cx);
    const r = await turn(s, "/agent-read", 120_000);
    check("end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    const calls = toolCalls(r.updates);
    const card = calls.find((u) => u.sessionUpdate === "tool_call" && u.kind === "think");
    check("the agent step is a tool call of kind think", card, calls);
    const nested = calls.filter((u) => card && u.toolCallId !== card.toolCallId);
    const ids = [...new Set(nested.map((u) => u.toolCallId))];
    check("the agent's Read is a nested tool call", nested.some((u) => u.sessionUpdate === "tool_call" && /read/i.test(`${u.title} ${JSON.stringify(u.rawInput ?? {})}`)), calls);
    check("nested ids are prefixed by the step's", card && ids.length > 0 && ids.every((id) => id.startsWith(card.toolCallId)), { card: card?.toolCallId, ids });
    check("every nested call ends completed or failed", ids.length > 0 && ids.every((id) => ["completed", "failed"].includes(statusesOf(r.updates, id).at(-1))), ids.map((id) => [id, statusesOf(r.updates, id)]));
    check("the agent's answer is an agent_message_chunk", r.updates.some((u) => u.sessionUpdate === "agent_message_chunk" && textOf(u).includes("done reading")), r.updates);
    check("every card of the turn finished", unfinishedCards(r.updates).length === 0, unfinishedCards(r.updates));
  },

  // fs delegation: a client offering read and write gets the workflow's Read/Write through its
  // buffers (fs/read_text_file, fs/write_text_file).
  async fs(cx) {
    await init(cx, CAPS_FS);
    const s = await newSession(cx);
    const path = join(CWD, "buffer.txt");
    editor.files.set(path, "unsaved editor text");
    const r = await turn(s, "/fs-copy");
    check("end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("the file was read through fs/read_text_file", editor.asked.some((a) => a.method === "fs/read_text_file" && a.params.path === path), editor.asked);
    const out = join(CWD, "copy.txt");
    check("…and written through fs/write_text_file", editor.files.get(out) === "written by the agent", [...editor.files.entries()]);
    const nested = toolCalls(r.updates).filter((u) => /read|write/i.test(u.title ?? "") || /read|write/i.test(JSON.stringify(u.rawInput ?? "")));
    check("the agent's own tool calls are nested tool calls", nested.length >= 2, toolCalls(r.updates));
    check("the agent's answer is an agent_message_chunk", r.updates.some((u) => u.sessionUpdate === "agent_message_chunk" && textOf(u).includes("copied")), r.updates);
  },

  // A client offering fs/read_text_file but not fs/write_text_file gets no delegation: the
  // workflow's Read and Write stay on disk, and the editor is never asked.
  async "fs-read-only"(cx) {
    await init(cx, { fs: { readTextFile: true, writeTextFile: false }, terminal: false });
    const s = await newSession(cx);
    editor.files.set(join(CWD, "buffer.txt"), "unsaved editor text");
    const r = await turn(s, "/fs-copy");
    check("end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check("no fs request reached the editor", !editor.asked.some((a) => a.method.startsWith("fs/")), editor.asked);
    check("the buffer map is unchanged", editor.files.size === 1, [...editor.files.entries()]);
    check("the agent's answer is an agent_message_chunk", r.updates.some((u) => u.sessionUpdate === "agent_message_chunk" && textOf(u).includes("copied")), r.updates);
  },

  // stdin EOF during a run: every session cancelled, children reaped, exit within 1 s.
  async eof(cx) {
    await init(cx);
    const s = await newSession(cx);
    s.prompt("/long-running").catch(() => {});
    await until("the step in progress", () => updates(s.sessionId).some((f) => f.json.params.update.status === "in_progress"));
    await sleep(200);
    const kids = descendants(child.pid);
    const kidCmds = kids.map((k) => cmdline(k).join(" "));
    const t = now();
    expectExit = true;
    child.stdin.end();
    const ex = await withTimeout("exit after EOF", exitPromise, 20_000);
    check("exits within 1 s of EOF", ex.t - t < 1000, `${ex.t - t} ms`);
    check("exit status 0", ex.code === 0, ex);
    check("the step had a `sleep` running", kidCmds.some((c) => /sleep 30/.test(c)), kidCmds);
    await until("children gone", () => kids.every(zombie), 5_000).catch(() => null);
    const alive = kids.filter((k) => !zombie(k)).map((k) => `${k} ${cmdline(k).join(" ")}`);
    check("no child survives (the watchdog included)", alive.length === 0, alive);
  },

  // SIGTERM during a run: same.
  async sigterm(cx) {
    await init(cx);
    const s = await newSession(cx);
    s.prompt("/long-running").catch(() => {});
    await until("the step in progress", () => updates(s.sessionId).some((f) => f.json.params.update.status === "in_progress"));
    await sleep(200);
    const kids = descendants(child.pid);
    const t = now();
    expectExit = true;
    child.kill("SIGTERM");
    const ex = await withTimeout("exit after SIGTERM", exitPromise, 20_000);
    check("exits within 1 s of SIGTERM", ex.t - t < 1000, `${ex.t - t} ms`);
    await until("children gone", () => kids.every(zombie), 5_000).catch(() => null);
    const alive = kids.filter((k) => !zombie(k)).map((k) => `${k} ${cmdline(k).join(" ")}`);
    check("no child survives (the watchdog included)", alive.length === 0, alive);
  },

  // Editor MCP servers: entries validated one by one; a reserved name or a bad entry refused.
  async "mcp-servers"(cx) {
    await init(cx);
    const ok = await newSession(cx, { mcpServers: [{ name: "fs", command: "/bin/true", args: [], env: [{ name: "API_KEY", value: "s3cr3t-value" }] }] });
    check("a stdio entry is accepted", typeof ok.sessionId === "string", "");
    let err = null;
    await cx.request(acp.methods.agent.session.new, { cwd: CWD, mcpServers: [{ name: "awf-proxy", command: "/bin/true", args: [], env: [] }] }).catch((e) => (err = e));
    check("the reserved name awf-proxy is refused with -32602", err?.code === -32602 && JSON.stringify(errInfo(err)).includes("awf-proxy"), errInfo(err));
    err = null;
    await cx.request(acp.methods.agent.session.new, { cwd: "relative/dir", mcpServers: [] }).catch((e) => (err = e));
    check("a relative cwd is refused with -32602", err?.code === -32602, errInfo(err));
    err = null;
    await cx.request(acp.methods.agent.session.new, { cwd: join(CWD, "does-not-exist"), mcpServers: [] }).catch((e) => (err = e));
    check("a missing cwd is refused with -32602", err?.code === -32602, errInfo(err));
  },
};

// `provider: acp` with `permissions: ask` under acp-serve (issue 14): the workflow `acp-perm`
// runs the scripted ACP agent (tests/acp/scripted_agent.py, prompt PERMIT:edit), whose
// permission request reaches this editor as session/request_permission with the agent's own
// options; the option this editor picks (by kind: allow_once or reject_once) is the agent's
// answer, which it reports as "permission: <optionId>".
for (const [name, kind, want] of [["agent-permission-allow", "allow_once", "yes"], ["agent-permission-reject", "reject_once", "no"]]) {
  SCENARIOS[name] = async (cx) => {
    await init(cx);
    const s = await newSession(cx);
    editor.permission = async (p) => {
      const o = p.options.find((x) => x.kind === kind);
      return o ? { outcome: { outcome: "selected", optionId: o.optionId } } : { outcome: { outcome: "cancelled" } };
    };
    const r = await turn(s, "/acp-perm");
    const asked = editor.asked.filter((a) => a.method === "session/request_permission");
    check("one permission request", asked.length === 1, asked);
    const ids = (asked[0]?.params.options ?? []).map((o) => `${o.optionId}:${o.kind}`);
    check("the agent's own options are offered", JSON.stringify(ids) === JSON.stringify(["no-ever:reject_always", "yes-ever:allow_always", "no:reject_once", "yes:allow_once"]), ids);
    check("the request names the session", asked[0]?.params.sessionId === s.sessionId, asked[0]?.params);
    check("the request says what the agent asks for", JSON.stringify(asked[0]?.params.toolCall ?? {}).includes("Touch marker"), asked[0]?.params.toolCall);
    check("stopReason end_turn", r.stop === "end_turn", errInfo(r.error) ?? r.stop);
    check(`the agent got the editor's answer (${want})`, r.updates.some((u) => textOf(u).includes(`permission: ${want}`)), r.updates);
    check("every card of the turn finished", unfinishedCards(r.updates).length === 0, unfinishedCards(r.updates));
  };
}

// ---------------------------------------------------------------------------------------------

if (opts.includes("--list")) {
  console.log(JSON.stringify(Object.keys(SCENARIOS)));
  process.exit(0);
}
const name = opt("--scenario");
const scenario = SCENARIOS[name];
let failure = null;
if (!scenario) failure = `unknown scenario ${name}; known: ${Object.keys(SCENARIOS).join(", ")}`;
else if (!serverCmd.length) failure = "no server command after --";
else {
  const describe = (e) => `${e?.message ?? e}${e?.code !== undefined ? ` (code ${e.code}, data ${JSON.stringify(e.data)})` : ""}`;
  let op = null;
  try {
    await withTimeout(`scenario ${name}`, app.connectWith(stream, (cx) => (op = scenario(cx))), 240_000);
  } catch (e) {
    // The scenarios that end the server see the SDK's "connection closed" once it is gone;
    // they go on checking the exit, so wait for them.
    if (expectExit && op && /connection closed/i.test(String(e?.message ?? e))) {
      try {
        await withTimeout(`scenario ${name} after the server ended`, op, 60_000);
      } catch (e2) {
        failure = describe(e2);
      }
    } else failure = describe(e);
  }
}
if (!exited) {
  child.stdin.end();
  await Promise.race([exitPromise, sleep(5000)]);
  if (!exited) {
    child.kill("SIGKILL");
    await Promise.race([exitPromise, sleep(2000)]);
  }
}
await sleep(50);
if (failure) check("scenario ran to its end", false, failure);
const verdict = {
  scenario: name,
  ok: !failure && invalid.length === 0 && checks.every((c) => c.ok),
  checks,
  invalid,
  frames: frames.map(({ dir, t, line }) => ({ dir, t, line: line.length > 20000 ? `${line.slice(0, 20000)}…` : line })),
  stderr: stderr.slice(-20000),
  exit: exited,
};
// exit only once the verdict is flushed: a pipe takes 64 KiB at a time
process.stdout.write(`${JSON.stringify(verdict)}\n`, () => process.exit(0));
