// @ts-check
// #/audit — every change made through the API, newest first; and the table of changes the
// task page shows for its task.
import { api } from '../lib/api-client.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { json, taskLink, timeCell } from '../lib/format.js';
import { live, showPaused, SLOW_REFRESH_MS } from '../lib/live.js';

/**
 * A change (GET /api/audit `changes`).
 * @typedef {{
 *   api_change_id: number, changed_at: string, user_name: string, user_level: string, action: string,
 *   method: string, route: string, request_id: string, task_type: string | null, schedule_name: string | null,
 *   worker_id: string | null, task_ids: number[], input: Record<string, unknown> | null, answer: unknown
 * }} Change
 */

/**
 * What a change targeted, in words: its queue, schedule, worker and tasks (linked).
 * @param {Change} c
 */
function auditTarget(c) {
  /** @type {import('../lib/dom.js').Child[]} */
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

/**
 * The changes (GET /api/audit), newest first.
 * @param {Change[]} changes
 * @param {string} testid
 */
export function auditTable(changes, testid) {
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

/**
 * @param {URLSearchParams} params `before`: the page of older changes
 */
export async function auditPage(params) {
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
