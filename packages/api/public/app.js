// The operations dashboard: plain ES modules, no build step, nothing loaded from outside
// this server. Hash routes: #/ (overview), #/tasks, #/task/<id>, #/dead-letters,
// #/processes, #/process/<name>/<root id>. Data is rendered with textContent only.
import { roleQueues, taskResults } from './roles.js';
const main = document.getElementById('main');
const STATES = ['scheduled', 'ready', 'running', 'retrying', 'succeeded', 'failed', 'abandoned', 'cancelled'];
const TOKEN_KEY = 'queue-api-token';
let refreshTimer;

/** Builds an element: h('a', {href: '#/'}, 'text', child, ...). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElementNS(tag === 'svg' || attrs.svg ? 'http://www.w3.org/2000/svg' : 'http://www.w3.org/1999/xhtml', tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'svg' || v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const s = (tag, attrs = {}, ...children) => h(tag, { ...attrs, svg: true }, ...children);

async function api(path, options = {}) {
  const res = await fetch(path, options);
  const body = res.headers.get('content-type')?.includes('json') ? await res.json() : await res.text();
  if (!res.ok) throw Object.assign(new Error(body?.message ?? `HTTP ${res.status}`), { status: res.status });
  return body;
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }
function showTokenStatus() {
  const el = document.getElementById('token-status');
  el.replaceChildren(token() ? h('span', {}, 'API token set · ', h('a', { href: '#', onclick: (e) => { e.preventDefault(); sessionStorage.removeItem(TOKEN_KEY); showTokenStatus(); route(); } }, 'forget')) : 'read-only (no API token)');
}
function tokenForm(onSaved) {
  const input = h('input', { type: 'password', name: 'token', placeholder: 'API token', autocomplete: 'off', 'data-testid': 'token-input' });
  return h('form', { class: 'inline', 'data-testid': 'token-form', onsubmit: (e) => { e.preventDefault(); if (input.value.trim()) { sessionStorage.setItem(TOKEN_KEY, input.value.trim()); showTokenStatus(); onSaved(); } } },
    h('label', {}, 'API token (kept in this tab only)', input), h('button', { type: 'submit' }, 'Use token'));
}
async function mutate(path, body) {
  return api(path, { method: 'POST', headers: { authorization: `Bearer ${token()}`, 'content-type': 'application/json' }, body: JSON.stringify(body ?? {}) });
}

const fmtTime = (v) => (v ? new Date(v).toLocaleString() : '');
const stateBadge = (state) => h('span', { class: `state state-${state}` }, state);
const taskLink = (id) => h('a', { href: `#/task/${id}` }, `#${id}`);
const num = (v, digits = 0) => (v === null || v === undefined ? '—' : Number(v).toFixed(digits));
function table(headers, rows, attrs = {}) {
  return h('table', attrs, h('thead', {}, h('tr', {}, headers.map((x) => h('th', { class: /^(#|count|pending|ready|running|workers|tasks|hours|need)/i.test(x) ? 'num' : '' }, x)))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'nothing here'))));
}
function fail(error) { main.replaceChildren(h('p', { class: 'error', role: 'alert' }, error.message)); }

// --- overview -----------------------------------------------------------------------
function throughputChart(buckets, windowSeconds, bucketSeconds) {
  const n = Math.ceil(windowSeconds / bucketSeconds);
  const start = Date.now() - windowSeconds * 1000;
  const ok = new Array(n).fill(0), other = new Array(n).fill(0);
  for (const b of buckets) {
    const i = Math.min(n - 1, Math.max(0, Math.floor((new Date(b.bucket_start).getTime() - start) / (bucketSeconds * 1000))));
    (b.outcome === 'succeeded' ? ok : other)[i] += b.completed;
  }
  const max = Math.max(1, ...ok.map((v, i) => v + other[i]));
  const W = 600, H = 160, bw = W / n;
  const bars = [];
  for (let i = 0; i < n; i++) {
    const hOk = (ok[i] / max) * (H - 20), hOther = (other[i] / max) * (H - 20);
    if (ok[i]) bars.push(s('rect', { class: 'bar-succeeded', x: i * bw + 1, y: H - hOk, width: Math.max(1, bw - 2), height: hOk }, s('title', {}, `${ok[i]} succeeded`)));
    if (other[i]) bars.push(s('rect', { class: 'bar-other', x: i * bw + 1, y: H - hOk - hOther, width: Math.max(1, bw - 2), height: hOther }, s('title', {}, `${other[i]} failed/other`)));
  }
  return h('div', {},
    s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H + 14}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': 'completions per minute, last hour', 'data-testid': 'throughput-chart' },
      s('line', { x1: 0, y1: H, x2: W, y2: H, stroke: '#d9dee4' }), ...bars,
      s('text', { x: 0, y: H + 12 }, '-60 min'), s('text', { x: W - 24, y: H + 12 }, 'now'), s('text', { x: 0, y: 10 }, `max ${max}/min`)),
    h('div', { class: 'legend' }, h('span', {}, h('span', { class: 'swatch swatch-ok' }), 'succeeded'), h('span', {}, h('span', { class: 'swatch swatch-bad' }), 'failed, abandoned, cancelled')));
}

async function overview() {
  const [counts, throughput, capacity, types] = await Promise.all([
    api('/api/tasks/counts'), api('/api/tasks/throughput?window_seconds=3600&bucket_seconds=60'), api('/api/tasks/capacity'), api('/api/tasks/types'),
  ]);
  const countRows = types.task_types.map(({ task_type }) => {
    const c = counts.by_type[task_type] ?? {};
    return h('tr', { 'data-task-type': task_type }, h('td', {}, h('a', { href: `#/tasks?task_type=${task_type}` }, task_type)),
      STATES.map((st) => h('td', { class: 'num' }, c[st] ? h('a', { href: `#/tasks?task_type=${task_type}&state=${st}` }, c[st]) : '0')));
  });
  const capRows = capacity.capacity.map((c) => h('tr', {}, h('td', {}, c.task_type), h('td', { class: 'num' }, c.pending_tasks), h('td', { class: 'num' }, c.ready_tasks),
    h('td', { class: 'num' }, c.running_tasks), h('td', { class: 'num' }, c.active_workers), h('td', { class: 'num' }, num(c.tasks_per_worker_hour, 1)),
    h('td', { class: 'num' }, num(c.estimated_hours_to_drain, 2)), h('td', { class: 'num' }, `${num(c.workers_needed.for_1_hour)} / ${num(c.workers_needed.for_4_hours)} / ${num(c.workers_needed.for_8_hours)}`)));
  const recoverOut = h('span', { class: 'muted' });
  main.replaceChildren(
    h('h1', {}, 'Queue overview'),
    h('section', {}, h('h2', {}, 'Tasks by type and state'), h('p', { class: 'muted' }, `Pending states: now. Outcomes: last ${counts.window_seconds / 3600} h.`),
      table(['type', ...STATES], countRows, { 'data-testid': 'counts' })),
    h('section', {}, h('h2', {}, 'Throughput, last hour (completions per minute)'), throughputChart(throughput.buckets, throughput.window_seconds, throughput.bucket_seconds)),
    roleQueues(h, table, capacity.capacity),
    h('section', {}, h('h2', {}, 'Capacity'), table(['role', 'pending', 'ready', 'running', 'workers', 'tasks / worker-hour', 'hours to drain', 'needed 1h / 4h / 8h'], capRows, { 'data-testid': 'capacity' }),
      h('p', {}, h('button', { class: 'secondary', onclick: async () => {
        if (!token()) { recoverOut.replaceChildren(tokenForm(() => route())); return; }
        try { const r = await mutate('/api/tasks/recover-stale', {}); recoverOut.textContent = `recovered ${r.recovered.length} stale lease(s)`; } catch (e) { recoverOut.textContent = e.message; }
      } }, 'Recover stale leases'), ' ', recoverOut)),
  );
  refreshTimer = setTimeout(() => route(), 5000);
}

// --- tasks --------------------------------------------------------------------------
async function tasks(params) {
  const types = (await api('/api/tasks/types')).task_types;
  const q = new URLSearchParams();
  for (const k of ['task_type', 'state', 'before']) if (params.get(k)) q.set(k, params.get(k));
  const data = await api(`/api/tasks?${q}`);
  const typeSelect = h('select', { name: 'task_type' }, h('option', { value: '' }, 'any type'), types.map((t) => h('option', { value: t.task_type, selected: params.get('task_type') === t.task_type }, t.task_type)));
  const stateSelect = h('select', { name: 'state' }, h('option', { value: '' }, 'any state'), STATES.map((st) => h('option', { value: st, selected: params.get('state') === st }, st)));
  const filters = h('form', { class: 'inline', onsubmit: (e) => { e.preventDefault(); const p = new URLSearchParams(); if (typeSelect.value) p.set('task_type', typeSelect.value); if (stateSelect.value) p.set('state', stateSelect.value); location.hash = `#/tasks?${p}`; } },
    h('label', {}, 'type', typeSelect), h('label', {}, 'state', stateSelect), h('button', { type: 'submit' }, 'Filter'));
  const rows = data.tasks.map((t) => h('tr', { 'data-task-id': t.task_id }, h('td', {}, taskLink(t.task_id)), h('td', {}, t.task_type), h('td', {}, stateBadge(t.state)),
    h('td', { class: 'num' }, t.priority), h('td', {}, t.resource_key ?? ''), h('td', { class: 'num' }, t.lease_count), h('td', {}, fmtTime(t.enqueued_at)), h('td', {}, fmtTime(t.completed_at ?? t.available_at))));
  const next = new URLSearchParams(q);
  if (data.next_before) next.set('before', data.next_before);
  main.replaceChildren(h('h1', {}, 'Tasks'), h('section', {}, filters,
    table(['#', 'type', 'state', 'priority', 'resource key', 'leases', 'enqueued', 'completed / available'], rows, { 'data-testid': 'task-list' }),
    data.next_before ? h('p', {}, h('a', { href: `#/tasks?${next}` }, 'Older →')) : null));
  refreshTimer = setTimeout(() => route(), 5000);
}

async function taskPage(id) {
  const t = await api(`/api/tasks/${encodeURIComponent(id)}`);
  const task = t.task;
  const fields = [['type', task.task_type], ['state', stateBadge(task.state)], ['priority', task.priority], ['resource key', task.resource_key ?? '—'],
    ['max attempts', task.max_attempts], ['enqueued', fmtTime(task.enqueued_at)], ['scheduled', fmtTime(task.scheduled_at)]];
  if (t.redriven_from) fields.push(['redriven from', taskLink(t.redriven_from)]);
  if (t.redriven_to) fields.push(['redriven as', taskLink(t.redriven_to)]);
  main.replaceChildren(
    h('h1', {}, `Task #${task.task_id} `, stateBadge(task.state)),
    h('section', {}, h('table', { 'data-testid': 'task-fields' }, h('tbody', {}, fields.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v)))))),
    h('section', {}, h('h2', {}, 'Payload'), h('pre', { 'data-testid': 'payload' }, JSON.stringify(task.payload, null, 2))),
    h('section', {}, h('h2', {}, 'Leases'), table(['lease', 'worker', 'leased', 'expires', 'released / revoked', 'extensions', 'live'],
      t.leases.map((l) => h('tr', {}, h('td', {}, l.task_lease_id), h('td', {}, l.worker_id), h('td', {}, fmtTime(l.leased_at)), h('td', {}, fmtTime(l.expires_at)),
        h('td', {}, fmtTime(l.released_at ?? l.revoked_at)), h('td', { class: 'num' }, l.extensions), h('td', {}, l.live ? 'yes' : ''))), { 'data-testid': 'leases' })),
    h('section', {}, h('h2', {}, 'Errors'), table(['at', 'lease', 'message'], t.errors.map((e) => h('tr', {}, h('td', {}, fmtTime(e.created_at)), h('td', {}, e.task_lease_id ?? ''), h('td', {}, h('pre', {}, e.error_message)))), { 'data-testid': 'errors' })),
    t.failed_attempts.length ? h('section', {}, h('h2', {}, 'Failed attempts (retried)'), table(['failed', 'retry at', 'lease'], t.failed_attempts.map((f) => h('tr', {}, h('td', {}, fmtTime(f.failed_at)), h('td', {}, fmtTime(f.retry_at)), h('td', {}, f.task_lease_id ?? ''))))) : null,
    taskResults(h, table, t.results ?? []),
    h('section', {}, h('h2', {}, 'Completion'), t.completion ? h('p', { 'data-testid': 'completion' }, stateBadge(t.completion.outcome), ' at ', fmtTime(t.completion.completed_at)) : h('p', { class: 'muted', 'data-testid': 'completion' }, 'not completed')),
  );
  if (!t.completion) refreshTimer = setTimeout(() => route(), 3000);
}

// --- dead letters -------------------------------------------------------------------
async function deadLetters(params) {
  const q = new URLSearchParams();
  if (params.get('before')) q.set('before', params.get('before'));
  const data = await api(`/api/dead-letters?${q}`);
  const note = h('p', { 'data-testid': 'redrive-result' });
  const rows = data.dead_letters.map((d) => h('tr', { 'data-task-id': d.task_id }, h('td', {}, taskLink(d.task_id)), h('td', {}, d.task_type), h('td', {}, stateBadge(d.outcome)),
    h('td', { class: 'num' }, d.attempts), h('td', {}, fmtTime(d.completed_at)), h('td', {}, d.last_error ?? ''),
    h('td', {}, h('button', { type: 'button', 'data-testid': `redrive-${d.task_id}`, disabled: !token(), onclick: async (e) => {
      e.target.disabled = true;
      try {
        const r = await mutate(`/api/dead-letters/${d.task_id}/redrive`);
        note.replaceChildren(h('span', { class: 'ok' }, `Task #${d.task_id} redriven as `), taskLink(r.new_task_id));
        e.target.closest('tr').remove();
      } catch (err) { note.replaceChildren(h('span', { class: 'error' }, err.message)); e.target.disabled = false; }
    } }, 'Redrive'))));
  main.replaceChildren(h('h1', {}, 'Dead letters'),
    token() ? null : tokenForm(() => route()),
    note,
    h('section', {}, table(['#', 'type', 'outcome', 'attempts', 'completed', 'last error', ''], rows, { 'data-testid': 'dead-letters' }),
      data.next_before ? h('p', {}, h('a', { href: `#/dead-letters?before=${data.next_before}` }, 'Older →')) : null));
}

// --- processes ----------------------------------------------------------------------
async function processes(params) {
  const names = (await api('/api/processes')).processes;
  const current = params.get('process') ?? names[0];
  const roots = current ? (await api(`/api/processes/${encodeURIComponent(current)}`)).roots : [];
  main.replaceChildren(h('h1', {}, 'Processes'),
    h('p', {}, names.map((n) => [h('a', { href: `#/processes?process=${n}`, class: n === current ? 'current' : '' }, n), ' '])),
    h('section', {}, table(['root', 'started', 'status', 'subject'], roots.map((r) => h('tr', {}, h('td', {}, h('a', { href: `#/process/${current}/${r.root_id}` }, `${current} #${r.root_id}`)),
      h('td', {}, fmtTime(r.created_at)), h('td', {}, stateBadge(r.status)), h('td', {}, h('code', {}, JSON.stringify(r.subject))))), { 'data-testid': 'process-roots' })));
}

async function processPage(name, id) {
  const data = await api(`/api/processes/${encodeURIComponent(name)}/${encodeURIComponent(id)}`);
  const facts = [...data.timeline].sort((a, b) => new Date(a.at) - new Date(b.at));
  main.replaceChildren(h('h1', {}, `${name} #${id}`),
    h('section', {}, h('h2', {}, 'Fact timeline'), table(['at', 'process', 'fact', 'attempt', 'detail'], facts.map((f) => h('tr', {},
      h('td', {}, fmtTime(f.at)), h('td', {}, `${f.process} #${f.root_id}`), h('td', {}, stateBadge(f.fact)), h('td', {}, f.attempt_id ?? ''),
      h('td', {}, Object.keys(f.detail ?? {}).length ? h('code', {}, JSON.stringify(f.detail)) : ''))), { 'data-testid': 'timeline' })));
  refreshTimer = setTimeout(() => route(), 5000);
}

// --- router -------------------------------------------------------------------------
async function route() {
  clearTimeout(refreshTimer);
  const [path, query = ''] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(query);
  const parts = (path || '/').split('/').filter(Boolean);
  try {
    if (parts.length === 0) await overview();
    else if (parts[0] === 'tasks') await tasks(params);
    else if (parts[0] === 'task' && parts[1]) await taskPage(parts[1]);
    else if (parts[0] === 'dead-letters') await deadLetters(params);
    else if (parts[0] === 'processes') await processes(params);
    else if (parts[0] === 'process' && parts[1] && parts[2]) await processPage(parts[1], parts[2]);
    else main.replaceChildren(h('p', {}, 'No such page. ', h('a', { href: '#/' }, 'Overview')));
  } catch (error) { fail(error); }
}
window.addEventListener('hashchange', route);
showTokenStatus();
route();
