// herd dashboard: one run — its events as a conversation (text, tool calls with input and
// result, errors), Claude's internal subagents (parent_tool_use_id) nested and collapsible;
// result, usage and cost; worktree and branch; cancel and send-message. Live from its feed.
'use strict';

function pageRun(main, id) {
  const head = h('div', { class: 'run-head', id: 'run-head' });
  const waiting = h('div', { id: 'run-waiting' });
  const convo = h('div', { class: 'conversation', id: 'conversation' });
  const err = h('div');
  const msg = h('textarea', { id: 'message', rows: 2, placeholder: 'a message for the agent (it gets a turn of its own)', 'aria-label': 'message' });
  const sendOut = h('span', { class: 'answer-msg' });
  const sendBtn = h('button', { id: 'send', onclick: async () => {
    if (!msg.value.trim()) return;
    sendBtn.disabled = true;
    try {
      await api('runs/' + enc(id) + '/send', { message: msg.value });
      msg.value = '';
      clear(sendOut).appendChild(h('span', { class: 'ok' }, 'sent'));
    } catch (e) { clear(sendOut).appendChild(notice(e.message)); }
    sendBtn.disabled = false;
  } }, 'Send');
  const cancelBtn = h('button', { id: 'cancel', class: 'danger', onclick: async () => {
    cancelBtn.disabled = true;
    try { await api('runs/' + enc(id) + '/cancel', { reason: 'cancelled from the web dashboard' }); }
    catch (e) { clear(sendOut).appendChild(notice(e.message)); }
    refresh();
  } }, 'Cancel run');
  append(clear(main), [
    h('div', { class: 'toolbar' }, h('h1', null, 'Run ', h('span', { class: 'id' }, id)), cancelBtn),
    err, head, waiting,
    h('h2', null, 'Conversation'), convo,
    h('div', { class: 'composer' }, msg, sendBtn, sendOut),
  ]);
  const conv = new Conversation(convo);
  let run = null;
  const refresh = coalesce(async () => {
    try { run = await api('runs/' + enc(id)); } catch (e) { clear(err).appendChild(notice(e.message)); return; }
    renderRunHead(head, run);
    renderRunWaiting(waiting, run, refresh);
    cancelBtn.hidden = ['completed', 'failed', 'cancelled'].includes(run.status);
  });
  let es = null;
  let closed = false;
  (async () => {
    // The first screenful of events with the run's facts, at once; the rest page by page after
    // (the conversation fills in slices, in order); then the live feed from the last one on.
    const page = (after, limit) => api('runs/' + enc(id) + '/events?after=' + after + '&limit=' + limit);
    let last = 0;
    let evs = [];
    try {
      [, evs] = await Promise.all([refresh(), page(0, FIRST_EVENTS)]);
    } catch (e) { clear(err).appendChild(notice(e.message)); }
    conv.addAll(evs);
    markRendered();
    let more = evs.length === FIRST_EVENTS;
    if (evs.length) last = evs[evs.length - 1].seq;
    while (more && !closed) {
      try { evs = await page(last, EVENTS_PAGE); } catch (e) { clear(err).appendChild(notice(e.message)); return; }
      conv.addAll(evs);
      more = evs.length === EVENTS_PAGE;
      if (evs.length) last = evs[evs.length - 1].seq;
    }
    if (closed) return;
    es = feed('runs/' + enc(id) + '/stream?from=' + (last + 1), {
      ev: (e) => {
        conv.addAll([e]);
        if (REFRESH_KINDS.has(e.kind)) refresh();
      },
      failure: (e) => clear(err).appendChild(notice(e.message)),
    });
  })();
  return () => { closed = true; conv.closed = true; if (es) es.close(); };
}

// Events the first request reads (a screenful and more), and each later page.
const FIRST_EVENTS = 200;
const EVENTS_PAGE = 5000;

// Events after which the run's header (status, usage, pending requests) is read again.
const REFRESH_KINDS = new Set(['subagent_started', 'subagent_completed', 'subagent_failed', 'subagent_cancelled',
  'subagent_closed', 'permission_requested', 'permission_decided', 'result', 'worktree_created',
  'subagent_waiting_for_merge', 'worktree_merged', 'merge_conflict', 'nothing_to_merge', 'init']);

