// @ts-check
// #/workers — every registered worker: status, roles, heartbeat age, tasks in flight; a
// stale worker's live leases can be revoked so its tasks run elsewhere at once.
import { api, mutate } from '../lib/api-client.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { fmtAge, stateBadge, timeCell } from '../lib/format.js';
import { live, PENDING_REFRESH_MS, showPaused } from '../lib/live.js';
import { actionButton } from '../lib/session.js';

export async function workers() {
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
  /** @param {any} w a worker of GET /api/workers */
  const row = (w) =>
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
    );
  async function refresh() {
    const data = await api('/api/workers');
    put(
      list,
      table(
        ['worker', 'status', 'roles', 'heartbeat age', 'in flight', 'started', 'last seen', ''],
        data.workers.map(row),
        { 'data-testid': 'workers' },
      ),
    );
  }
  await live(refresh, PENDING_REFRESH_MS);
}
