// The role-based worker system on the dashboard: each seed role's queue (overview) and a
// task's results (task page). Rendered with app.js's own `h` and `table` helpers.
export const SEED_ROLES = [
  'store_discovery',
  'entry_point_discovery',
  'product_discovery',
  'product_resync',
  'analytics_refresh',
];

/** One row per seed role: its queue now, the workers serving it, workers needed for 4 h. */
export function roleQueues(h, table, capacity) {
  const byType = new Map(capacity.map((c) => [c.task_type, c]));
  const rows = SEED_ROLES.filter((role) => byType.has(role)).map((role) => {
    const c = byType.get(role);
    const link = (state, n) => (n ? h('a', { href: `#/tasks?task_type=${role}&state=${state}` }, n) : '0');
    return h(
      'tr',
      { 'data-role': role },
      h('td', {}, h('a', { href: `#/tasks?task_type=${role}` }, role)),
      h('td', { class: 'num' }, c.pending_tasks),
      h('td', { class: 'num' }, link('ready', c.ready_tasks)),
      h('td', { class: 'num' }, link('running', c.running_tasks)),
      h('td', { class: 'num' }, c.active_workers),
      h('td', { class: 'num' }, c.workers_needed.for_4_hours ?? '—'),
    );
  });
  return h(
    'section',
    {},
    h('h2', {}, 'Worker roles'),
    h(
      'p',
      { class: 'muted' },
      'Each role is claimed only by workers started with it: WORKER_ROLE=product_resync npm start.',
    ),
    table(['role', 'pending', 'ready', 'running', 'workers', 'needed for 4 h'], rows, { 'data-testid': 'role-queues' }),
  );
}

/** A task's results (one per run that recorded one), newest last. */
export function taskResults(h, table, results) {
  return h(
    'section',
    {},
    h('h2', {}, 'Results'),
    results.length
      ? table(
          ['lease', 'recorded', 'result'],
          results.map((r) =>
            h(
              'tr',
              {},
              h('td', {}, r.task_lease_id),
              h('td', {}, new Date(r.recorded_at).toLocaleString()),
              h('td', {}, h('pre', {}, JSON.stringify(r.result, null, 2))),
            ),
          ),
          { 'data-testid': 'results' },
        )
      : h('p', { class: 'muted', 'data-testid': 'results' }, 'no result recorded'),
  );
}
