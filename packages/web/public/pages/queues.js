// @ts-check
// #/queues — one queue per task type: claiming, paused or throttled by its provider, pending
// counts, the live workers whose roles include it; pause and resume, clear a throttle.
import { api, mutate } from '../lib/api-client.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { fmtTime, stateBadge } from '../lib/format.js';
import { live, PENDING_REFRESH_MS, showPaused } from '../lib/live.js';
import { actionButton } from '../lib/session.js';

export async function queues() {
  const out = h('p', { role: 'status', 'data-testid': 'action-result' });
  const list = h('div');
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
  );
  /** @type {Map<string, any>} the throttles in force (GET /api/throttles), by task type */
  let throttles = new Map();
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
    put(
      list,
      table(['task type', 'claiming', 'scheduled', 'ready', 'running', 'retrying', 'workers', ''], all.map(row), {
        'data-testid': 'queues',
      }),
    );
  }
  await live(refresh, PENDING_REFRESH_MS);
}
