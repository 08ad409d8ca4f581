// @ts-check
// #/ — the overview: tasks by type and state, the hour's throughput and queue depth, the
// hour's completions by type and outcome, and capacity per worker role.
import { api, mutate } from '../lib/api-client.js';
import { depthChart, throughputChart } from '../lib/charts.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { num, PENDING, STATES } from '../lib/format.js';
import { live, PENDING_REFRESH_MS, showPaused, WINDOW_REFRESH_MS } from '../lib/live.js';
import { actionButton } from '../lib/session.js';

const OUTCOMES = ['succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed'];

export async function overview() {
  const counts = h('div');
  const throughput = h('div');
  const perType = h('div');
  const depth = h('div');
  const capacity = h('div');
  const replica = h('p', { class: 'muted', 'data-testid': 'replica-lag' });
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
  /** @type {any} GET /api/overview */
  let full;
  let fullAt = 0;
  await live(async () => {
    const [now, fresh] = await Promise.all([
      api('/api/overview/live'),
      Date.now() - fullAt >= WINDOW_REFRESH_MS ? api('/api/overview') : null,
    ]);
    if (fresh) {
      full = fresh;
      fullAt = Date.now();
    }
    /** @type {any[]} */
    const queues = now.queues;
    void showPaused(queues);
    put(
      replica,
      now.replica_lag_seconds === null
        ? ''
        : `Read from a replica, ${now.replica_lag_seconds.toFixed(1)} s behind the primary (changes go to the primary).`,
    );
    /** @type {Record<string, Record<string, number>>} */
    const outcomes = {};
    for (const c of full.counts) if (!PENDING.includes(c.state)) (outcomes[c.task_type] ??= {})[c.state] = c.count;
    put(
      counts,
      table(
        ['type', ...STATES],
        queues.map((q) => {
          /** @type {Record<string, number>} */
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
    /** @type {import('../lib/charts.js').DepthBucket[]} */
    const depthNow = full.depth.map((/** @type {import('../lib/charts.js').DepthBucket} */ b) =>
      b.bucket_end === lastEnd && pendingNow.has(b.task_type) ? { ...b, depth: pendingNow.get(b.task_type) } : b,
    );
    if (!fresh) {
      put(depth, depthChart(depthNow));
      return;
    }
    put(throughput, throughputChart(full.throughput, 3600, 60));
    put(depth, depthChart(depthNow));
    /** @type {Map<string, Record<string, number>>} */
    const totals = new Map();
    for (const b of full.throughput) {
      const t = totals.get(b.task_type) ?? {};
      t[b.outcome] = (t[b.outcome] ?? 0) + b.completed;
      totals.set(b.task_type, t);
    }
    put(
      perType,
      table(
        ['type', ...OUTCOMES],
        [...totals.entries()].map(([type, t]) =>
          h(
            'tr',
            {},
            h('td', {}, type),
            OUTCOMES.map((k) => h('td', { class: 'num' }, t[k] ?? 0)),
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
        full.capacity.map((/** @type {any} */ c) =>
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
