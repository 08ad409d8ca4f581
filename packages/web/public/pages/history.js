// @ts-check
// #/history — history and retention: the settings and maintenance schedule, the next
// drop and why it waits, each partition set with its state, sizes and oldest task, and
// the recent drops.
import { api } from '../lib/api-client.js';
import { fieldsTable, h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { fmtAge, fmtBytes, fmtTime, fmtWindow, stateBadge, taskLink, timeCell } from '../lib/format.js';
import { live, showPaused, SLOW_REFRESH_MS } from '../lib/live.js';

/** @typedef {import('../lib/dom.js').Child} Child */

/** @type {Record<string, [string, string]>} A set's state: its name and what it means. */
const SET_STATES = {
  ahead: ['ahead', 'created ahead of need: no task yet'],
  current: ['current', 'new tasks land here'],
  next_drop: ['next to drop', 'the oldest set below the last task id: retention drops it first'],
  retained: ['retained', 'kept until the sets below it are dropped and its window has passed'],
  default: ['default', 'tasks outside every set (should be empty)'],
};

/**
 * A set's task ids, or the default partition.
 * @param {any} p a set of GET /api/history `partitions`
 */
const setRange = (p) => (p.is_default ? 'default partition' : `${p.lower_bound}–${p.upper_bound - 1}`);

/**
 * Why the next set is not dropped yet, or when it goes.
 * @param {any} status GET /api/history
 * @returns {Child}
 */
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

/**
 * The maintenance schedule and its last run.
 * @param {any} m GET /api/history `maintenance`
 * @returns {Child}
 */
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

/**
 * A partition set's row.
 * @param {any} p a set of GET /api/history `partitions`
 */
const setRow = (p) =>
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
  );

export async function historyPage() {
  await showPaused();
  const settings = h('div');
  const next = h('p', { 'data-testid': 'next-drop' });
  const sets = h('div');
  const drops = h('div');
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
          ` enqueued ${fmtTime(s.oldest_enqueued_at)} (${fmtAge((new Date(s.now).getTime() - new Date(s.oldest_enqueued_at).getTime()) / 1000)} ago)`,
        )
      : h('span', { class: 'muted', 'data-testid': 'oldest-task' }, 'no task retained');
    /** @type {[string, Child][]} */
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
    put(settings, fieldsTable(fields, { 'data-testid': 'history-settings' }));
    put(next, nextDropText(s));
    /** @type {any[]} */
    const partitions = s.partitions;
    const t = s.totals;
    put(
      sets,
      partitions.some((p) => !p.is_default)
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
          ...partitions.map(setRow),
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
        s.recent_drops.map((/** @type {any} */ d) =>
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
