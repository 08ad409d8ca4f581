// The operations dashboard: plain ES modules, no build step, nothing loaded from outside
// this server (the Content-Security-Policy allows only this origin). Hash routes:
//   #/ overview · #/tasks · #/task/<id> · #/dead-letters · #/queues · #/workers ·
//   #/schedules · #/processes · #/process/<name>/<root id> · #/history · #/audit
// Every read and change carries the credential given at the login screen (kept in this
// tab's sessionStorage only); GET /api/session says who that is and whether they may change.
// Data is rendered with textContent only. Pages refresh their data in place by short
// polling (REFRESH_MS) while the tab is visible, keeping selections and form input.
const main = document.getElementById('main');
const STATES = [
  'scheduled',
  'ready',
  'running',
  'retrying',
  'succeeded',
  'failed',
  'abandoned',
  'cancelled',
  'validation_failed',
];
const PENDING = ['scheduled', 'ready', 'running', 'retrying'];
const TOKEN_KEY = 'queue-api-token';
const USER_KEY = 'queue-api-user';
const REFRESH_MS = 2000;
/** Pages that read the whole claim index (overview, queues, workers: cost follows pending work) refresh this often. */
const PENDING_REFRESH_MS = 5000;
/** The overview's windows (24 h outcomes, the hour's charts, capacity) refresh this often. */
const WINDOW_REFRESH_MS = 60_000;
/** Pages whose reads grow with what they show (process trees, schedules) refresh this often. */
const SLOW_REFRESH_MS = 10_000;
const PALETTE = ['#2b6cb0', '#c05621', '#2f855a', '#6b46c1', '#b83280', '#2c7a7b', '#975a16', '#4a5568', '#c53030'];

/** Builds an element: h('a', {href: '#/'}, 'text', child, [children], ...). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElementNS(
    tag === 'svg' || attrs.svg ? 'http://www.w3.org/2000/svg' : 'http://www.w3.org/1999/xhtml',
    tag,
  );
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'svg' || v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  // Children may be nested lists (a map that returns [link, ' '] pairs): flatten fully,
  // so a node is appended as a node and never stringified.
  for (const c of children.flat(Infinity))
    if (c !== null && c !== undefined && c !== false)
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const s = (tag, attrs = {}, ...children) => h(tag, { ...attrs, svg: true }, ...children);
/** Replaces el's children; nested lists are flattened and null, undefined and false left out. */
function put(el, ...children) {
  el.replaceChildren(
    ...children
      .flat(Infinity)
      .filter((c) => c !== null && c !== undefined && c !== false)
      .map((c) => (c instanceof Node ? c : String(c))),
  );
}

// --- credentials -----------------------------------------------------------------------
function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}
/** The Authorization header for the credential of this tab: Basic with a name, else Bearer. */
function authorization() {
  const t = token();
  if (!t) return null;
  const name = sessionStorage.getItem(USER_KEY);
  if (!name) return `Bearer ${t}`;
  const bytes = new TextEncoder().encode(`${name}:${t}`);
  return `Basic ${btoa(String.fromCharCode(...bytes))}`;
}
function forget() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(USER_KEY);
}

async function api(path, options = {}) {
  const auth = authorization();
  const headers = { ...(options.headers ?? {}), ...(auth ? { authorization: auth } : {}) };
  // Relative to the page (no leading slash), so the dashboard works under a path prefix
  // behind a reverse proxy (https://host/queue/ serving this server's /).
  const res = await fetch(path.replace(/^\//, ''), { ...options, headers });
  const body = res.headers.get('content-type')?.includes('json') ? await res.json() : await res.text();
  if (res.status === 401 && path !== '/api/session') {
    // The credential was refused (or is needed): back to the login.
    forget();
    session = null;
    boot('The credential was refused: log in again.');
  }
  if (!res.ok) throw Object.assign(new Error(body?.message ?? `HTTP ${res.status}`), { status: res.status });
  return body;
}

// --- access: who is logged in, and what they may do -------------------------------------
/** GET /api/session: {user, level, can_change, open_reads}; null until known or when a login is needed. */
let session = null;
const canWrite = () => Boolean(session?.can_change);
const READ_ONLY_TITLE = 'Read-only: changes need an operator (log in at the top of the page)';

/** The name and token fields and their form; `onDone` runs after a login that worked. */
function loginForm({ testid, inputTestid, nameTestid, button, error }) {
  const name = h('input', {
    name: 'user',
    placeholder: 'name (optional)',
    autocomplete: 'username',
    size: 14,
    'data-testid': nameTestid,
    'aria-label': 'user name',
  });
  const input = h('input', {
    type: 'password',
    name: 'token',
    placeholder: 'API token',
    autocomplete: 'off',
    'data-testid': inputTestid,
    'aria-label': 'API token',
  });
  return h(
    'form',
    {
      class: 'inline',
      'data-testid': testid,
      onsubmit: async (e) => {
        e.preventDefault();
        if (!input.value.trim()) return;
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        if (name.value.trim()) sessionStorage.setItem(USER_KEY, name.value.trim());
        else sessionStorage.removeItem(USER_KEY);
        input.value = '';
        const ok = await loadSession();
        if (!ok) {
          forget();
          await loadSession();
          put(error, 'The name or token was refused.');
          return;
        }
        showAccess();
        route();
      },
    },
    h('label', {}, 'name', name),
    h('label', {}, 'token', input),
    h('button', { type: 'submit' }, button),
  );
}

function showAccess() {
  const el = document.getElementById('access');
  if (!session) {
    el.className = 'access locked';
    put(el, h('span', { 'data-testid': 'access-state' }, 'Not logged in.'));
    return;
  }
  if (session.user) {
    el.className = `access ${session.can_change ? 'unlocked' : 'locked'}`;
    put(
      el,
      h(
        'span',
        { 'data-testid': 'access-state' },
        'Logged in as ',
        h('strong', { 'data-testid': 'access-user' }, session.user),
        ' (',
        h('span', { 'data-testid': 'access-level' }, session.level),
        session.can_change
          ? '). Actions enabled: the credential is kept in this tab only. '
          : '). Read-only: actions are disabled. ',
      ),
      h(
        'a',
        {
          href: '#',
          'data-testid': 'forget-token',
          onclick: async (e) => {
            e.preventDefault();
            forget();
            await boot();
          },
        },
        'Log out',
      ),
    );
    return;
  }
  // Reads are open and nobody is logged in.
  const error = h('span', { class: 'error', role: 'alert', 'data-testid': 'token-error' });
  el.className = 'access locked';
  put(
    el,
    h(
      'span',
      { 'data-testid': 'access-state' },
      h('strong', {}, 'Read-only. '),
      "Cancel, pause, redrive and the other actions need an operator's API token: ",
      h('code', {}, 'npm start'),
      ' prints it; a deployment sets it as ',
      h('code', {}, 'API_TOKEN'),
      ' or in ',
      h('code', {}, 'API_USERS'),
      '.',
    ),
    loginForm({
      testid: 'token-form',
      inputTestid: 'token-input',
      nameTestid: 'token-user',
      button: 'Unlock',
      error,
    }),
    error,
  );
}

/** Reads GET /api/session with this tab's credential; false when it is refused (401). */
async function loadSession() {
  try {
    session = await api('/api/session');
    return true;
  } catch (error) {
    session = null;
    if (error.status === 401) return false;
    throw error;
  }
}

/** The login screen, shown instead of a page while a credential is needed. */
function showLogin(message) {
  generation++;
  showAccess();
  const error = h('p', { class: 'error', role: 'alert', 'data-testid': 'login-error' }, message ?? '');
  put(
    main,
    h('h1', {}, 'Log in'),
    section(
      null,
      h(
        'p',
        {},
        'This dashboard needs an API credential: a token, with its user name or without. ',
        h('code', {}, 'npm start'),
        ' prints the local ones; a deployment sets them in ',
        h('code', {}, 'API_USERS'),
        ' (or ',
        h('code', {}, 'API_TOKEN'),
        ' for one operator). It is kept in this tab only.',
      ),
      loginForm({
        testid: 'login-form',
        inputTestid: 'login-token',
        nameTestid: 'login-name',
        button: 'Log in',
        error,
      }),
      error,
    ),
  );
}

/** Asks who this tab is; shows the login when needed, else the page. */
async function boot(message) {
  try {
    if (!(await loadSession())) {
      if (token()) {
        forget();
        return boot('The credential was refused: log in again.');
      }
      return showLogin(message);
    }
  } catch (error) {
    return fail(error);
  }
  showAccess();
  return route();
}

async function mutate(path, body) {
  return api(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body ?? {}),
  });
}

