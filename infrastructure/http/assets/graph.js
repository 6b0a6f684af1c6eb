// The workflow graph of a run's page: laid out by dagre (vendored, assets/vendor/README.md),
// drawn as SVG. Each node is a <g class="node state-<s>" data-state="<name>"> where <s> is
// pending | running | succeeded | failed | skipped | cancelled.
import dagre from '/ui/static/vendor/dagre-3.1.3.esm.js';

const SVG = 'http://www.w3.org/2000/svg';
const CHAR_W = 7.8; // px per character of the node font (13px monospace)
const NODE_H = 34;

function el(name, attrs = {}, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

/** The edges of one state of the workflow detail: [{to, when?}]. */
export function edgesOf(state) {
  const out = [];
  for (const n of state.next || []) {
    if (typeof n === 'string') out.push({ to: n });
    else if (n && n.to) out.push({ to: n.to, when: n.when || undefined, kind: n.kind || 'success' });
  }
  return out;
}

/**
 * Draws `states` ([{name, type, terminal, next}]) with `initial` first into `container`;
 * returns { setState(name, status), states() }.
 */
export function drawGraph(container, states, initial) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: 'TB', nodesep: 28, ranksep: 44, edgesep: 12, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  const names = new Set(states.map((s) => s.name));
  for (const s of states) {
    g.setNode(s.name, { width: Math.max(64, s.name.length * CHAR_W + 28), height: NODE_H, state: s });
  }
  let k = 0;
  for (const s of states) {
    for (const e of edgesOf(s)) {
      if (!names.has(e.to)) continue;
      g.setEdge(s.name, e.to, { when: e.when, kind: e.kind }, `e${k++}`);
    }
  }
  dagre.layout(g);
  const { width, height } = g.graph();
  const svg = el('svg', {
    viewBox: `0 0 ${Math.ceil(width)} ${Math.ceil(height)}`,
    width: Math.ceil(width),
    class: 'graph',
    role: 'img',
    'aria-label': `State graph: ${states.length} states, starting at ${initial || '?'}`,
  });
  const defs = el('defs', {}, svg);
  const marker = el('marker', {
    id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
    orient: 'auto-start-reverse',
  }, defs);
  el('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }, marker);
  const edges = el('g', { class: 'edges' }, svg);
  for (const e of g.edges()) {
    const lab = g.edge(e);
    const d = lab.points.map((p, i) => `${i ? 'L' : 'M'}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' ');
    const cls = ['edge', `edge-${lab.kind || 'success'}`, lab.when ? 'conditional' : ''].filter(Boolean).join(' ');
    const path = el('path', { d, class: cls, 'marker-end': 'url(#arrow)' }, edges);
    const t = el('title', {}, path);
    t.textContent = `${e.v} → ${e.w} (${lab.kind || 'success'}${lab.when ? ' when ' + lab.when : ''})`;
  }
  const nodes = new Map();
  const layer = el('g', { class: 'nodes' }, svg);
  for (const name of g.nodes()) {
    const n = g.node(name);
    const s = n.state;
    const grp = el('g', {
      class: `node state-pending${s.terminal ? ' terminal' : ''}${s.terminal_status === 'failure' ? ' terminal-failure' : ''}${s.approval ? ' gated' : ''}${name === initial ? ' initial' : ''}`,
      'data-state': name,
      transform: `translate(${(n.x - n.width / 2).toFixed(1)},${(n.y - n.height / 2).toFixed(1)})`,
    }, layer);
    el('rect', { width: n.width, height: n.height, rx: s.terminal ? 17 : 6 }, grp);
    const text = el('text', { x: n.width / 2, y: n.height / 2 + 4.5, 'text-anchor': 'middle' }, grp);
    text.textContent = name;
    const title = el('title', {}, grp);
    if (s.approval) el('circle', { cx: n.width - 6, cy: 6, r: 3.5, class: 'gate-mark' }, grp);
    nodes.set(name, { grp, title, type: `${s.type || 'state'}${s.approval ? ', approval gate' : ''}`, status: 'pending' });
    title.textContent = `${name} (${nodes.get(name).type}): pending`;
  }
  container.replaceChildren(svg);
  return {
    setState(name, status) {
      const n = nodes.get(name);
      if (!n) return false;
      const cls = [...n.grp.classList].filter((c) => !c.startsWith('state-'));
      n.grp.setAttribute('class', [...cls, `state-${status}`].join(' '));
      n.status = status;
      n.title.textContent = `${name} (${n.type}): ${status}`;
      return true;
    },
    states() {
      return new Map([...nodes].map(([k, v]) => [k, v.status]));
    },
  };
}
