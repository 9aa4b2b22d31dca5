// herd dashboard: one plan — its DAG as a graph, each step coloured by status and updated live
// from the plan's feed; a failed step's reason, its dependency_failed descendants marked; merge
// order and results of isolated steps; the plan's events.
'use strict';

const NODE_W = 190, NODE_H = 58, GAP_X = 70, GAP_Y = 22, PAD = 16;

function pagePlan(main, id) {
  const head = h('div', { class: 'plan-head' });
  const graph = h('div', { class: 'graph', id: 'graph' });
  const steps = h('tbody');
  const merges = h('div', { id: 'merges' });
  const log = h('ol', { class: 'plan-log', id: 'plan-log' });
  const err = h('div');
  append(clear(main), [
    h('div', { class: 'toolbar' }, h('h1', null, 'Plan ', h('span', { class: 'id' }, id))),
    err, head, graph,
    h('h2', null, 'Steps'),
    h('table', { class: 'grid', id: 'steps' },
      h('thead', null, h('tr', null, ['step', 'status', 'reason', 'attempts', 'turns', 'tokens in / out', 'cost', 'duration', 'run'].map((c) => h('th', null, c)))), steps),
    h('h2', null, 'Merges'), merges,
    h('h2', null, 'Events'), log,
  ]);
  let drawnShape = '';
  const es = feed('plans/' + enc(id) + '/stream', {
    plan: (e) => {
      log.appendChild(h('li', { 'data-kind': e.kind },
        h('time', null, fmtTime(e.ts)), ' ', h('b', null, e.kind), e.step ? ' ' + e.step : '',
        e.reason ? ' — ' + e.reason : '',
        e.subagent_id ? [' ', runLink(e.subagent_id)] : null));
    },
    snapshot: (p) => {
      clear(err);
      renderPlanHead(head, p);
      const edges = graphOf(p);
      const shape = JSON.stringify(edges);
      if (shape !== drawnShape) {
        drawGraph(graph, edges);
        drawnShape = shape;
      }
      colourGraph(graph, p.steps || []);
      renderSteps(steps, p.steps || []);
      renderMerges(merges, p.worktrees || [], p.integration_branch);
    },
    failure: (e) => clear(err).appendChild(notice(e.message)),
  });
  return () => es.close();
}

function renderPlanHead(el, p) {
  clear(el);
  const cancel = h('button', { class: 'danger', onclick: async () => {
    cancel.disabled = true;
    try { await api('runs/' + enc(p.id) + '/cancel', { reason: 'cancelled from the web dashboard' }); }
    catch (e) { el.appendChild(notice(e.message)); }
  } }, 'Cancel plan');
  append(el, [
    h('span', null, h('b', null, p.name)),
    h('span', { id: 'plan-status', 'data-status': p.status }, statusTag(p.state || p.status)),
    h('span', null, p.completed_steps + ' completed, ' + p.failed_steps + ' failed, ' + p.running_steps + ' running of ' + p.total_steps),
    h('span', null, 'duration ' + fmtDur(p.duration_ms)),
    h('span', null, 'tokens ' + fmtNum(p.usage.input_tokens) + ' / ' + fmtNum(p.usage.output_tokens)),
    h('span', null, 'cost ', h('b', null, fmtCost(p.cost_usd))),
    h('span', null, 'started ' + fmtTime(p.created_at)),
    ['completed', 'failed', 'cancelled', 'interrupted'].includes(p.status) ? null : cancel,
  ]);
}

// Each step with the steps it waits for, as the plan's strategy says.
function graphOf(p) {
  const st = p.steps || [];
  return st.map((s, i) => ({
    id: s.id,
    depends_on: p.strategy === 'sequential' ? (i ? [st[i - 1].id] : []) : (p.strategy === 'parallel' ? [] : s.depends_on || []),
  }));
}

// Columns by depth (the longest chain of dependencies before a step), rows in plan order.
function layout(edges) {
  const depth = {};
  const byId = {};
  for (const n of edges) byId[n.id] = n;
  const visit = (id, seen) => {
    if (depth[id] !== undefined) return depth[id];
    if (seen.has(id)) return 0; // validated acyclic; never loop on a bad record
    seen.add(id);
    const n = byId[id];
    const d = n ? Math.max(-1, ...n.depends_on.filter((x) => byId[x]).map((x) => visit(x, seen))) + 1 : 0;
    depth[id] = d;
    return d;
  };
  for (const n of edges) visit(n.id, new Set());
  const cols = [];
  for (const n of edges) (cols[depth[n.id]] = cols[depth[n.id]] || []).push(n.id);
  const pos = {};
  cols.forEach((col, c) => col.forEach((id, r) => {
    pos[id] = { x: PAD + c * (NODE_W + GAP_X), y: PAD + r * (NODE_H + GAP_Y) };
  }));
  const rows = Math.max(1, ...cols.map((c) => c.length));
  return { pos, width: PAD * 2 + cols.length * (NODE_W + GAP_X) - GAP_X, height: PAD * 2 + rows * (NODE_H + GAP_Y) - GAP_Y };
}