/** A button for a mutation: disabled while read-only; runs `action`, shows its outcome in `out`. */
function actionButton(label, attrs, action, out) {
  return h(
    'button',
    {
      type: 'button',
      ...attrs,
      disabled: !canWrite() || attrs.disabled,
      title: canWrite() ? attrs.title : READ_ONLY_TITLE,
      onclick: async (e) => {
        const button = e.currentTarget;
        button.disabled = true;
        try {
          const message = await action();
          if (out && message) put(out, message);
        } catch (err) {
          if (out) put(out, h('span', { class: 'error', role: 'alert' }, err.message));
        } finally {
          button.disabled = !canWrite();
        }
      },
    },
    label,
  );
}

// --- formatting ------------------------------------------------------------------------
const pad = (n, w = 2) => String(n).padStart(w, '0');
/** Local time with milliseconds: 2026-11-23 18:53:41.123. */
function fmtTime(v) {
  if (!v) return '';
  const d = new Date(v);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}
const timeCell = (v) => h('td', { class: 'time', title: v ?? '' }, fmtTime(v));
function fmtAge(seconds) {
  if (seconds === null || seconds === undefined) return '';
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}
const stateBadge = (state) => h('span', { class: `state state-${state}` }, state);
const taskLink = (id) => h('a', { href: `#/task/${id}` }, `#${id}`);
const num = (v, digits = 0) => (v === null || v === undefined ? '—' : Number(v).toFixed(digits));
const json = (v) => JSON.stringify(v, null, 2);
function table(headers, rows, attrs = {}) {
  return h(
    'table',
    attrs,
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headers.map((x) =>
          h(
            'th',
            {
              class:
                /^(#|count|pending|ready|running|retrying|scheduled|workers|tasks|hours|need|in flight|attempts|depth|bytes)/i.test(
                  x,
                )
                  ? 'num'
                  : '',
            },
            x,
          ),
        ),
      ),
    ),
    h(
      'tbody',
      {},
      rows.length ? rows : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'nothing here')),
    ),
  );
}
function fail(error) {
  put(main, h('p', { class: 'error', role: 'alert' }, error.message));
}
const section = (title, ...children) => h('section', {}, title ? h('h2', {}, title) : null, ...children);

// --- live refresh ----------------------------------------------------------------------
let generation = 0;
/**
 * Calls `refresh` now and every REFRESH_MS while this page is shown and the tab is
 * visible. A refresh updates parts of the page in place.
 */
async function live(refresh, everyMs = REFRESH_MS) {
  const mine = generation;
  const stamp = document.getElementById('updated');
  const tick = async () => {
    if (mine !== generation) return;
    if (document.visibilityState !== 'hidden') {
      try {
        await refresh();
        stamp.textContent = `updated ${fmtTime(new Date())}`;
        stamp.className = '';
      } catch (error) {
        stamp.textContent = `refresh failed: ${error.message}`;
        stamp.className = 'error';
      }
    }
    if (mine === generation) setTimeout(tick, everyMs);
  };
  // The first load's failure is the page's (shown by the router); later ones are shown
  // beside the "updated" time and retried.
  await refresh();
  stamp.textContent = `updated ${fmtTime(new Date())}`;
  stamp.className = '';
  setTimeout(tick, everyMs);
}

/**
 * The paused task types, shown in the header on every page. Pages that read the queues
 * anyway pass them; the others read them at most every PAUSED_REFRESH_MS (a read of the
 * claim index).
 */
const PAUSED_REFRESH_MS = 30_000;
let pausedCache = { at: 0, queues: null };
async function showPaused(queues) {
  if (!queues && pausedCache.queues && Date.now() - pausedCache.at < PAUSED_REFRESH_MS) queues = pausedCache.queues;
  const list = queues ?? (await api('/api/queues')).queues;
  if (list !== pausedCache.queues) pausedCache = { at: Date.now(), queues: list };
  const paused = list.filter((q) => q.paused);
  const el = document.getElementById('paused');
  put(
    el,
    ...(paused.length
      ? [
          h(
            'a',
            { href: '#/queues', 'data-testid': 'paused-banner' },
            `Paused: ${paused.map((q) => q.task_type).join(', ')}`,
          ),
        ]
      : []),
  );
  return list;
}

// --- overview --------------------------------------------------------------------------
function throughputChart(buckets, windowSeconds, bucketSeconds) {
  const n = Math.ceil(windowSeconds / bucketSeconds);
  const start = Date.now() - windowSeconds * 1000;
  const ok = new Array(n).fill(0),
    other = new Array(n).fill(0);
  for (const b of buckets) {
    const i = Math.min(
      n - 1,
      Math.max(0, Math.floor((new Date(b.bucket_start).getTime() - start) / (bucketSeconds * 1000))),
    );
    (b.outcome === 'succeeded' ? ok : other)[i] += b.completed;
  }
  const max = Math.max(1, ...ok.map((v, i) => v + other[i]));
  const W = 600,
    H = 140,
    bw = W / n;
  const bars = [];
  for (let i = 0; i < n; i++) {
    const hOk = (ok[i] / max) * (H - 20),
      hOther = (other[i] / max) * (H - 20);
    if (ok[i])
      bars.push(
        s(
          'rect',
          { class: 'bar-succeeded', x: i * bw + 1, y: H - hOk, width: Math.max(1, bw - 2), height: hOk },
          s('title', {}, `${ok[i]} succeeded`),
        ),
      );
    if (other[i])
      bars.push(
        s(
          'rect',
          { class: 'bar-other', x: i * bw + 1, y: H - hOk - hOther, width: Math.max(1, bw - 2), height: hOther },
          s('title', {}, `${other[i]} failed/abandoned/cancelled/validation_failed`),
        ),
      );
  }
  return h(
    'div',
    {},
    s(
      'svg',
      {
        class: 'chart',
        viewBox: `0 0 ${W} ${H + 14}`,
        preserveAspectRatio: 'none',
        role: 'img',
        'aria-label': 'completions per minute, last hour',
        'data-testid': 'throughput-chart',
      },
      s('line', { x1: 0, y1: H, x2: W, y2: H, stroke: '#d9dee4' }),
      ...bars,
      s('text', { x: 0, y: H + 12 }, '-60 min'),
      s('text', { x: W - 24, y: H + 12 }, 'now'),
      s('text', { x: 0, y: 10 }, `max ${max}/min`),
    ),
    h(
      'div',
      { class: 'legend' },
      h('span', {}, h('span', { class: 'swatch swatch-ok' }), 'succeeded'),
      h('span', {}, h('span', { class: 'swatch swatch-bad' }), 'failed, abandoned, cancelled, validation failed'),
    ),
  );
}

function depthChart(buckets) {
  const byType = new Map();
  for (const b of buckets) {
    if (!byType.has(b.task_type)) byType.set(b.task_type, []);
    byType.get(b.task_type).push(b);
  }
  const series = [...byType.entries()].filter(([, points]) => points.some((p) => p.depth > 0));
  const W = 600,
    H = 140;
  const max = Math.max(1, ...series.flatMap(([, points]) => points.map((p) => p.depth)));
  const lines = series.map(([type, points], k) => {
    const step = W / Math.max(1, points.length - 1);
    const d = points.map((p, i) => `${(i * step).toFixed(1)},${(H - (p.depth / max) * (H - 16)).toFixed(1)}`).join(' ');
    return s(
      'polyline',
      { points: d, fill: 'none', stroke: PALETTE[k % PALETTE.length], 'stroke-width': 2 },
      s('title', {}, `${type}: ${points.at(-1).depth} pending now`),
    );
  });
  return h(
    'div',
    {},
    s(
      'svg',
      {
        class: 'chart',
        viewBox: `0 0 ${W} ${H + 14}`,
        preserveAspectRatio: 'none',
        role: 'img',
        'aria-label': 'pending tasks per type, last hour',
        'data-testid': 'depth-chart',
      },
      s('line', { x1: 0, y1: H, x2: W, y2: H, stroke: '#d9dee4' }),
      ...lines,
      s('text', { x: 0, y: H + 12 }, '-60 min'),
      s('text', { x: W - 24, y: H + 12 }, 'now'),
      s('text', { x: 0, y: 10 }, `max ${max}`),
    ),
    h(
      'div',
      { class: 'legend' },
      series.length
        ? series.map(([type, points], k) =>
            h(
              'span',
              {},
              h(
                'span',
                { class: 'swatch', 'data-color': k },
                s(
                  'svg',
                  { width: 12, height: 12 },
                  s('rect', { width: 12, height: 12, fill: PALETTE[k % PALETTE.length] }),
                ),
              ),
              `${type} (${points.at(-1).depth})`,
            ),
          )
        : h('span', { class: 'muted' }, 'no pending tasks in the last hour'),
    ),
  );
}

