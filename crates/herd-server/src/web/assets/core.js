// herd dashboard: shared helpers. Everything that comes from agents is untrusted: it only ever
// reaches the page as text nodes (textContent), never as markup.
'use strict';

// An element: attrs (class, on<event> handlers, other attributes) and children (strings become
// text nodes; null/undefined/false are skipped; arrays are flattened).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    if (Array.isArray(k)) append(el, k);
    else if (k instanceof Node) el.appendChild(k);
    else el.appendChild(document.createTextNode(String(k)));
  }
  return el;
}

function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// An SVG element.
function svg(tag, attrs, ...kids) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    el.appendChild(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return el;
}

class ApiFailure extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The JSON API: GET, or POST with a JSON body (the server checks its origin and type).
async function api(path, body) {
  const opts = { credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    opts.method = 'POST';
    opts.headers['content-type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch('/api/' + path, opts);
  const text = await r.text();
  let v = null;
  try { v = text ? JSON.parse(text) : null; } catch (_) { v = { message: text }; }
  if (!r.ok) throw new ApiFailure(r.status, (v && v.code) || 'ERROR', (v && v.message) || r.statusText);
  return v;
}

const enc = encodeURIComponent;
const runLink = (id, label) => h('a', { href: '#/run/' + enc(id), class: 'id' }, label || short(id));
const planLink = (id, label) => h('a', { href: '#/plan/' + enc(id), class: 'id' }, label || short(id));
const short = (id) => (id && id.length > 14 ? id.slice(0, 14) + '…' : id || '');

// A time from the API (RFC 3339 text, or ms since the epoch) as ms; null when absent.
function ms(t) {
  if (t === null || t === undefined || t === '') return null;
  return typeof t === 'number' ? t : Date.parse(t);
}

function fmtTime(t) {
  if (!t) return '';
  const d = new Date(ms(t));
  const today = new Date();
  return d.toDateString() === today.toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
}

function fmtDur(ms) {
  if (ms === null || ms === undefined) return '';
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + String(s % 60).padStart(2, '0') + 's';
  return Math.floor(m / 60) + 'h ' + String(m % 60).padStart(2, '0') + 'm';
}

const fmtCost = (c) => (c === null || c === undefined ? '' : '$' + Number(c).toFixed(4));
const fmtNum = (n) => (n === null || n === undefined ? '' : Number(n).toLocaleString());
const statusTag = (s) => h('span', { class: 'status s-' + String(s).replace(/[^a-z_]/g, '') }, s);

function notice(msg, kind) {
  return h('div', { class: 'notice ' + (kind || 'error'), role: 'alert' }, msg);
}

// A live feed (server-sent events). The browser reconnects by itself and sends the last event
// id it saw, so the server resumes after it; `end` closes it for good.
function feed(path, handlers) {
  const es = new EventSource('/api/' + path);
  const dot = document.getElementById('live');
  es.onopen = () => dot && dot.classList.add('on');
  es.onerror = () => dot && dot.classList.remove('on');
  for (const [name, fn] of Object.entries(handlers)) {
    es.addEventListener(name, (m) => {
      let data = null;
      try { data = JSON.parse(m.data); } catch (_) { data = m.data; }
      fn(data, m);
    });
  }
  es.addEventListener('end', () => es.close());
  return es;
}

// Run `fn` at most once at a time; a call while it runs makes it run once more after.
function coalesce(fn) {
  let running = false;
  let again = false;
  return async function run() {
    if (running) { again = true; return; }
    running = true;
    try { await fn(); } catch (e) { console.error(e); }
    running = false;
    if (again) { again = false; run(); }
  };
}

// The answer buttons of a pending request; `done(view)` after an answer was taken.
function answerButtons(req, done) {
  const reason = h('input', { type: 'text', class: 'reason', placeholder: 'reason (for a deny)', 'aria-label': 'reason' });
  const out = h('span', { class: 'answer-msg' });
  const send = async (decision) => {
    for (const b of box.querySelectorAll('button')) b.disabled = true;
    try {
      const v = await api('requests/' + enc(req.id) + '/answer', { decision, reason: reason.value });
      clear(out).appendChild(answeredLine(v));
      if (done) done(v);
    } catch (e) {
      let who = '';
      try {
        const v = await api('requests/' + enc(req.id));
        if (v.status !== 'pending') who = answeredLine(v).textContent;
      } catch (_) { /* the message says enough */ }
      clear(out).appendChild(notice(who ? who + ' — ' + e.message : e.message));
      if (done && who) done(null);
    }
  };
  const box = h('div', { class: 'answer' },
    h('button', { class: 'allow', 'data-answer': 'allow', onclick: () => send('allow') }, 'Allow'),
    h('button', { class: 'allow-always', 'data-answer': 'allow_always', onclick: () => send('allow_always') }, 'Allow always'),
    h('button', { class: 'deny', 'data-answer': 'deny', onclick: () => send('deny') }, 'Deny'),
    reason, out);
  return box;
}

// "approved by X" / "denied by X: reason".
function answeredLine(v) {
  const verb = { approved: 'approved', denied: 'denied', expired: 'expired', cancelled: 'closed' }[v.status] || v.status;
  return h('span', { class: 'answered s-' + v.status, 'data-request': v.id },
    verb + (v.always ? ' (always)' : ''),
    v.decided_by ? ' by ' + v.decided_by : '',
    v.reason ? ': ' + v.reason : '');
}

// `fn` once the next frame has been painted.
function afterPaint(fn) {
  requestAnimationFrame(() => setTimeout(fn, 0));
}

// Marks `herd-rendered` once the page's first screenful is on screen (after the next frame is
// painted): how long a first render takes (the tests measure it; any performance tool shows it).
function markRendered() {
  afterPaint(() => {
    if (!performance.getEntriesByName('herd-rendered').length) performance.mark('herd-rendered');
  });
}

// Long lists are built in slices: what fills the first screen at once, the rest a slice of
// about SLICE_MS at a time after that has been painted, so a page of thousands of rows shows at
// once and answers input while it fills. The list's element says `data-rendering` until done.
const FIRST_ROWS = 80;
const SLICE_MS = 12;

// Show `items` in `body` in order, one row each: `build(item)` makes a row, `sig(item)` says
// when a row shown before (same `key`) can stay as it is, so a re-read list only rebuilds what
// changed. A call while an earlier one is still filling takes over from it.
function renderRows(body, items, key, sig, build, empty) {
  if (body._cancel) body._cancel();
  const rows = body._rows || (body._rows = new Map());
  if (!items.length) {
    rows.clear();
    clear(body).appendChild(empty());
    delete body.dataset.rendering;
    return;
  }
  const keep = new Set(items.map(key));
  for (const k of [...rows.keys()]) if (!keep.has(k)) rows.delete(k);
  // Rows of an earlier render that are not kept (and the empty row) go first.
  for (const el of [...body.children]) if (!el._key || !keep.has(el._key) || rows.get(el._key)?.el !== el) el.remove();
  let at = body.firstElementChild;
  let i = 0;
  const place = () => {
    const it = items[i++];
    const k = key(it);
    const s = sig(it);
    let row = rows.get(k);
    if (!row || row.sig !== s) {
      const el = build(it);
      el._key = k;
      if (row) {
        if (row.el === at) at = at.nextElementSibling;
        row.el.remove();
      }
      row = { sig: s, el };
      rows.set(k, row);
    }
    if (row.el === at) at = at.nextElementSibling;
    else body.insertBefore(row.el, at);
  };
  for (let n = 0; n < FIRST_ROWS && i < items.length; n++) place();
  if (i >= items.length) { delete body.dataset.rendering; return; }
  body.dataset.rendering = '';
  let cancelled = false;
  body._cancel = () => { cancelled = true; };
  const next = () => {
    if (cancelled) return;
    const end = performance.now() + SLICE_MS;
    while (i < items.length && performance.now() < end) place();
    if (i < items.length) { setTimeout(next, 0); return; }
    body._cancel = null;
    delete body.dataset.rendering;
  };
  afterPaint(next);
}
