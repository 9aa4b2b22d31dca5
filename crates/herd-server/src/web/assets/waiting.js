// herd dashboard: every tool call waiting for a person across runs — tool, input, which run and
// which internal subagent asks, how long it has waited — answered with Allow / Allow always /
// Deny (+ reason). The first answer wins, whoever gives it; the page says who answered.
'use strict';

function pageWaiting(main) {
  const list = h('div', { id: 'waiting-list' });
  const answered = h('div', { id: 'answered-list' });
  const err = h('div');
  append(clear(main), [
    h('div', { class: 'toolbar' }, h('h1', null, 'Waiting for a person')),
    err, list,
    h('h2', null, 'Answered since this page opened'), answered,
  ]);
  const shown = new Map(); // request id -> card
  const gone = new Set();
  const moveToAnswered = async (id, view) => {
    if (gone.has(id)) return;
    gone.add(id);
    const card = shown.get(id);
    shown.delete(id);
    if (card) card.remove();
    let v = view;
    if (!v) { try { v = await api('requests/' + enc(id)); } catch (_) { return; } }
    answered.prepend(h('div', { class: 'card done', 'data-request': id },
      h('b', null, v.tool), ' ', h('span', { class: 'id' }, id), ' of ', runLink(v.subagent_id), ' — ', answeredLine(v)));
  };
  const load = coalesce(async () => {
    let reqs;
    try { reqs = await api('pending'); } catch (e) { clear(err).appendChild(notice(e.message)); return; }
    clear(err);
    const now = new Set(reqs.map((r) => r.id));
    for (const id of [...shown.keys()]) if (!now.has(id)) moveToAnswered(id);
    for (const r of reqs) {
      if (shown.has(r.id) || gone.has(r.id)) continue;
      const card = pendingCard(r, (v) => moveToAnswered(r.id, v));
      shown.set(r.id, card);
      list.appendChild(card);
    }
    const empty = list.querySelector('.empty');
    if (!shown.size && !empty) list.appendChild(h('p', { class: 'empty' }, 'nothing waits for a person'));
    if (shown.size && empty) empty.remove();
  });
  load();
  const es = feed('live', { tick: load });
  const timer = setInterval(() => {
    for (const el of list.querySelectorAll('[data-since]')) {
      el.textContent = fmtDur(Date.now() - Number(el.dataset.since) + Number(el.dataset.skew));
    }
  }, 1000);
  return () => { es.close(); clearInterval(timer); };
}

function pendingCard(r, done) {
  // The server's clock decides how long it has waited; the browser's only ticks it along.
  const skew = r.now - Date.now();
  const since = ms(r.created_at);
  return h('div', { class: 'card pending', 'data-request': r.id, 'data-run': r.subagent_id },
    h('div', { class: 'card-head' },
      h('b', { class: 'tool-label' }, r.tool), ' asked by ', runLink(r.subagent_id, r.run_name || short(r.subagent_id)),
      ' (' + r.run_cli + ') · ',
      r.origin ? ['internal subagent ', h('span', { class: 'id origin' }, r.origin)] : h('span', { class: 'origin' }, 'the agent itself'),
      r.plan_id ? [' · step ', r.step || '', ' of ', planLink(r.plan_id)] : null,
      ' · waiting ', h('span', { 'data-since': since, 'data-skew': skew }, fmtDur(r.now - since)),
      ' · expires in ' + fmtDur(r.expires_in_s * 1000)),
    h('pre', { class: 'input' }, r.input_preview),
    h('div', { class: 'id' }, r.id),
    answerButtons(r, done));
}

// The count of waiting requests in the header, on every page.
const updateWaitingCount = coalesce(async () => {
  const el = document.getElementById('waiting-count');
  try {
    const reqs = await api('pending');
    el.textContent = String(reqs.length);
    el.hidden = reqs.length === 0;
  } catch (_) { el.hidden = true; }
});