async function overview() {
  const counts = h('div'),
    throughput = h('div'),
    perType = h('div'),
    depth = h('div'),
    capacity = h('div'),
    replica = h('p', { class: 'muted', 'data-testid': 'replica-lag' });
  const recoverOut = h('span', { class: 'muted' });
  put(
    main,
    h('h1', {}, 'Queue overview'),
    replica,
    section(
      'Tasks by type and state',
      h(
        'p',
        { class: 'muted' },
        'Pending states: now (every 5 s). Outcomes: last 24 h (every minute). Paused types are marked.',
      ),
      counts,
    ),
    h(
      'div',
      { class: 'grid2' },
      section('Throughput, last hour (completions per minute)', throughput),
      section('Queue depth, last hour (pending tasks per type)', depth),
    ),
    section('Completions in the last hour by type and outcome', perType),
    section(
      'Worker roles: capacity per task type',
      capacity,
      h(
        'p',
        {},
        actionButton(
          'Recover stale leases',
          { class: 'secondary' },
          async () => {
            const r = await mutate('/api/tasks/recover-stale', {});
            return `recovered ${r.recovered.length} stale lease(s)`;
          },
          recoverOut,
        ),
        ' ',
        recoverOut,
      ),
    ),
  );
  // Every PENDING_REFRESH_MS: pending work by type and state, and pauses (one read of the
  // claim index). Every WINDOW_REFRESH_MS: the windows (outcomes over 24 h, the hour's
  // throughput and depth, capacity), which read recent completions; their per-minute
  // charts change once a minute.
  let full;
  let fullAt = 0;
  await live(async () => {
    const [live_, fresh] = await Promise.all([
      api('/api/overview/live'),
      Date.now() - fullAt >= WINDOW_REFRESH_MS ? api('/api/overview') : null,
    ]);
    if (fresh) {
      full = fresh;
      fullAt = Date.now();
    }
    const queues = live_.queues;
    showPaused(queues);
    put(
      replica,
      live_.replica_lag_seconds === null
        ? ''
        : `Read from a replica, ${live_.replica_lag_seconds.toFixed(1)} s behind the primary (changes go to the primary).`,
    );
    const outcomes = {};
    for (const c of full.counts) if (!PENDING.includes(c.state)) (outcomes[c.task_type] ??= {})[c.state] = c.count;
    put(
      counts,
      table(
        ['type', ...STATES],
        queues.map((q) => {
          const c = {
            ...outcomes[q.task_type],
            scheduled: q.scheduled,
            ready: q.ready,
            running: q.running,
            retrying: q.retrying,
          };
          return h(
            'tr',
            { 'data-task-type': q.task_type },
            h(
              'td',
              {},
              h('a', { href: `#/tasks?task_type=${q.task_type}` }, q.task_type),
              q.paused ? [' ', h('span', { class: 'state state-paused' }, 'paused')] : null,
            ),
            STATES.map((st) =>
              h(
                'td',
                { class: 'num' },
                c[st] ? h('a', { href: `#/tasks?task_type=${q.task_type}&state=${st}` }, c[st]) : '0',
              ),
            ),
          );
        }),
        { 'data-testid': 'counts' },
      ),
    );
    // The depth chart ends at the pending work now.
    const pendingNow = new Map(queues.map((q) => [q.task_type, q.scheduled + q.ready + q.running + q.retrying]));
    const lastEnd = full.depth.at(-1)?.bucket_end;
    const depthNow = full.depth.map((b) =>
      b.bucket_end === lastEnd && pendingNow.has(b.task_type) ? { ...b, depth: pendingNow.get(b.task_type) } : b,
    );
    if (!fresh) {
      put(depth, depthChart(depthNow));
      return;
    }
    put(throughput, throughputChart(full.throughput, 3600, 60));
    put(depth, depthChart(depthNow));
    const totals = new Map();
    for (const b of full.throughput) {
      const t = totals.get(b.task_type) ?? {};
      t[b.outcome] = (t[b.outcome] ?? 0) + b.completed;
      totals.set(b.task_type, t);
    }
    put(
      perType,
      table(
        ['type', 'succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed'],
        [...totals.entries()].map(([type, t]) =>
          h(
            'tr',
            {},
            h('td', {}, type),
            ['succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed'].map((k) =>
              h('td', { class: 'num' }, t[k] ?? 0),
            ),
          ),
        ),
        { 'data-testid': 'throughput-by-type' },
      ),
    );
    put(
      capacity,
      table(
        [
          'role',
          'pending',
          'ready',
          'running',
          'workers',
          'tasks / worker-hour',
          'hours to drain',
          'needed 1h / 4h / 8h',
        ],
        full.capacity.map((c) =>
          h(
            'tr',
            {},
            h('td', {}, c.task_type),
            h('td', { class: 'num' }, c.pending_tasks),
            h('td', { class: 'num' }, c.ready_tasks),
            h('td', { class: 'num' }, c.running_tasks),
            h('td', { class: 'num' }, c.active_workers),
            h('td', { class: 'num' }, num(c.tasks_per_worker_hour, 1)),
            h('td', { class: 'num' }, num(c.estimated_hours_to_drain, 2)),
            h(
              'td',
              { class: 'num' },
              `${num(c.workers_needed.for_1_hour)} / ${num(c.workers_needed.for_4_hours)} / ${num(c.workers_needed.for_8_hours)}`,
            ),
          ),
        ),
        { 'data-testid': 'capacity' },
      ),
    );
  }, PENDING_REFRESH_MS);
}

// --- tasks -----------------------------------------------------------------------------
const FILTERS = [
  'task_type',
  'state',
  'worker_id',
  'resource_key',
  'enqueued_from',
  'enqueued_to',
  'payload_path',
  'payload_value',
];
const selected = new Set();

