// herd dashboard: the audit log, newest first, filtered by run, type, severity and age.
'use strict';

function pageAudit(main, params) {
  const val = (k) => params.get(k) || '';
  const run = h('input', { type: 'text', id: 'audit-run', placeholder: 'run id or prefix', value: val('run') });
  const type = h('input', { type: 'text', id: 'audit-type', placeholder: 'type, e.g. permission_decision', value: val('type'), list: 'audit-types' });
  const types = h('datalist', { id: 'audit-types' });
  const sev = h('select', { id: 'audit-severity', 'aria-label': 'severity' },
    ['', 'info', 'warn', 'error'].map((s) => h('option', { value: s, selected: s === val('severity') }, s || 'any severity')));
  const since = h('select', { id: 'audit-since', 'aria-label': 'since' },
    [['', 'any time'], ['3600000', 'last hour'], ['86400000', 'last day'], ['604800000', 'last week']]
      .map(([v, l]) => h('option', { value: v, selected: v === val('since') }, l)));
  const apply = () => {
    const q = new URLSearchParams();
    if (run.value.trim()) q.set('run', run.value.trim());
    if (type.value.trim()) q.set('type', type.value.trim());
    if (sev.value) q.set('severity', sev.value);
    if (since.value) q.set('since', since.value);
    location.hash = '#/audit' + (q.toString() ? '?' + q : '');
  };
  const body = h('tbody');
  const err = h('div');
  append(clear(main), [
    h('div', { class: 'toolbar' }, h('h1', null, 'Audit')),
    h('form', { class: 'filters', onsubmit: (e) => { e.preventDefault(); apply(); } },
      run, type, types, sev, since, h('button', { type: 'submit' }, 'Filter')),
    err,
    h('table', { class: 'grid', id: 'audit' },
      h('thead', null, h('tr', null, ['time', 'type', 'severity', 'run', 'tool', 'input', 'decision', 'by', 'details'].map((c) => h('th', null, c)))),
      body),
  ]);
  const load = coalesce(async () => {
    const q = new URLSearchParams();
    if (val('run')) q.set('run', val('run'));
    if (val('type')) q.set('type', val('type'));
    if (val('severity')) q.set('severity', val('severity'));
    if (val('since')) q.set('since_ms', String(Date.now() - Number(val('since'))));
    q.set('limit', '1000');
    let rows;
    try { rows = await api('audit?' + q); } catch (e) { clear(err).appendChild(notice(e.message)); return; }
    clear(err);
    const seen = new Set(rows.map((r) => r.event_type));
    clear(types);
    for (const t of seen) types.appendChild(h('option', { value: t }));
    const f = document.createDocumentFragment();
    for (const r of rows) {
      f.appendChild(h('tr', { 'data-type': r.event_type, class: 'sev-' + r.severity },
        h('td', null, fmtTime(r.ts)), h('td', null, r.event_type), h('td', null, r.severity),
        h('td', null, r.subagent_id ? runLink(r.subagent_id) : ''), h('td', null, r.tool || ''),
        h('td', null, h('code', null, r.input_preview || '')), h('td', null, r.decision || ''),
        h('td', null, r.decided_by || ''),
        h('td', null, r.details ? h('code', null, JSON.stringify(r.details)) : '')));
    }
    if (!rows.length) f.appendChild(h('tr', null, h('td', { colspan: 9, class: 'empty' }, 'no entries')));
    clear(body).appendChild(f);
  });
  load();
  const es = feed('live', { tick: load });
  return () => es.close();
}