function drawGraph(el, edges) {
  const g = { edges };
  const { pos, width, height } = layout(edges);
  const root = svg('svg', { width: Math.max(width, 200), height, viewBox: `0 0 ${Math.max(width, 200)} ${height}`, role: 'img', 'aria-label': 'plan graph' });
  root.appendChild(svg('defs', null, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrowhead' }))));
  for (const n of g.edges) {
    for (const d of n.depends_on) {
      const a = pos[d], b = pos[n.id];
      if (!a || !b) continue;
      const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
      const mx = (x1 + x2) / 2;
      root.appendChild(svg('path', { class: 'edge', 'data-from': d, 'data-to': n.id, d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, 'marker-end': 'url(#arrow)' }));
    }
  }
  for (const n of g.edges) {
    const p = pos[n.id];
    const title = svg('title', null, n.id);
    const node = svg('g', { class: 'node', 'data-step': n.id, 'data-status': 'pending', transform: `translate(${p.x} ${p.y})`, tabindex: 0 },
      title,
      svg('rect', { width: NODE_W, height: NODE_H, rx: 8 }),
      svg('text', { x: 10, y: 20, class: 'node-id' }, n.id.length > 24 ? n.id.slice(0, 23) + '…' : n.id),
      svg('text', { x: 10, y: 38, class: 'node-status' }, 'pending'),
      svg('text', { x: 10, y: 52, class: 'node-reason' }, ''));
    node.addEventListener('click', () => { if (node.dataset.run) location.hash = '#/run/' + enc(node.dataset.run); });
    root.appendChild(node);
  }
  clear(el).appendChild(root);
}

function colourGraph(el, steps) {
  for (const s of steps) {
    const node = [...el.querySelectorAll('g.node')].find((n) => n.dataset.step === s.id);
    if (!node) continue;
    const depFailed = (s.failure_reason || '').startsWith('dependency_failed');
    node.setAttribute('data-status', s.status);
    node.setAttribute('class', 'node st-' + s.status.replace(/[^a-z_]/g, '') + (depFailed ? ' dep-failed' : ''));
    if (s.subagent_id) node.dataset.run = s.subagent_id;
    node.setAttribute('data-state', s.state || s.status);
    node.querySelector('.node-status').textContent = (s.state || s.status) + (s.attempts > 1 ? ' · attempt ' + s.attempts : '') + (s.cost_usd ? ' · ' + fmtCost(s.cost_usd) : '');
    const why = depFailed ? 'dependency failed' : (s.failure_reason || '');
    node.querySelector('.node-reason').textContent = why.length > 30 ? why.slice(0, 29) + '…' : why;
    node.querySelector('title').textContent = s.id + ': ' + s.status + (s.failure_reason ? ' — ' + s.failure_reason : '');
  }
}

function renderSteps(body, steps) {
  const f = document.createDocumentFragment();
  for (const s of steps) {
    f.appendChild(h('tr', { 'data-step': s.id, 'data-status': s.status },
      h('td', null, s.id, s.name && s.name !== s.id ? h('div', { class: 'reason-text' }, s.name) : null),
      h('td', null, statusTag(s.state || s.status)),
      h('td', { class: (s.failure_reason || '').startsWith('dependency_failed') ? 'dep-failed-text' : '' }, s.failure_reason || ''),
      h('td', { class: 'num' }, s.attempts),
      h('td', { class: 'num' }, s.num_turns === null ? '' : s.num_turns),
      h('td', { class: 'num' }, fmtNum((s.usage || {}).input_tokens) + ' / ' + fmtNum((s.usage || {}).output_tokens)),
      h('td', { class: 'num' }, fmtCost(s.cost_usd)),
      h('td', { class: 'num' }, fmtDur(s.duration_ms)),
      h('td', null, s.subagent_id ? runLink(s.subagent_id) : '')));
  }
  clear(body).appendChild(f);
}

function renderMerges(el, worktrees, into) {
  clear(el);
  const steps = worktrees.filter((w) => w.kind === 'step')
    .sort((a, b) => (ms(a.merged_at) || Infinity) - (ms(b.merged_at) || Infinity));
  const integ = worktrees.find((w) => w.kind === 'integration') || (into ? { branch: into } : null);
  if (!steps.length) {
    el.appendChild(h('p', { class: 'empty' }, 'no isolated steps: nothing to merge'));
    return;
  }
  if (integ) el.appendChild(h('p', null, 'merged into ', h('code', null, integ.branch)));
  let order = 0;
  el.appendChild(h('table', { class: 'grid', id: 'merge-table' },
    h('thead', null, h('tr', null, ['order', 'step', 'branch', 'result', 'merge commit', 'when'].map((c) => h('th', null, c)))),
    h('tbody', null, steps.map((w) => h('tr', { 'data-step': w.step, 'data-merge': w.status },
      h('td', { class: 'num' }, w.merged_at ? ++order : ''),
      h('td', null, w.step),
      h('td', null, h('code', null, w.branch)),
      h('td', null, statusTag(w.status)),
      h('td', null, w.merge_commit ? h('code', null, w.merge_commit.slice(0, 12)) : ''),
      h('td', null, fmtTime(w.merged_at)))))));
}