/** A datetime-local input value (local time) to ISO 8601 with the zone, and back. */
const localToIso = (v) => (v ? new Date(v).toISOString() : '');
function isoToLocal(v) {
  if (!v) return '';
  const d = new Date(v);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

async function tasks(params) {
  const [types] = await Promise.all([api('/api/tasks/types'), showPaused()]);
  const q = new URLSearchParams();
  for (const k of [...FILTERS, 'before']) if (params.get(k)) q.set(k, params.get(k));
  const field = (name, label, el) => h('label', {}, label, el);
  const typeSelect = h(
    'select',
    { name: 'task_type' },
    h('option', { value: '' }, 'any type'),
    types.task_types.map((t) =>
      h('option', { value: t.task_type, selected: params.get('task_type') === t.task_type }, t.task_type),
    ),
  );
  const stateSelect = h(
    'select',
    { name: 'state' },
    h('option', { value: '' }, 'any state'),
    STATES.map((st) => h('option', { value: st, selected: params.get('state') === st }, st)),
  );
  const text = (name, placeholder) => h('input', { name, value: params.get(name) ?? '', placeholder, size: 14 });
  const inputs = {
    worker_id: text('worker_id', 'worker id'),
    resource_key: text('resource_key', 'resource key'),
    enqueued_from: h('input', {
      type: 'datetime-local',
      name: 'enqueued_from',
      value: isoToLocal(params.get('enqueued_from')),
    }),
    enqueued_to: h('input', {
      type: 'datetime-local',
      name: 'enqueued_to',
      value: isoToLocal(params.get('enqueued_to')),
    }),
    payload_path: text('payload_path', 'e.g. send_email_task_id'),
    payload_value: text('payload_value', 'JSON or text'),
  };
  // Searching payloads by value is for operators only (the API answers 403 to others).
  if (!canWrite())
    for (const k of ['payload_path', 'payload_value']) {
      inputs[k].disabled = true;
      inputs[k].title = 'Payload search by value needs an operator';
    }
  const filters = h(
    'form',
    {
      class: 'inline',
      'data-testid': 'task-filters',
      onsubmit: (e) => {
        e.preventDefault();
        const p = new URLSearchParams();
        if (typeSelect.value) p.set('task_type', typeSelect.value);
        if (stateSelect.value) p.set('state', stateSelect.value);
        for (const [k, el] of Object.entries(inputs)) {
          const v = k.startsWith('enqueued_') ? localToIso(el.value) : el.value.trim();
          if (v) p.set(k, v);
        }
        selected.clear();
        location.hash = `#/tasks?${p}`;
      },
    },
    field('task_type', 'type', typeSelect),
    field('state', 'state', stateSelect),
    field('worker_id', 'worker', inputs.worker_id),
    field('resource_key', 'resource key', inputs.resource_key),
    field('enqueued_from', 'enqueued from', inputs.enqueued_from),
    field('enqueued_to', 'enqueued before', inputs.enqueued_to),
    field('payload_path', 'payload field', inputs.payload_path),
    field('payload_value', 'equals', inputs.payload_value),
    h('button', { type: 'submit' }, 'Filter'),
    h('a', { href: '#/tasks', class: 'button-link' }, 'Clear'),
  );
  const idInput = h('input', {
    name: 'task_id',
    placeholder: 'task id',
    inputmode: 'numeric',
    size: 10,
    'data-testid': 'lookup-input',
  });
  const lookup = h(
    'form',
    {
      class: 'inline',
      'data-testid': 'lookup-form',
      onsubmit: (e) => {
        e.preventDefault();
        const v = idInput.value.trim().replace(/^#/, '');
        if (/^\d+$/.test(v)) location.hash = `#/task/${v}`;
      },
    },
    h('label', {}, 'look up by id', idInput),
    h('button', { type: 'submit', class: 'secondary' }, 'Open'),
  );

  const out = h('p', { 'data-testid': 'action-result', role: 'status' });
  const selCount = h('span', { class: 'muted', 'data-testid': 'selection-count' });
  const list = h('div');
  const older = h('p');
  const state = params.get('state');
  let current = [];
  const updateSelection = () => {
    selCount.textContent = `${selected.size} selected`;
  };
  const results = (verb, r, ok) =>
    `${verb}: ${r.results.filter((x) => x.result === ok).length} of ${r.results.length} (${[...new Set(r.results.map((x) => x.result))].join(', ')})`;
  const bulk = h(
    'div',
    { class: 'actions', 'data-testid': 'bulk-actions' },
    selCount,
    actionButton(
      'Cancel selected',
      { 'data-testid': 'cancel-selected' },
      async () => {
        if (!selected.size) return 'select pending tasks first';
        const r = await mutate('/api/tasks/cancel', {
          task_ids: [...selected],
          reason: 'cancelled from the dashboard',
        });
        selected.clear();
        await refresh();
        return results('cancelled', r, 'cancelled');
      },
      out,
    ),
    actionButton(
      'Run selected now',
      { 'data-testid': 'run-now-selected' },
      async () => {
        if (!selected.size) return 'select scheduled tasks first';
        const r = await mutate('/api/tasks/run-now', { task_ids: [...selected] });
        selected.clear();
        await refresh();
        return results('run now', r, 'run_now');
      },
      out,
    ),
    actionButton(
      'Redrive selected',
      { 'data-testid': 'redrive-selected' },
      async () => {
        if (!selected.size) return 'select dead letters first';
        const r = await mutate('/api/dead-letters/redrive', { task_ids: [...selected] });
        selected.clear();
        await refresh();
        return results('redriven', r, 'redriven');
      },
      out,
    ),
    ['scheduled', 'ready', 'retrying', null].includes(state ?? null) &&
      !params.get('worker_id') &&
      !params.get('resource_key') &&
      !params.get('payload_path') &&
      !params.get('enqueued_from') &&
      !params.get('enqueued_to')
      ? actionButton(
          `Cancel all matching ${params.get('task_type') ?? 'any type'} / ${state ?? 'scheduled, ready, retrying'} (up to 1000)`,
          { class: 'danger', 'data-testid': 'cancel-matching' },
          async () => {
            if (!confirm('Cancel every matching pending task (up to 1000)?')) return null;
            const filter = {};
            if (params.get('task_type')) filter.task_type = params.get('task_type');
            if (state) filter.state = state;
            const r = await mutate('/api/tasks/cancel', {
              filter,
              limit: 1000,
              reason: 'cancelled by filter from the dashboard',
            });
            await refresh();
            return results('cancelled', r, 'cancelled');
          },
          out,
        )
      : null,
  );

  async function refresh() {
    const data = await api(`/api/tasks?${q}`);
    current = data.tasks;
    const all = h('input', {
      type: 'checkbox',
      'aria-label': 'select all on this page',
      checked: current.length > 0 && current.every((t) => selected.has(t.task_id)),
      onchange: (e) => {
        for (const t of current) {
          if (e.target.checked) selected.add(t.task_id);
          else selected.delete(t.task_id);
        }
        list.querySelectorAll('input[data-select]').forEach((c) => {
          c.checked = e.target.checked;
        });
        updateSelection();
      },
    });
    const rows = current.map((t) =>
      h(
        'tr',
        { 'data-task-id': t.task_id },
        h(
          'td',
          {},
          h('input', {
            type: 'checkbox',
            'data-select': t.task_id,
            'aria-label': `select task ${t.task_id}`,
            checked: selected.has(t.task_id),
            onchange: (e) => {
              if (e.target.checked) selected.add(t.task_id);
              else selected.delete(t.task_id);
              updateSelection();
            },
          }),
        ),
        h('td', {}, taskLink(t.task_id)),
        h('td', {}, t.task_type),
        h('td', {}, stateBadge(t.state)),
        h('td', { class: 'num' }, t.priority),
        h('td', {}, t.resource_key ?? ''),
        h('td', { class: 'num' }, t.lease_count),
        timeCell(t.enqueued_at),
        timeCell(t.completed_at ?? t.available_at),
      ),
    );
    put(
      list,
      h(
        'table',
        { 'data-testid': 'task-list' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            h('th', {}, all),
            ...['#', 'type', 'state', 'priority', 'resource key', 'leases', 'enqueued', 'completed / available'].map(
              (x) => h('th', { class: x === 'leases' || x === 'priority' ? 'num' : '' }, x),
            ),
          ),
        ),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 9, class: 'muted' }, 'no task matches'))),
      ),
    );
    const next = new URLSearchParams(q);
    if (data.next_before) next.set('before', data.next_before);
    const newest = new URLSearchParams(q);
    newest.delete('before');
    put(
      older,
      h(
        'span',
        {},
        q.get('before') ? [h('a', { href: `#/tasks?${newest}` }, '← Newest'), ' '] : null,
        data.next_before ? h('a', { href: `#/tasks?${next}`, 'data-testid': 'older' }, 'Older →') : null,
      ),
    );
    updateSelection();
  }
  put(main, h('h1', {}, 'Tasks'), section(null, filters, lookup), section(null, bulk, out, list, older));
  // Filters that walk tasks newest first until a page matches (worker, time range, payload
  // field) may read far more rows than they show: those pages refresh every 30 s.
  const walking = ['worker_id', 'enqueued_from', 'enqueued_to', 'payload_path'].some((k) => params.get(k));
  await live(refresh, walking ? 30_000 : REFRESH_MS);
}

// --- one task --------------------------------------------------------------------------
/** How a lease ended, from the task's facts. */
function leaseEnd(l, t) {
  if (l.live) return 'live (running)';
  if (t.completion?.task_lease_id === l.task_lease_id) return `completed ${t.completion.outcome}`;
  if (t.failed_attempts.some((f) => f.task_lease_id === l.task_lease_id)) return 'failed attempt (retried)';
  if (l.released_at) return 'released by its worker';
  if (l.revoked_at) return 'revoked (stale worker)';
  if (t.errors.some((e) => e.task_lease_id === l.task_lease_id)) return 'error reported, then expired';
  return 'expired';
}

