// @ts-check
// #/queues — one queue per task type: claiming, paused or throttled by its provider, pending
// counts, the live workers whose roles include it; pause and resume, clear a throttle.
// Below, the group keys throttled by their provider (a tenant, a provider account), each
// with a clear; then the flow limits (concurrency and rate, per task type and group key) with how
// full each is; set and clear them.
import { api, mutate } from '../lib/api-client.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { fmtTime, stateBadge } from '../lib/format.js';
import { live, PENDING_REFRESH_MS, showPaused } from '../lib/live.js';
import { actionButton } from '../lib/session.js';

export async function queues() {
  const out = h('p', { role: 'status', 'data-testid': 'action-result' });
  const list = h('div');
  const limitList = h('div');
  const groupThrottleList = h('div');
  const limitForm = limitEditor(out, () => refresh());
  put(
    main,
    h('h1', {}, 'Queues'),
    h(
      'p',
      { class: 'muted' },
      "One queue per task type (the seed's roles). Pausing a type stops every worker from claiming it at its next claim; tasks already running finish. A type is throttled when its provider refused work for now (HTTP 429, a quota): no worker claims its tasks until then, unless you clear the throttle. Workers: live workers whose roles include the type.",
    ),
    out,
    section(null, list),
    section(
      'Throttled group keys',
      h(
        'p',
        { class: 'muted' },
        "A group key (a tenant, a provider account) is throttled when its provider refused that account's work for now: no worker claims the tasks of any type that carry it until then, unless you clear the throttle; the other group keys' tasks run on.",
      ),
      groupThrottleList,
    ),
    section(
      'Flow limits',
      h(
        'p',
        { class: 'muted' },
        'At most N tasks running at once (concurrency) and at most N starts per interval (rate), for a task type as a whole, each group key of it, or one group key; honoured by every claim on every worker. Held back: tasks ready now that a full limit keeps waiting.',
      ),
      limitList,
      limitForm,
    ),
  );
  /** @param {any} l a limit of GET /api/limits */
  const limitRow = (l) =>
    h(
      'tr',
      { 'data-testid': `limit-${l.task_type}-${l.scope}${l.group_key ? `-${l.group_key}` : ''}` },
      h('td', {}, h('a', { href: `#/tasks?task_type=${l.task_type}` }, l.task_type)),
      h('td', {}, l.scope === 'group' ? `group ${l.group_key}` : l.scope === 'each_group' ? 'each group key' : 'type'),
      h('td', { class: 'num' }, l.max_running === null ? '—' : `${l.running} / ${l.max_running}`),
      h(
        'td',
        { class: 'num' },
        l.max_starts === null ? '—' : `${l.starts} / ${l.max_starts} per ${fmtInterval(l.interval_ms)}`,
      ),
      h('td', { class: 'num' }, l.held_back),
      h('td', { class: 'muted small' }, fmtTime(l.set_at)),
      h(
        'td',
        {},
        actionButton(
          'Clear',
          { class: 'danger', 'data-testid': `clear-limit-${l.task_type}-${l.scope}` },
          async () => {
            const query = new URLSearchParams({ scope: l.scope, ...(l.group_key ? { group_key: l.group_key } : {}) });
            await api(`/api/queues/${l.task_type}/limits?${query}`, { method: 'DELETE' });
            await refresh();
            return `${l.task_type}: limit cleared`;
          },
          out,
        ),
      ),
    );
  /** @type {Map<string, any>} the throttles in force (GET /api/throttles), by task type */
  let throttles = new Map();
  /** @param {any} t a group key's throttle of GET /api/throttles */
  const groupThrottleRow = (t) =>
    h(
      'tr',
      { 'data-testid': `group-throttle-${t.key}` },
      h('td', {}, t.key),
      h('td', { class: 'small' }, fmtTime(t.throttled_until)),
      h('td', { class: 'muted small' }, `${t.reason}${t.reports > 1 ? ` (${t.reports} reports)` : ''}`),
      h(
        'td',
        {},
        actionButton(
          'Clear throttle',
          { 'data-testid': `clear-group-throttle-${t.key}` },
          async () => {
            const answer = await mutate('/api/throttles/clear', { key_kind: 'group', key: t.key });
            await refresh();
            return answer.cleared
              ? `group ${t.key}: throttle cleared; claimed again`
              : `group ${t.key}: no throttle was in force`;
          },
          out,
        ),
      ),
    );
  /** @param {any} t a throttle of GET /api/throttles */
  const throttleCell = (t) => [
    stateBadge('throttled'),
    h(
      'div',
      { class: 'muted small', 'data-testid': `throttle-${t.key}` },
      `until ${fmtTime(t.throttled_until)} · ${t.reason}${t.reports > 1 ? ` (${t.reports} reports)` : ''}`,
    ),
    actionButton(
      'Clear throttle',
      { 'data-testid': `clear-throttle-${t.key}` },
      async () => {
        const answer = await mutate('/api/throttles/clear', { key_kind: 'task_type', key: t.key });
        await refresh();
        return answer.cleared ? `${t.key}: throttle cleared; claimed again` : `${t.key}: no throttle was in force`;
      },
      out,
    ),
  ];
  /** @param {any} q a queue of GET /api/queues */
  const row = (q) =>
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
          : throttles.has(q.task_type)
            ? null
            : stateBadge('active'),
        throttles.has(q.task_type) ? throttleCell(throttles.get(q.task_type)) : null,
      ),
      ['scheduled', 'ready', 'running', 'retrying'].map((k) => h('td', { class: 'num' }, q[k])),
      h(
        'td',
        {},
        q.workers.length
          ? q.workers.map((/** @type {string} */ w, /** @type {number} */ i) => [
              i ? ', ' : '',
              h('a', { href: `#/workers`, class: 'worker' }, w),
            ])
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
    );
  async function refresh() {
    const [all, throttled] = await Promise.all([
      api('/api/queues').then((/** @type {any} */ r) => r.queues),
      api('/api/throttles').then((/** @type {any} */ r) => r.throttles),
    ]);
    throttles = new Map(
      throttled.filter((/** @type {any} */ t) => t.key_kind === 'task_type').map((/** @type {any} */ t) => [t.key, t]),
    );
    void showPaused(all);
    const groups = throttled.filter((/** @type {any} */ t) => t.key_kind === 'group');
    put(
      groupThrottleList,
      groups.length
        ? table(['group key', 'until', 'reason', ''], groups.map(groupThrottleRow), {
            'data-testid': 'group-throttles',
          })
        : h('p', { class: 'muted', 'data-testid': 'group-throttles' }, 'No group key is throttled.'),
    );
    put(
      list,
      table(['task type', 'claiming', 'scheduled', 'ready', 'running', 'retrying', 'workers', ''], all.map(row), {
        'data-testid': 'queues',
      }),
    );
    const limits = (await api('/api/limits')).limits;
    put(
      limitList,
      limits.length
        ? table(['task type', 'scope', 'running / max', 'starts / max', 'held back', 'set', ''], limits.map(limitRow), {
            'data-testid': 'limits',
          })
        : h(
            'p',
            { class: 'muted', 'data-testid': 'limits' },
            'No limits: every task type is claimed as fast as workers take it.',
          ),
    );
  }
  await live(refresh, PENDING_REFRESH_MS);
}

