// herd dashboard: the router — #/ (runs and plans), #/plan/ID, #/run/ID, #/waiting, #/audit —
// and the header's live count of requests waiting for a person.
'use strict';

let leave = null;

function route() {
  if (leave) { try { leave(); } catch (_) { /* a page's feed already gone */ } leave = null; }
  const main = document.getElementById('main');
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  let page = 'runs';
  if (parts[0] === 'plan' && parts[1]) { page = 'plan'; leave = pagePlan(main, parts[1]); }
  else if (parts[0] === 'run' && parts[1]) { page = 'run'; leave = pageRun(main, parts[1]); }
  else if (parts[0] === 'waiting') { page = 'waiting'; leave = pageWaiting(main); }
  else if (parts[0] === 'audit') { page = 'audit'; leave = pageAudit(main, params); }
  else leave = pageRuns(main, params);
  document.body.dataset.page = page;
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('here', a.dataset.nav === page);
  window.scrollTo(0, 0);
}

window.addEventListener('hashchange', route);
route();
updateWaitingCount();
feed('live', { tick: updateWaitingCount });