async function taskPage(id) {
  const body = h('div');
  const out = h('p', { role: 'status', 'data-testid': 'action-result' });
  // This page's own heading: a refresh that ends after navigating away writes to it, not
  // to the next page's.
  const title = h('h1', { 'data-testid': 'task-title' }, `Task #${id}`);
  const changes = h('div');
  put(main, title, out, body, section('Changes made through the API', changes));
  await live(async () => {
    const [t, audit] = await Promise.all([
      api(`/api/tasks/${encodeURIComponent(id)}`),
      api(`/api/audit?task_id=${encodeURIComponent(id)}&limit=100`),
      showPaused(),
    ]);
    put(changes, auditTable(audit.changes, 'task-audit'));
    const task = t.task;
    put(
      title,
      `Task #${task.task_id} `,
      stateBadge(task.state),
      t.type_paused ? [' ', h('span', { class: 'state state-paused' }, `${task.task_type} paused`)] : null,
    );
    const fields = [
      ['type', h('a', { href: `#/tasks?task_type=${task.task_type}` }, task.task_type)],
      ['state', stateBadge(task.state)],
      ['priority', task.priority],
      [
        'resource key',
        task.resource_key
          ? h('a', { href: `#/tasks?resource_key=${encodeURIComponent(task.resource_key)}` }, task.resource_key)
          : '—',
      ],
      ['max attempts', task.max_attempts],
      ['enqueued', fmtTime(task.enqueued_at)],
      ['scheduled', fmtTime(task.scheduled_at)],
    ];
    if (t.run_now_at) fields.push(['run now requested', fmtTime(t.run_now_at)]);
    if (t.process)
      fields.push([
        'business process',
        h(
          'a',
          { href: `#/process/${t.process.process}/${t.process.root_id}`, 'data-testid': 'process-link' },
          `${t.process.process} #${t.process.root_id}`,
        ),
      ]);
    if (t.redriven_from) fields.push(['redriven from', taskLink(t.redriven_from)]);
    if (t.redriven_to) fields.push(['redriven as', taskLink(t.redriven_to)]);
    const actions = [];
    if (['scheduled', 'ready', 'retrying'].includes(task.state))
      actions.push(
        actionButton(
          'Cancel',
          { class: 'danger', 'data-testid': 'cancel-task' },
          async () => {
            const r = await mutate('/api/tasks/cancel', {
              task_ids: [task.task_id],
              reason: 'cancelled from the task page',
            });
            return `cancel: ${r.results[0].result}`;
          },
          out,
        ),
      );
    if (task.state === 'scheduled')
      actions.push(
        actionButton(
          'Run now',
          { 'data-testid': 'run-now-task' },
          async () => {
            const r = await mutate('/api/tasks/run-now', { task_ids: [task.task_id] });
            return `run now: ${r.results[0].result}`;
          },
          out,
        ),
      );
    if (['failed', 'abandoned'].includes(task.state) && !t.redriven_to)
      actions.push(
        actionButton(
          'Redrive',
          { 'data-testid': 'redrive-task' },
          async () => {
            const r = await mutate('/api/dead-letters/redrive', { task_ids: [task.task_id] });
            return r.results[0].new_task_id
              ? ['redriven as ', taskLink(r.results[0].new_task_id)]
              : `redrive: ${r.results[0].result}`;
          },
          out,
        ),
      );
    const heartbeats = (leaseId) => t.heartbeats.filter((x) => x.task_lease_id === leaseId);
    put(
      body,
      section(
        null,
        h(
          'table',
          { 'data-testid': 'task-fields', class: 'fields' },
          h(
            'tbody',
            {},
            fields.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))),
          ),
        ),
        actions.length ? h('p', { class: 'actions' }, actions) : null,
      ),
      h(
        'div',
        { class: 'grid2' },
        section('Payload', h('pre', { 'data-testid': 'payload' }, json(task.payload))),
        section(
          'Result',
          t.results?.length
            ? t.results.map((r) =>
                h(
                  'div',
                  {},
                  h('p', { class: 'muted' }, `lease ${r.task_lease_id} · ${fmtTime(r.recorded_at)}`),
                  h('pre', { 'data-testid': 'result' }, json(r.result)),
                ),
              )
            : h('p', { class: 'muted', 'data-testid': 'result' }, 'no result recorded'),
        ),
      ),
      section(
        'Leases',
        table(
          ['lease', 'worker', 'leased', 'expires', 'heartbeats', 'last heartbeat', 'ended'],
          t.leases.map((l) =>
            h(
              'tr',
              { 'data-lease-id': l.task_lease_id },
              h('td', {}, l.task_lease_id),
              h('td', {}, h('a', { href: `#/tasks?worker_id=${encodeURIComponent(l.worker_id)}` }, l.worker_id)),
              timeCell(l.leased_at),
              timeCell(l.expires_at),
              h('td', { class: 'num' }, l.extensions),
              timeCell(heartbeats(l.task_lease_id).at(-1)?.extended_at),
              h('td', {}, leaseEnd(l, t)),
            ),
          ),
          { 'data-testid': 'leases' },
        ),
      ),
      section(
        'Errors',
        table(
          ['at', 'lease', 'message'],
          t.errors.map((e) =>
            h(
              'tr',
              {},
              timeCell(e.created_at),
              h('td', {}, e.task_lease_id ?? ''),
              h('td', {}, h('pre', {}, e.error_message)),
            ),
          ),
          { 'data-testid': 'errors' },
        ),
      ),
      t.failed_attempts.length
        ? section(
            'Failed attempts (retried)',
            table(
              ['failed', 'retry at', 'lease'],
              t.failed_attempts.map((f) =>
                h('tr', {}, timeCell(f.failed_at), timeCell(f.retry_at), h('td', {}, f.task_lease_id ?? '')),
              ),
            ),
          )
        : null,
      section(
        'Completion',
        t.completion
          ? h(
              'p',
              { 'data-testid': 'completion' },
              stateBadge(t.completion.outcome),
              ' at ',
              fmtTime(t.completion.completed_at),
              t.completion.task_lease_id ? ` under lease ${t.completion.task_lease_id}` : '',
              t.cancellation ? ` · ${t.cancellation.reason || 'no reason given'}` : '',
            )
          : h('p', { class: 'muted', 'data-testid': 'completion' }, 'not completed'),
      ),
    );
  });
}

// --- dead letters ----------------------------------------------------------------------
async function deadLetters(params) {
  await showPaused();
  const q = new URLSearchParams();
  for (const k of ['task_type', 'before']) if (params.get(k)) q.set(k, params.get(k));
  const note = h('p', { 'data-testid': 'redrive-result', role: 'status' });
  const list = h('div');
  const sel = new Set();
  const bulk = h(
    'p',
    { class: 'actions' },
    actionButton(
      'Redrive selected',
      { 'data-testid': 'redrive-selected' },
      async () => {
        if (!sel.size) return 'select dead letters first';
        const r = await mutate('/api/dead-letters/redrive', { task_ids: [...sel] });
        sel.clear();
        await refresh();
        return `redriven ${r.redriven} of ${r.results.length}`;
      },
      note,
    ),
    actionButton(
      `Redrive all ${params.get('task_type') ?? ''} dead letters (up to 500)`,
      { class: 'secondary', 'data-testid': 'redrive-matching' },
      async () => {
        if (!confirm('Redrive every dead letter shown by this filter (up to 500)?')) return null;
        const r = await mutate('/api/dead-letters/redrive', {
          filter: params.get('task_type') ? { task_type: params.get('task_type') } : {},
          limit: 500,
        });
        await refresh();
        return `redriven ${r.redriven} of ${r.results.length}`;
      },
      note,
    ),
  );
  async function refresh() {
    const data = await api(`/api/dead-letters?${q}`);
    const rows = data.dead_letters.map((d) =>
      h(
        'tr',
        { 'data-task-id': d.task_id },
        h(
          'td',
          {},
          h('input', {
            type: 'checkbox',
            'aria-label': `select task ${d.task_id}`,
            checked: sel.has(d.task_id),
            onchange: (e) => {
              if (e.target.checked) sel.add(d.task_id);
              else sel.delete(d.task_id);
            },
          }),
        ),
        h('td', {}, taskLink(d.task_id)),
        h('td', {}, d.task_type),
        h('td', {}, stateBadge(d.outcome)),
        h('td', { class: 'num' }, d.attempts),
        timeCell(d.completed_at),
        h('td', {}, d.last_error ?? ''),
        h(
          'td',
          {},
          actionButton(
            'Redrive',
            { 'data-testid': `redrive-${d.task_id}` },
            async () => {
              const r = await mutate(`/api/dead-letters/${d.task_id}/redrive`);
              await refresh();
              return [h('span', { class: 'ok' }, `Task #${d.task_id} redriven as `), taskLink(r.new_task_id)];
            },
            note,
          ),
        ),
      ),
    );
    put(
      list,
      table(['', '#', 'type', 'outcome', 'attempts', 'completed', 'last error', ''], rows, {
        'data-testid': 'dead-letters',
      }),
      data.next_before ? h('p', {}, h('a', { href: `#/dead-letters?before=${data.next_before}` }, 'Older →')) : null,
    );
  }
  put(
    main,
    h('h1', {}, 'Dead letters'),
    h('p', { class: 'muted' }, 'Tasks that completed failed (with no error handler) or abandoned, not yet redriven.'),
    note,
    section(null, bulk, list),
  );
  await live(refresh);
}

