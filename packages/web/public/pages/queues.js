// @ts-check
// #/queues — one queue per task type: claiming or paused, pending counts, the live workers
// whose roles include it; pause and resume.
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
      "One queue per task type (the seed's roles). Pausing a type stops every worker from claiming it at its next claim; tasks already running finish. Workers: live workers whose roles include the type.",
    ),
    out,
    section(null, list),
  );
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
          : stateBadge('active'),
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
    const all = (await api('/api/queues')).queues;
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