function renderRunHead(el, r) {
  clear(el);
  const u = r.usage || {};
  const wt = r.worktree;
  append(el, [
    h('dl', { class: 'facts' },
      h('dt', null, 'name'), h('dd', null, r.name),
      h('dt', null, 'status'), h('dd', { id: 'run-status', 'data-status': r.status }, statusTag(r.state || r.status), r.failure_reason ? ' ' + r.failure_reason : ''),
      r.plan_id ? [h('dt', null, 'plan'), h('dd', null, planLink(r.plan_id), ' step ', r.step || '')] : null,
      h('dt', null, 'agent'), h('dd', null, r.cli + (r.model ? ' · ' + r.model : '')),
      h('dt', null, 'directory'), h('dd', null, h('code', null, r.cwd)),
      wt ? [h('dt', null, 'worktree'), h('dd', null, h('code', null, wt.path), ' on ', h('code', null, wt.branch), ' (' + wt.status + ')', wt.merge_commit ? [' merged as ', h('code', null, wt.merge_commit.slice(0, 12))] : null)] : null,
      h('dt', null, 'duration'), h('dd', null, fmtDur(r.duration_ms)),
      h('dt', null, 'turns'), h('dd', null, r.num_turns === null ? '' : r.num_turns),
      h('dt', null, 'tokens'), h('dd', null, 'in ' + fmtNum(u.input_tokens) + ', out ' + fmtNum(u.output_tokens) + ', cache read ' + fmtNum(u.cache_read_input_tokens) + ', cache write ' + fmtNum(u.cache_creation_input_tokens)),
      h('dt', null, 'cost'), h('dd', null, fmtCost(r.cost_usd)),
      h('dt', null, 'task'), h('dd', null, h('pre', { class: 'prompt' }, r.prompt))),
    r.result !== null && r.result !== undefined ? h('div', { class: 'final-result', id: 'run-result' }, h('h3', null, 'Result'), h('pre', null, r.result)) : null,
  ]);
}

function renderRunWaiting(el, r, refresh) {
  clear(el);
  const reqs = r.pending_permissions || [];
  if (!reqs.length) return;
  el.appendChild(h('h2', null, 'Waiting for you'));
  for (const q of reqs) {
    el.appendChild(h('div', { class: 'card pending', 'data-request': q.id },
      h('div', null, h('b', null, q.tool), ' ', h('span', { class: 'id' }, q.id)),
      h('pre', null, q.input_preview),
      answerButtons(q, () => setTimeout(refresh, 200))));
  }
}

// The conversation: one thread for the agent, one nested (collapsible) per internal subagent,
// under the tool call that started it. Tool results attach to their calls.
class Conversation {
  constructor(el) {
    this.root = el;
    this.tools = new Map(); // tool_use_id -> {el, result, children}
    this.threads = new Map(); // parent_tool_use_id -> element events go into
    this.queue = []; // events not on screen yet (from `head` on), in order
    this.head = 0;
    this.busy = false;
    this.closed = false; // the page was left: stop filling it
  }

  thread(parent) {
    if (!parent) return this.root;
    let t = this.threads.get(parent);
    if (t) return t;
    const body = h('div', { class: 'thread' });
    const box = h('details', { class: 'subagent', open: true, 'data-parent': parent },
      h('summary', null, 'internal subagent ', h('span', { class: 'id' }, parent)), body);
    const call = this.tools.get(parent);
    (call ? call.el : this.root).appendChild(box);
    this.threads.set(parent, body);
    return body;
  }

  // Events go on screen in order: a few at once, a long backlog in slices after a paint (live
  // events that arrive meanwhile wait their turn behind it). The conversation says
  // `data-rendering` while some wait.
  addAll(evs) {
    for (const e of evs) this.queue.push(e);
    if (this.busy) return;
    this.take(FIRST_ROWS);
    if (this.waiting) this.slices();
  }

  // Up to `n` waiting events onto the page.
  take(n) {
    const end = Math.min(this.queue.length, this.head + n);
    for (; this.head < end; this.head++) {
      const e = this.queue[this.head];
      const node = this.render(e);
      if (node) this.thread(e.parent_tool_use_id).appendChild(node);
    }
    if (this.head === this.queue.length) { this.queue = []; this.head = 0; }
  }

  get waiting() { return this.queue.length - this.head; }

  slices() {
    this.busy = true;
    this.root.dataset.rendering = '';
    const next = () => {
      if (this.closed) return;
      const end = performance.now() + SLICE_MS;
      while (this.waiting && performance.now() < end) this.take(20);
      if (this.waiting) { setTimeout(next, 0); return; }
      this.busy = false;
      delete this.root.dataset.rendering;
    };
    afterPaint(next);
  }