// --- queues ----------------------------------------------------------------------------
async function queues() {
  const out = h('p', { role: 'status', 'data-testid': 'action-result' });
  const list = h('div');
  put(
    main,
    h('h1', {}, 'Queues'),
    h(
      'p',
      { class: 'muted' },
      "One queue per task type (the seed's roles). Pausing a type stops every worker from claiming it at its next claim; tasks already running finish. Workers: live workers whose roles include the type.",
    ),
    out,
    section(null, list),
  );
  async function refresh() {
    const list_ = (await api('/api/queues')).queues;
    showPaused(list_);
    put(
      list,
      table(
        ['task type', 'claiming', 'scheduled', 'ready', 'running', 'retrying', 'workers', ''],
        list_.map((q) =>
          h(
            'tr',
            { 'data-task-type': q.task_type, 'data-testid': `queue-${q.task_type}` },
            h(
              'td',
              {},
              h('a', { href: `#/tasks?task_type=${q.task_type}` }, q.task_type),
              h('div', { class: 'muted small' }, q.description),
            ),
            h(
              'td',
              {},
              q.paused
                ? [
                    stateBadge('paused'),
                    h(
                      'div',
                      { class: 'muted small' },
                      `since ${fmtTime(q.paused_at)}${q.pause_reason ? ` · ${q.pause_reason}` : ''}`,
                    ),
                  ]
                : stateBadge('active'),
            ),
            ['scheduled', 'ready', 'running', 'retrying'].map((k) => h('td', { class: 'num' }, q[k])),
            h(
              'td',
              {},
              q.workers.length
                ? q.workers.map((w, i) => [i ? ', ' : '', h('a', { href: `#/workers`, class: 'worker' }, w)])
                : h('span', { class: 'muted' }, 'none'),
            ),
            h(
              'td',
              {},
              q.paused
                ? actionButton(
                    'Resume',
                    { 'data-testid': `resume-${q.task_type}` },
                    async () => {
                      await mutate(`/api/queues/${q.task_type}/resume`, {});
                      await refresh();
                      return `${q.task_type}: claiming resumed`;
                    },
                    out,
                  )
                : actionButton(
                    'Pause',
                    { class: 'danger', 'data-testid': `pause-${q.task_type}` },
                    async () => {
                      await mutate(`/api/queues/${q.task_type}/pause`, { reason: 'paused from the dashboard' });
                      await refresh();
                      return `${q.task_type}: claiming paused`;
                    },
                    out,
                  ),
            ),
          ),
        ),
        { 'data-testid': 'queues' },
      ),
    );
  }
  await live(refresh, PENDING_REFRESH_MS);
}

// --- workers ---------------------------------------------------------------------------
async function workers() {
  await showPaused();
  const out = h('p', { role: 'status', 'data-testid': 'action-result' });
  const list = h('div');
  put(
    main,
    h('h1', {}, 'Workers'),
    h(
      'p',
      { class: 'muted' },
      'Workers register on every heartbeat. Stale: not seen for 10 minutes and not stopped; its live leases can be revoked so the tasks run elsewhere at once.',
    ),
    out,
    section(null, list),
  );
  async function refresh() {
    const data = await api('/api/workers');
    put(
      list,
      table(
        ['worker', 'status', 'roles', 'heartbeat age', 'in flight', 'started', 'last seen', ''],
        data.workers.map((w) =>
          h(
            'tr',
            { 'data-worker-id': w.worker_id },
            h('td', {}, h('a', { href: `#/tasks?worker_id=${encodeURIComponent(w.worker_id)}` }, w.worker_id)),
            h('td', {}, stateBadge(w.status)),
            h('td', {}, w.task_types.join(', ')),
            h('td', { class: 'num' }, fmtAge(w.heartbeat_age_seconds)),
            h('td', { class: 'num' }, w.tasks_in_flight),
            timeCell(w.started_at),
            timeCell(w.last_seen_at),
            h(
              'td',
              {},
              w.status === 'stale'
                ? actionButton(
                    'Recover leases',
                    { 'data-testid': `recover-${w.worker_id}` },
                    async () => {
                      const r = await mutate(`/api/workers/${encodeURIComponent(w.worker_id)}/recover-stale`, {});
                      await refresh();
                      return `${w.worker_id}: ${r.recovered.length} lease(s) revoked`;
                    },
                    out,
                  )
                : '',
            ),
          ),
        ),
        { 'data-testid': 'workers' },
      ),
    );
  }
  await live(refresh, PENDING_REFRESH_MS);
}

// --- schedules -------------------------------------------------------------------------
async function schedules() {
  await showPaused();
  const out = h('p', { role: 'status', 'data-testid': 'action-result' });
  const list = h('div');
  put(
    main,
    h('h1', {}, 'Schedules'),
    h('p', { class: 'muted' }, "Recurring schedules (cron read in each schedule's time zone) and their last runs."),
    out,
    section(null, list),
  );
  async function refresh() {
    const data = await api('/api/schedules');
    put(
      list,
      table(
        ['schedule', 'cron', 'task type', 'enabled', 'next fire', 'last runs', ''],
        data.schedules.map((x) =>
          h(
            'tr',
            { 'data-schedule': x.name },
            h('td', {}, x.name),
            h('td', {}, h('code', {}, x.cron), ' ', h('span', { class: 'muted' }, x.time_zone ?? 'UTC')),
            h('td', {}, x.task_type),
            h('td', {}, stateBadge(x.enabled ? 'enabled' : 'disabled')),
            timeCell(x.next_fire_at),
            h(
              'td',
              {},
              x.last_runs.length
                ? h(
                    'ul',
                    { class: 'runs' },
                    x.last_runs.map((r) =>
                      h(
                        'li',
                        {},
                        fmtTime(r.fire_at),
                        ' ',
                        r.task_id
                          ? [taskLink(r.task_id), ' ', stateBadge(r.task_state ?? 'unknown')]
                          : stateBadge(r.outcome),
                      ),
                    ),
                  )
                : h('span', { class: 'muted' }, 'never ran'),
            ),
            h(
              'td',
              {},
              actionButton(
                x.enabled ? 'Disable' : 'Enable',
                { class: x.enabled ? 'secondary' : '', 'data-testid': `${x.enabled ? 'disable' : 'enable'}-${x.name}` },
                async () => {
                  await mutate(`/api/schedules/${encodeURIComponent(x.name)}/${x.enabled ? 'disable' : 'enable'}`, {});
                  await refresh();
                  return `${x.name} ${x.enabled ? 'disabled' : 'enabled'}`;
                },
                out,
              ),
            ),
          ),
        ),
        { 'data-testid': 'schedules' },
      ),
    );
  }
  await live(refresh, SLOW_REFRESH_MS);
}

// --- processes -------------------------------------------------------------------------
async function processes(params) {
  const [names] = await Promise.all([api('/api/processes').then((r) => r.processes), showPaused()]);
  const current = params.get('process') ?? names[0];
  const list = h('div');
  put(
    main,
    h('h1', {}, 'Processes'),
    h(
      'nav',
      { class: 'tabs', 'data-testid': 'process-nav' },
      names.map((n) => h('a', { href: `#/processes?process=${n}`, class: n === current ? 'current' : '' }, n)),
    ),
    h(
      'p',
      { class: 'muted' },
      'Newest roots first, with stuck and failed ones at the top of each page. Stuck: nothing recorded for 10 minutes, or the last three attempts failed (for a parent: a node below it).',
    ),
    section(null, list),
  );
  if (!current) return;
  await live(async () => {
    const q = new URLSearchParams();
    if (params.get('before')) q.set('before', params.get('before'));
    const data = await api(`/api/processes/${encodeURIComponent(current)}?${q}`);
    put(
      list,
      table(
        ['root', 'status', 'attempts', 'stuck or failed below', 'started', 'last fact', 'subject'],
        data.roots.map((r) =>
          h(
            'tr',
            { 'data-root-id': r.root_id },
            h('td', {}, h('a', { href: `#/process/${current}/${r.root_id}` }, `${current} #${r.root_id}`)),
            h('td', {}, stateBadge(r.status)),
            h('td', { class: 'num' }, r.attempts),
            h('td', { class: 'num' }, r.stuck_descendants || ''),
            timeCell(r.created_at),
            timeCell(r.last_fact_at),
            h('td', {}, h('code', {}, JSON.stringify(r.subject))),
          ),
        ),
        { 'data-testid': 'process-roots' },
      ),
      data.roots.length === 50
        ? h(
            'p',
            {},
            h(
              'a',
              { href: `#/processes?process=${current}&before=${Math.min(...data.roots.map((r) => r.root_id))}` },
              'Older →',
            ),
          )
        : null,
    );
  }, SLOW_REFRESH_MS);
}

