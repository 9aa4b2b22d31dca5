// herd dashboard: runs and plans — status, agent, duration, turns, tokens, cost; a status
// filter; totals per plan and over what is shown. Re-read after store commits (live ticks).
'use strict';

const STATUSES = ['', 'pending', 'queued', 'running', 'waiting_for_merge', 'completed', 'failed', 'cancelled', 'interrupted'];

function pageRuns(main, params) {
  const filter = params.get('status') || '';
  const select = h('select', { id: 'status-filter', 'aria-label': 'status',
    onchange: () => { location.hash = '#/' + (select.value ? '?status=' + enc(select.value) : ''); } },
  STATUSES.map((s) => h('option', { value: s, selected: s === filter }, s || 'every status')));
  const totals = h('div', { class: 'totals', id: 'totals' });
  const plansBody = h('tbody');
  const runsBody = h('tbody');
  const err = h('div');
  append(clear(main), [
    h('div', { class: 'toolbar' }, h('h1', null, 'Runs & plans'), h('label', null, 'Filter: ', select)),
    err, totals,
    h('h2', null, 'Plans'),
    h('table', { class: 'grid', id: 'plans' },
      h('thead', null, h('tr', null, ['plan', 'name', 'status', 'steps done / failed / all', 'tokens in / out', 'cost', 'started', 'duration'].map((c) => h('th', null, c)))),
      plansBody),
    h('h2', null, 'Runs'),
    h('table', { class: 'grid', id: 'runs' },
      h('thead', null, h('tr', null, ['run', 'name', 'agent', 'status', 'duration', 'turns', 'tokens in / out', 'cost', 'started'].map((c) => h('th', null, c)))),
      runsBody),
  ]);

  const load = coalesce(async () => {
    let v;
    try {
      v = await api('overview' + (filter ? '?status=' + enc(filter) : ''));
    } catch (e) {
      clear(err).appendChild(notice(e.message));
      return;
    }
    clear(err);
    renderPlans(plansBody, v.plans);
    renderRuns(runsBody, v.runs, v.now);
    renderTotals(totals, v);
    markRendered();
  });
  load();
  const es = feed('live', { tick: load });
  return () => es.close();
}

function renderPlans(body, plans) {
  renderRows(body, plans, (p) => p.id, JSON.stringify, (p) =>
    h('tr', { 'data-id': p.id, 'data-status': p.status },
      h('td', null, planLink(p.id)),
      h('td', null, p.name),
      h('td', null, statusTag(p.state || p.status)),
      h('td', { class: 'num' }, p.completed_steps + ' / ' + p.failed_steps + ' / ' + p.total_steps),
      h('td', { class: 'num' }, fmtNum(p.usage.input_tokens) + ' / ' + fmtNum(p.usage.output_tokens)),
      h('td', { class: 'num' }, fmtCost(p.cost_usd)),
      h('td', null, fmtTime(p.created_at)),
      h('td', { class: 'num' }, fmtDur(p.duration_ms))),
  () => h('tr', null, h('td', { colspan: 8, class: 'empty' }, 'no plans')));
}

function renderRuns(body, runs, now) {
  // A running run's duration is the server's now minus its start: part of what a row shows.
  const dur = (r) => (r.duration_ms !== null ? r.duration_ms : (r.started_at ? now - ms(r.started_at) : null));
  renderRows(body, runs, (r) => r.id, (r) => JSON.stringify(r) + fmtDur(dur(r)), (r) =>
    h('tr', { 'data-id': r.id, 'data-status': r.status },
      h('td', null, runLink(r.id)),
      h('td', null, r.name, r.plan_id ? h('div', { class: 'reason-text' }, 'step of ', planLink(r.plan_id)) : null),
      h('td', null, r.cli + (r.model ? ' · ' + r.model : '')),
      h('td', null, statusTag(r.state || r.status), r.failure_reason ? h('div', { class: 'reason-text' }, r.failure_reason) : null),
      h('td', { class: 'num' }, fmtDur(dur(r))),
      h('td', { class: 'num' }, r.num_turns === null ? '' : r.num_turns),
      h('td', { class: 'num' }, fmtNum(r.usage.input_tokens) + ' / ' + fmtNum(r.usage.output_tokens)),
      h('td', { class: 'num' }, fmtCost(r.cost_usd)),
      h('td', null, fmtTime(r.started_at || r.created_at))),
  () => h('tr', null, h('td', { colspan: 9, class: 'empty' }, 'no runs')));
}

function renderTotals(el, v) {
  const by = {};
  let cost = 0, tin = 0, tout = 0;
  for (const r of v.runs) {
    by[r.status] = (by[r.status] || 0) + 1;
    cost += r.cost_usd || 0;
    tin += r.usage.input_tokens;
    tout += r.usage.output_tokens;
  }
  clear(el);
  append(el, [
    h('span', null, h('b', null, v.runs.length), ' runs'),
    Object.entries(by).map(([s, n]) => h('span', null, statusTag(s), ' ', n)),
    h('span', null, 'tokens ', fmtNum(tin), ' / ', fmtNum(tout)),
    h('span', null, 'cost ', h('b', null, fmtCost(cost))),
    h('span', null, h('b', null, v.plans.length), ' plans'),
  ]);
}