  render(e) {
    const k = e.kind;
    const at = { 'data-seq': e.seq, 'data-kind': k, title: fmtTime(e.ts) };
    switch (k) {
      case 'text':
        return h('div', Object.assign({ class: 'msg assistant' }, at), e.text);
      case 'thinking':
        return h('details', Object.assign({ class: 'thinking' }, at), h('summary', null, 'thinking'), h('div', null, e.text));
      case 'user_text':
        return h('div', Object.assign({ class: 'msg user' }, at), e.text);
      case 'tool_call': {
        const result = h('div', { class: 'tool-result' });
        const el = h('div', Object.assign({ class: 'tool', 'data-tool-id': e.id }, at),
          h('div', { class: 'tool-name' }, '⚙ ', e.name),
          h('details', { class: 'tool-input' }, h('summary', null, inputSummary(e.input)), h('pre', null, JSON.stringify(e.input, null, 2))),
          result);
        this.tools.set(e.id, { el, result });
        return el;
      }
      case 'tool_result': {
        const body = h('details', { class: 'tool-output' + (e.is_error ? ' error' : ''), 'data-seq': e.seq, 'data-kind': k },
          h('summary', null, (e.is_error ? 'error: ' : 'result: ') + firstLine(e.content)), h('pre', null, e.content));
        const call = this.tools.get(e.tool_use_id);
        if (call) { call.result.appendChild(body); return null; }
        return body;
      }
      case 'result':
        return h('div', Object.assign({ class: 'result' + (e.is_error ? ' error' : '') }, at),
          h('b', null, e.is_error ? 'Result (error)' : 'Result'),
          e.text ? h('pre', null, e.text) : null,
          (e.errors || []).map((x) => h('div', { class: 'err' }, x)),
          h('div', { class: 'meta' },
            e.num_turns !== null && e.num_turns !== undefined ? e.num_turns + ' turns · ' : '',
            'tokens in ' + fmtNum((e.usage || {}).input_tokens) + ', out ' + fmtNum((e.usage || {}).output_tokens),
            e.cost_usd !== null && e.cost_usd !== undefined ? ' · ' + fmtCost(e.cost_usd) : '',
            e.duration_ms ? ' · ' + fmtDur(e.duration_ms) : ''),
          (e.permission_denials || []).length ? h('div', { class: 'err' }, 'denied: ' + e.permission_denials.map((d) => d.tool_name || JSON.stringify(d)).join(', ')) : null);
      case 'permission_requested':
        return h('div', Object.assign({ class: 'perm asked', 'data-request': e.request }, at),
          'asks to use ', h('b', null, e.tool), ' ', h('code', null, e.input_preview), ' — waiting for a person (', h('span', { class: 'id' }, e.request), ')');
      case 'permission_decided':
        return h('div', Object.assign({ class: 'perm decided d-' + e.decision, 'data-request': e.request || '' }, at),
          e.decision === 'allow' ? 'allowed ' : 'denied ', h('b', null, e.tool), ' by ' + e.by);
      case 'stderr':
        return h('div', Object.assign({ class: 'err' }, at), 'stderr: ', e.line);
      case 'decode_error':
        return h('div', Object.assign({ class: 'err' }, at), 'unreadable output (' + e.error + '): ', e.preview);
      case 'api_retry':
        return h('div', Object.assign({ class: 'err' }, at), 'model API retry ' + (e.attempt || '') + (e.error ? ': ' + e.error : ''));
      case 'subagent_failed':
        return h('div', Object.assign({ class: 'err life' }, at), 'failed: ', e.reason);
      case 'subagent_cancelled':
        return h('div', Object.assign({ class: 'err life' }, at), 'cancelled: ', e.reason);
      case 'merge_conflict':
        return h('div', Object.assign({ class: 'err life' }, at), 'merge conflict into ', e.into, ': ', (e.files || []).join(', '));
      case 'task':
        return h('div', Object.assign({ class: 'life' }, at), 'internal subagent ' + e.subtype + (e.description ? ': ' : ''), e.description || '', e.status ? ' (' + e.status + ')' : '');
      case 'stream_event':
      case 'control_request':
      case 'control_response':
        return null;
      default:
        return h('div', Object.assign({ class: 'life' }, at), lifeText(e));
    }
  }
}

function inputSummary(input) {
  if (input && typeof input === 'object') {
    const v = input.command || input.file_path || input.pattern || input.description || input.url || input.prompt;
    if (typeof v === 'string') return firstLine(v);
  }
  return firstLine(JSON.stringify(input));
}

function firstLine(s) {
  const t = String(s === undefined || s === null ? '' : s);
  const l = t.split('\n')[0];
  return l.length > 120 ? l.slice(0, 119) + '…' : l;
}

function lifeText(e) {
  const rest = Object.assign({}, e);
  for (const k of ['kind', 'seq', 'ts', 'subagent_id', 'parent_tool_use_id']) delete rest[k];
  const parts = Object.entries(rest).map(([k, v]) => k + ' ' + (typeof v === 'string' ? v : JSON.stringify(v)));
  return e.kind.replace(/_/g, ' ') + (parts.length ? ': ' + parts.join(', ') : '');
}