function treeNode(node) {
  return h(
    'li',
    { 'data-process': node.process, 'data-root-id': node.root_id, 'data-status': node.status },
    h(
      'div',
      { class: `node node-${node.status}` },
      h('a', { href: `#/process/${node.process}/${node.root_id}` }, `${node.process} #${node.root_id}`),
      ' ',
      stateBadge(node.status),
      h(
        'span',
        { class: 'muted small' },
        ` attempts ${node.attempts}` +
          (node.failed_attempts ? ` (${node.failed_attempts} failed)` : '') +
          ` · supervisor runs ${node.supervisor_runs} · last fact ${fmtTime(node.last_fact_at)}`,
      ),
      node.failure ? h('div', { class: 'error small' }, node.failure.reason ?? JSON.stringify(node.failure)) : null,
    ),
    node.children?.length ? h('ul', {}, node.children.map(treeNode)) : null,
  );
}

/**
 * What retention dropped of a process's queue tasks (its queue_history_pruned facts): the
 * task ids, their set and when, or null when nothing was dropped.
 */
function prunedNotice(pruned) {
  if (!pruned.length) return null;
  return h(
    'div',
    { class: 'notice', role: 'note', 'data-testid': 'pruned-notice' },
    h('strong', {}, 'Queue history pruned. '),
    'Retention dropped the queue’s records (leases, errors, completions) of these tasks; the process’s own facts below are kept. ',
    h('a', { href: '#/history' }, 'History and retention'),
    h(
      'ul',
      {},
      pruned.map((f) =>
        h(
          'li',
          { 'data-dropped-at': f.detail.dropped_at },
          `${f.process} #${f.root_id}: task${f.detail.task_ids.length === 1 ? '' : 's'} `,
          f.detail.task_ids.map((t) => `#${t}`).join(', '),
          ` (set of task ids ${f.detail.lower_bound}–${f.detail.upper_bound - 1}) dropped ${fmtTime(f.detail.dropped_at)}`,
        ),
      ),
    ),
  );
}

async function processPage(name, id) {
  const tree = h('div'),
    notice = h('div'),
    timeline = h('div');
  put(
    main,
    h('h1', {}, `${name} #${id}`),
    notice,
    section('Supervision tree', tree),
    section('Fact timeline (all nodes, millisecond times)', timeline),
  );
  await live(async () => {
    const [data] = await Promise.all([
      api(`/api/processes/${encodeURIComponent(name)}/${encodeURIComponent(id)}`),
      showPaused(),
    ]);
    put(tree, h('ul', { class: 'tree', 'data-testid': 'process-tree' }, treeNode(data.tree)));
    const facts = [...data.timeline].sort((a, b) => new Date(a.at) - new Date(b.at));
    const pruned = facts.filter((f) => f.fact === 'queue_history_pruned');
    const prunedIds = new Set(pruned.flatMap((f) => f.detail.task_ids));
    put(notice, prunedNotice(pruned));
    // An attempt names the queue task that carried it: a link while the queue keeps it.
    const queueTask = (f) =>
      f.fact === 'attempt' && f.detail?.task_id
        ? prunedIds.has(f.detail.task_id)
          ? h('span', { class: 'muted', 'data-testid': 'pruned-task' }, `task #${f.detail.task_id} (pruned) `)
          : h('span', {}, 'task ', taskLink(f.detail.task_id), ' ')
        : null;
    put(
      timeline,
      table(
        ['at', 'node', 'fact', 'attempt', 'detail'],
        facts.map((f) =>
          h(
            'tr',
            { 'data-fact': f.fact },
            timeCell(f.at),
            h('td', {}, h('a', { href: `#/process/${f.process}/${f.root_id}` }, `${f.process} #${f.root_id}`)),
            h('td', {}, stateBadge(f.fact)),
            h('td', {}, f.attempt_id ?? ''),
            h(
              'td',
              {},
              queueTask(f),
              Object.keys(f.detail ?? {}).length ? h('code', {}, JSON.stringify(f.detail)) : '',
            ),
          ),
        ),
        { 'data-testid': 'timeline' },
      ),
    );
  }, SLOW_REFRESH_MS);
}

// --- history and retention -------------------------------------------------------------
/** 1536 → '1.5 kB' (powers of 1024, as pg_size_pretty). */
function fmtBytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
/** 604800 → '7 d', 5400 → '1.5 h'. */
function fmtWindow(seconds) {
  if (seconds >= 86_400) return `${+(seconds / 86_400).toFixed(1)} d`;
  if (seconds >= 3600) return `${+(seconds / 3600).toFixed(1)} h`;
  if (seconds >= 60) return `${+(seconds / 60).toFixed(1)} min`;
  return `${seconds} s`;
}
const SET_STATES = {
  ahead: ['ahead', 'created ahead of need: no task yet'],
  current: ['current', 'new tasks land here'],
  next_drop: ['next to drop', 'the oldest set below the last task id: retention drops it first'],
  retained: ['retained', 'kept until the sets below it are dropped and its window has passed'],
  default: ['default', 'tasks outside every set (should be empty)'],
};
const setRange = (p) => (p.is_default ? 'default partition' : `${p.lower_bound}–${p.upper_bound - 1}`);

/** Why the next set is not dropped yet, or when it goes. */
function nextDropText(status) {
  const next = status.next_drop;
  if (!next) return 'Nothing to drop: no set lies wholly below the last task id yet.';
  const range = `Set ${next.lower_bound}–${next.upper_bound - 1}`;
  if (next.pending_tasks > 0)
    return [
      h('strong', {}, `${range} waits for ${next.pending_tasks} pending task${next.pending_tasks === 1 ? '' : 's'}. `),
      'A set is dropped only when every task in it is completed, however old it is.',
    ];
  const why = next.last_completed_at
    ? `its newest completion (${fmtTime(next.last_completed_at)}) plus the ${fmtWindow(status.retention_seconds)} window`
    : 'it holds no completed task';
  if (new Date(next.drop_after) > new Date(status.now))
    return [h('strong', {}, `${range} can be dropped from ${fmtTime(next.drop_after)}: `), why, '.'];
  const m = status.maintenance;
  return [
    h('strong', {}, `${range} is due (${why}): `),
    !m
      ? 'no maintenance schedule is installed; run select queues.maintain_history_at(now()) as the owner.'
      : m.enabled
        ? `the next maintenance run drops it (${fmtTime(m.next_fire_at)}).`
        : 'but the maintenance schedule is disabled.',
  ];
}

function maintenanceText(m) {
  if (!m) return h('span', { class: 'error' }, 'no queue_history_maintenance schedule');
  const run = m.last_run;
  const report = run?.report;
  return [
    h('code', {}, m.cron),
    ' ',
    stateBadge(m.enabled ? 'enabled' : 'disabled'),
    m.enabled ? ` · next ${fmtTime(m.next_fire_at)}` : '',
    h(
      'div',
      { class: 'muted small', 'data-testid': 'maintenance-last-run' },
      run
        ? [
            `last run ${fmtTime(run.fire_at)} `,
            run.task_id
              ? [taskLink(run.task_id), ' ', stateBadge(run.task_state ?? 'unknown')]
              : stateBadge(run.outcome),
            report
              ? ` · created ${report.created.length}, dropped ${report.dropped.length}, kept ${report.kept}` +
                (report.skipped.length ? `, skipped ${report.skipped.length} (locks busy)` : '')
              : '',
          ]
        : 'never ran',
    ),
  ];
}