/** @param {number} ms */
function fmtInterval(ms) {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms % 1000 === 0) return `${ms / 1000} s`;
  return `${ms} ms`;
}

/**
 * The form that sets a flow limit (PUT /api/queues/:task_type/limits); the API checks it
 * and its message shows on refusal.
 * @param {HTMLElement} out
 * @param {() => Promise<void>} refresh
 */
function limitEditor(out, refresh) {
  /** @param {string} name @param {Record<string, string>} [attrs] */
  const input = (name, attrs = {}) => h('input', { name, 'data-testid': `limit-${name}`, ...attrs });
  const taskType = input('task_type', { placeholder: 'task type', required: 'required' });
  const scope = h(
    'select',
    { name: 'scope', 'data-testid': 'limit-scope' },
    h('option', { value: 'type' }, 'the type as a whole'),
    h('option', { value: 'each_group' }, 'each group key'),
    h('option', { value: 'group' }, 'one group key'),
  );
  const groupKey = input('group_key', { placeholder: 'group key (one group key only)' });
  const maxRunning = input('max_running', { type: 'number', min: '1', placeholder: 'max running' });
  const maxStarts = input('max_starts', { type: 'number', min: '1', placeholder: 'max starts' });
  const intervalMs = input('interval_ms', { type: 'number', min: '1', placeholder: 'per interval (ms)' });
  /** @param {HTMLElement} el */
  const value = (el) => /** @type {HTMLInputElement} */ (el).value.trim();
  /** @param {HTMLElement} el */
  const number = (el) => (value(el) === '' ? null : Number(value(el)));
  return h(
    'form',
    {
      class: 'inline',
      'data-testid': 'limit-form',
      onsubmit: (/** @type {Event} */ e) => e.preventDefault(),
    },
    taskType,
    scope,
    groupKey,
    maxRunning,
    maxStarts,
    intervalMs,
    actionButton(
      'Set limit',
      { 'data-testid': 'set-limit' },
      async () => {
        const type = value(taskType);
        const chosen = /** @type {HTMLSelectElement} */ (scope).value;
        await api(`/api/queues/${encodeURIComponent(type)}/limits`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            scope: chosen,
            ...(chosen === 'group' ? { group_key: value(groupKey) } : {}),
            max_running: number(maxRunning),
            max_starts: number(maxStarts),
            interval_ms: number(intervalMs),
          }),
        });
        await refresh();
        return `${type}: limit set`;
      },
      out,
    ),
  );
}
