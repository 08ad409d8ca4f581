/**
 * GET /metrics of the API (prom-client): gauges computed from the database at scrape time.
 * Counts of pending tasks come from the claim index; completions and durations cover the
 * last hour (a sliding window, hence gauges, not counters). Per-worker counters (claims,
 * completions, lease extensions as they happen) come from each worker's own /metrics
 * (@org/worker's WorkerMetrics).
 *
 * Every scrape fills a new registry, so a task type or outcome that disappeared from the
 * database disappears from the exposition too.
 */
import { Gauge, Registry } from 'prom-client';
import type { Store } from './store.js';

const PENDING_STATES = ['waiting', 'scheduled', 'ready', 'running', 'retrying'];
const WINDOW = 3600;
/** The duration bucket bounds (seconds), the same as admin.duration_buckets() in SQL. */
const DURATION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

export async function renderApiMetrics(store: Store): Promise<{ text: string; contentType: string }> {
  const [types, counts, stats, capacity, queues, history, throttles, limits] = await Promise.all([
    store.taskTypes(),
    store.counts(WINDOW),
    store.completionStats(WINDOW),
    store.capacity(),
    store.queues(),
    store.history(),
    store.throttles(),
    store.limits(),
  ]);
  const registry = new Registry();
  const gauge = (name: string, help: string, labelNames: string[]) =>
    new Gauge({ name, help, labelNames, registers: [registry] });

  const tasks = gauge(
    'queue_tasks',
    'Tasks not completed, by task type and state (scheduled, ready, running, retrying).',
    ['task_type', 'state'],
  );
  const depth = gauge('queue_depth', 'Tasks not completed (queue depth), by task type.', ['task_type']);
  for (const { task_type } of types) {
    let total = 0;
    for (const state of PENDING_STATES) {
      const n = counts.find((c) => c.task_type === task_type && c.state === state)?.count ?? 0;
      tasks.set({ task_type, state }, n);
      total += n;
    }
    depth.set({ task_type }, total);
  }

  const completed = gauge(
    'queue_tasks_completed_window',
    `Tasks completed in the last ${WINDOW} s, by task type and outcome.`,
    ['task_type', 'outcome', 'window_seconds'],
  );
  for (const s of stats)
    completed.set({ task_type: s.task_type, outcome: s.outcome, window_seconds: WINDOW }, s.completed);

  // A histogram over a sliding window is not a prom-client Histogram (whose buckets only
  // grow): the three series are gauges, named as a histogram's so histogram_quantile()
  // reads them.
  const what = `lease-to-completion durations of tasks completed in the last ${WINDOW} s, by task type and outcome`;
  const buckets = gauge('queue_task_duration_window_seconds_bucket', `Cumulative bucket counts of ${what}.`, [
    'task_type',
    'outcome',
    'le',
  ]);
  const sum = gauge('queue_task_duration_window_seconds_sum', `Sum of ${what}.`, ['task_type', 'outcome']);
  const count = gauge('queue_task_duration_window_seconds_count', `Count of ${what}.`, ['task_type', 'outcome']);
  for (const s of stats) {
    const labels = { task_type: s.task_type, outcome: s.outcome };
    DURATION_BUCKETS.forEach((le, i) => buckets.set({ ...labels, le: String(le) }, s.duration_buckets[i] ?? 0));
    buckets.set({ ...labels, le: '+Inf' }, s.timed);
    sum.set(labels, s.duration_sum);
    count.set(labels, s.timed);
  }

  const paused = gauge('queue_paused', 'Whether claiming of this task type is paused (1) or not (0).', ['task_type']);
  for (const q of queues) {
    paused.set({ task_type: q.task_type }, q.paused ? 1 : 0);
  }

  // Provider back-pressure (docs/flow-control.md): claims leave a throttled type's tasks.
  const throttled = gauge(
    'queue_throttled',
    'Whether a provider throttle holds this task type (channel) back from claims (1) or not (0).',
    ['task_type'],
  );
  const throttledUntil = gauge(
    'queue_throttled_until_timestamp_seconds',
    'Until when a provider throttle holds a key back (absent while none is in force).',
    ['key_kind', 'key'],
  );
  const throttleReports = gauge(
    'queue_throttle_reports',
    'Throttle reports in force for a key (how many runs met the provider refusing them).',
    ['key_kind', 'key'],
  );
  for (const { task_type } of types)
    throttled.set({ task_type }, throttles.some((t) => t.key_kind === 'task_type' && t.key === task_type) ? 1 : 0);
  for (const t of throttles) {
    throttledUntil.set({ key_kind: t.key_kind, key: t.key }, new Date(t.throttled_until).getTime() / 1000);
    throttleReports.set({ key_kind: t.key_kind, key: t.key }, t.reports);
  }

  // Flow limits (docs/flow-control.md): one series per limit in force, none without limits.
  // The group_key label is empty for the scopes 'type' and 'each_group'.
  const limitLabels = ['task_type', 'scope', 'group_key'];
  const heldBack = gauge(
    'queue_limit_held_back_tasks',
    'Tasks ready now that a full flow limit holds back, per limit (each_group: summed over its full group keys).',
    limitLabels,
  );
  const limitRunning = gauge('queue_limit_running_tasks', 'Tasks holding a live lease, per flow limit.', limitLabels);
  const limitStarts = gauge(
    'queue_limit_window_starts',
    'Tasks claimed in the current window of a rate limit, per flow limit.',
    limitLabels,
  );
  for (const l of limits) {
    const labels = { task_type: l.task_type, scope: l.scope, group_key: l.group_key ?? '' };
    heldBack.set(labels, l.held_back);
    limitRunning.set(labels, l.running);
    if (l.interval_ms !== null) limitStarts.set(labels, l.starts);
  }

  const active = gauge('queue_active_workers', 'Registered workers of this task type seen in the last 10 minutes.', [
    'task_type',
  ]);
  const perHour = gauge(
    'queue_tasks_per_worker_hour',
    'Throughput estimate over the last hour (absent without completions).',
    ['task_type'],
  );
  const needed = gauge(
    'queue_workers_needed',
    'Workers needed to drain the pending tasks within `hours` (absent without a throughput estimate).',
    ['task_type', 'hours'],
  );
  for (const c of capacity) {
    active.set({ task_type: c.task_type }, c.active_workers);
    if (c.tasks_per_worker_hour !== null) perHour.set({ task_type: c.task_type }, c.tasks_per_worker_hour);
    const byHours = {
      1: c.workers_needed.for_1_hour,
      4: c.workers_needed.for_4_hours,
      8: c.workers_needed.for_8_hours,
    };
    for (const [hours, n] of Object.entries(byHours)) if (n !== null) needed.set({ task_type: c.task_type, hours }, n);
  }

  // History partitions and retention (docs/operations.md, "Retention and partitions").
  gauge('queue_history_partitions', 'Partition sets of the queue history (the default partition not counted).', []).set(
    history.partitions.filter((p) => !p.is_default).length,
  );
  const partitionBytes = gauge(
    'queue_history_partition_bytes',
    'Bytes (tables, TOAST, indexes) of each partition set over every history table.',
    ['lower_bound', 'upper_bound'],
  );
  const partitionTasks = gauge(
    'queue_history_partition_tasks',
    "Tasks of each partition set (task ids handed out from its oldest to its newest task; the default partition's count).",
    ['lower_bound', 'upper_bound'],
  );
  for (const p of history.partitions) {
    const labels = { lower_bound: p.lower_bound ?? 'default', upper_bound: p.upper_bound ?? 'default' };
    partitionBytes.set(labels, p.total_bytes);
    partitionTasks.set(labels, p.tasks);
  }
  const bytes = gauge('queue_history_bytes', 'Bytes of the whole history: tables (with TOAST) or indexes.', ['kind']);
  bytes.set({ kind: 'table' }, history.totals.table_bytes);
  bytes.set({ kind: 'index' }, history.totals.index_bytes);
  gauge(
    'queue_history_default_partition_tasks',
    'Tasks in the default partition (0 unless maintenance fell behind).',
    [],
  ).set(history.default_partition_tasks);
  gauge(
    'queue_history_retention_seconds',
    'Retention window: a set is dropped this long after its newest completion.',
    [],
  ).set(history.retention_seconds);
  // A gauge without labels reads 0 until set, so one that may have no value is
  // registered only when it has one: absent, not 0 (a next drop at 0 would read as overdue).
  const optional = (name: string, help: string, value: number | null | undefined) => {
    if (value !== null && value !== undefined) gauge(name, help, []).set(value);
  };
  const seconds = (iso: string | null | undefined) => (iso ? Date.parse(iso) / 1000 : null);
  optional(
    'queue_history_oldest_task_timestamp_seconds',
    'Enqueue time of the oldest retained task (absent with no task).',
    seconds(history.oldest_enqueued_at),
  );
  optional(
    'queue_history_oldest_task_id',
    'Id of the oldest retained task (absent with no task).',
    history.oldest_task_id,
  );
  optional(
    'queue_history_next_drop_timestamp_seconds',
    'When the next partition set leaves the window (absent while none is due or it holds pending tasks).',
    seconds(history.next_drop?.drop_after),
  );
  optional(
    'queue_history_next_drop_pending_tasks',
    'Pending tasks in the next set to drop: above 0, they keep it, however old (absent without a set to drop).',
    history.next_drop?.pending_tasks,
  );
  optional(
    'queue_history_last_drop_timestamp_seconds',
    'When retention last dropped a partition set (absent before the first drop).',
    seconds(history.last_dropped_at),
  );
  gauge('queue_history_dropped_sets', 'Partition sets dropped by retention so far.', []).set(history.dropped_sets);
  gauge(
    'queue_history_skipped_steps_last_hour',
    'Maintenance steps skipped in the last hour: no moment free of the queue for their locks within lock_timeout_ms.',
    [],
  ).set(history.skipped_steps_last_hour);
  return { text: await registry.metrics(), contentType: registry.contentType };
}