async function historyPage() {
  await showPaused();
  const settings = h('div'),
    next = h('p', { 'data-testid': 'next-drop' }),
    sets = h('div'),
    drops = h('div');
  put(
    main,
    h('h1', {}, 'History and retention'),
    h(
      'p',
      { class: 'muted' },
      'The queue’s history (every task and its facts) is kept in partition sets of task ids. Retention drops a whole set once every task in it is completed and its newest completion is older than the window; nothing is deleted row by row. Sizes are read from the catalog; task counts are the ids handed out in each set.',
    ),
    section('Retention and maintenance', settings),
    section('Next drop', next),
    section('Partition sets', sets),
    section('Recent drops', drops),
  );
  await live(async () => {
    const s = await api('/api/history');
    const oldest = s.oldest_task_id
      ? h(
          'span',
          { 'data-testid': 'oldest-task' },
          taskLink(s.oldest_task_id),
          ` enqueued ${fmtTime(s.oldest_enqueued_at)} (${fmtAge((new Date(s.now) - new Date(s.oldest_enqueued_at)) / 1000)} ago)`,
        )
      : h('span', { class: 'muted', 'data-testid': 'oldest-task' }, 'no task retained');
    const fields = [
      ['retention window', `${fmtWindow(s.retention_seconds)} after a set’s newest completion`],
      ['set size', `${s.partition_size} task ids`],
      ['sets kept ahead', s.partitions_ahead],
      ['lock timeout', `${s.lock_timeout_ms} ms (a step that finds no free moment in it is skipped and tried again)`],
      ['maintenance schedule', maintenanceText(s.maintenance)],
      ['last task id', s.last_task_id],
      ['oldest retained task', oldest],
      [
        'default partition',
        s.default_partition_tasks
          ? h('span', { class: 'error' }, `${s.default_partition_tasks} tasks: maintenance fell behind`)
          : '0 tasks',
      ],
      ['sets dropped so far', s.dropped_sets],
      [
        'skipped steps, last hour',
        s.last_skipped_step
          ? h(
              'span',
              { 'data-testid': 'skipped-steps' },
              `${s.skipped_steps_last_hour}; last ${fmtTime(s.last_skipped_step.skipped_at)}: ${s.last_skipped_step.step} (${s.last_skipped_step.reason})`,
            )
          : h('span', { 'data-testid': 'skipped-steps' }, '0'),
      ],
    ];
    put(
      settings,
      h(
        'table',
        { class: 'fields', 'data-testid': 'history-settings' },
        h(
          'tbody',
          {},
          fields.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))),
        ),
      ),
    );
    put(next, nextDropText(s));
    const rows = s.partitions.map((p) =>
      h(
        'tr',
        { 'data-lower-bound': p.lower_bound ?? 'default', 'data-state': p.state },
        h('td', { title: p.is_default ? p.name : `[${p.lower_bound}, ${p.upper_bound}) · ${p.name}` }, setRange(p)),
        h(
          'td',
          { title: SET_STATES[p.state]?.[1] ?? '' },
          h('span', { class: `state state-${p.state}` }, SET_STATES[p.state]?.[0] ?? p.state),
        ),
        p.created_at
          ? timeCell(p.created_at)
          : h('td', { class: 'muted', title: 'made before creation times were recorded' }, '—'),
        h('td', { class: 'num' }, p.tasks),
        h('td', { class: 'num' }, p.pending_tasks || ''),
        h(
          'td',
          {},
          p.first_task_id
            ? [taskLink(p.first_task_id), ' ', h('span', { class: 'muted small' }, fmtTime(p.first_enqueued_at))]
            : '',
        ),
        h('td', { class: 'num' }, fmtBytes(p.table_bytes)),
        h('td', { class: 'num' }, fmtBytes(p.index_bytes)),
        h('td', { class: 'num' }, fmtBytes(p.total_bytes)),
      ),
    );
    const t = s.totals;
    put(
      sets,
      s.partitions.some((p) => !p.is_default)
        ? null
        : h(
            'p',
            { class: 'error', 'data-testid': 'no-sets' },
            'No partition sets yet: every new task goes to the default partition until the next maintenance run creates them.',
          ),
      table(
        [
          'task ids',
          'state',
          'created',
          'tasks',
          'pending',
          'oldest task',
          'bytes: tables',
          'bytes: indexes',
          'bytes: total',
        ],
        [
          ...rows,
          h(
            'tr',
            { class: 'totals', 'data-testid': 'history-totals' },
            h('th', {}, `${t.sets} set${t.sets === 1 ? '' : 's'}`),
            h('td', { colspan: 2 }),
            h('td', { class: 'num' }, t.tasks),
            h('td', { colspan: 2 }),
            h('td', { class: 'num' }, fmtBytes(t.table_bytes)),
            h('td', { class: 'num' }, fmtBytes(t.index_bytes)),
            h('td', { class: 'num' }, fmtBytes(t.total_bytes)),
          ),
        ],
        { 'data-testid': 'history-sets' },
      ),
    );
    put(
      drops,
      table(
        ['task ids', 'tasks', 'newest completion', 'dropped'],
        s.recent_drops.map((d) =>
          h(
            'tr',
            { 'data-lower-bound': d.lower_bound },
            h('td', {}, `${d.lower_bound}–${d.upper_bound - 1}`),
            h('td', { class: 'num' }, d.tasks),
            timeCell(d.last_completed_at),
            timeCell(d.dropped_at),
          ),
        ),
        { 'data-testid': 'recent-drops' },
      ),
    );
  }, SLOW_REFRESH_MS);
}

// --- audit -----------------------------------------------------------------------------
/** What a change targeted, in words: its queue, schedule, worker and tasks (linked). */
function auditTarget(c) {
  const parts = [];
  if (c.task_type) parts.push(h('a', { href: `#/tasks?task_type=${encodeURIComponent(c.task_type)}` }, c.task_type));
  if (c.schedule_name) parts.push(h('a', { href: '#/schedules' }, `schedule ${c.schedule_name}`));
  if (c.worker_id)
    parts.push(h('a', { href: `#/tasks?worker_id=${encodeURIComponent(c.worker_id)}` }, `worker ${c.worker_id}`));
  const shown = c.task_ids.slice(0, 10);
  if (shown.length)
    parts.push([
      shown.map((t) => [taskLink(t), ' ']),
      c.task_ids.length > shown.length ? `and ${c.task_ids.length - shown.length} more` : '',
    ]);
  return parts.flatMap((p, i) => (i ? [' · ', p] : [p]));
}

/** The changes (GET /api/audit), newest first. */
function auditTable(changes, testid) {
  return table(
    ['at', 'user', 'action', 'target', 'request', 'answer'],
    changes.map((c) =>
      h(
        'tr',
        { 'data-change-id': c.api_change_id },
        timeCell(c.changed_at),
        h(
          'td',
          {},
          h('span', { 'data-testid': 'audit-user' }, c.user_name),
          h('div', { class: 'muted small' }, c.user_level),
        ),
        h('td', { 'data-testid': 'audit-action' }, c.action),
        h('td', {}, auditTarget(c)),
        h('td', { class: 'small' }, `${c.method} ${c.route}`, h('div', { class: 'muted' }, c.request_id)),
        h(
          'td',
          {},
          h(
            'details',
            {},
            h('summary', {}, 'answer'),
            h('pre', {}, json(c.answer)),
            Object.keys(c.input ?? {}).length
              ? [h('p', { class: 'muted small' }, 'input'), h('pre', {}, json(c.input))]
              : null,
          ),
        ),
      ),
    ),
    { 'data-testid': testid },
  );
}

async function auditPage(params) {
  await showPaused();
  const before = params.get('before');
  const list = h('div');
  const older = h('p');
  put(
    main,
    h('h1', {}, 'Audit'),
    h(
      'p',
      { class: 'muted' },
      'Every change made through the API (cancel, run now, redrive, pause, resume, schedules, stale recovery, new and generated tasks), newest first: who made it, when, the request and what it answered. Refused requests change nothing and are not listed (the API log has them).',
    ),
    section(null, list, older),
  );
  await live(async () => {
    const q = new URLSearchParams({ limit: '100' });
    if (before) q.set('before', before);
    const data = await api(`/api/audit?${q}`);
    put(list, auditTable(data.changes, 'audit-list'));
    put(older, data.next_before ? h('a', { href: `#/audit?before=${data.next_before}` }, 'Older changes') : null);
  }, SLOW_REFRESH_MS);
}

// --- router ----------------------------------------------------------------------------
async function route() {
  if (!session) return;
  generation++;
  const [path, query = ''] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(query);
  const parts = (path || '/').split('/').filter(Boolean);
  for (const a of document.querySelectorAll('header nav a'))
    a.classList.toggle(
      'current',
      (a.getAttribute('href').replace(/^#\/?/, '') || '') === (parts[0] ?? '') ||
        (parts[0] === 'task' && a.getAttribute('href') === '#/tasks') ||
        (parts[0] === 'process' && a.getAttribute('href') === '#/processes'),
    );
  try {
    if (parts.length === 0) await overview();
    else if (parts[0] === 'tasks') await tasks(params);
    else if (parts[0] === 'task' && parts[1]) await taskPage(parts[1]);
    else if (parts[0] === 'dead-letters') await deadLetters(params);
    else if (parts[0] === 'queues') await queues();
    else if (parts[0] === 'workers') await workers();
    else if (parts[0] === 'schedules') await schedules();
    else if (parts[0] === 'processes') await processes(params);
    else if (parts[0] === 'process' && parts[1] && parts[2]) await processPage(parts[1], parts[2]);
    else if (parts[0] === 'history') await historyPage();
    else if (parts[0] === 'audit') await auditPage(params);
    else put(main, h('p', {}, 'No such page. ', h('a', { href: '#/' }, 'Overview')));
  } catch (error) {
    fail(error);
  }
}
window.addEventListener('hashchange', route);
boot();
