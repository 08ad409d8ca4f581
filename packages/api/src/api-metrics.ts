/**
 * GET /metrics of the API: gauges computed from the database at scrape time. Counts of
 * pending tasks come from the claim index; completions and durations cover the last hour
 * (a sliding window, hence gauges, not counters). Per-worker counters (claims,
 * completions, lease extensions as they happen) come from each worker's own /metrics
 * (see worker-metrics.ts).
 */
import { DURATION_BUCKETS, Exposition } from './prometheus.js';
import type { Store } from './store.js';

const PENDING_STATES = ['scheduled', 'ready', 'running', 'retrying'];
const WINDOW = 3600;

export async function renderApiMetrics(store: Store): Promise<string> {
  const [types, counts, stats, capacity, history] = await Promise.all([
    store.taskTypes(),
    store.counts(WINDOW),
    store.completionStats(WINDOW),
    store.capacity(),
    store.history(),
  ]);
  const out = new Exposition();

  out.family('queue_tasks', 'gauge', 'Tasks not completed, by task type and state (scheduled, ready, running, retrying).');
  for (const { task_type } of types) {
    for (const state of PENDING_STATES) {
      const found = counts.find((c) => c.task_type === task_type && c.state === state);
      out.sample('queue_tasks', { task_type, state }, found?.count ?? 0);
    }
  }

  out.family('queue_depth', 'gauge', 'Tasks not completed (queue depth), by task type.');
  for (const { task_type } of types) {
    const depth = counts.filter((c) => c.task_type === task_type && PENDING_STATES.includes(c.state)).reduce((s, c) => s + c.count, 0);
    out.sample('queue_depth', { task_type }, depth);
  }

  out.family('queue_tasks_completed_window', 'gauge', `Tasks completed in the last ${WINDOW} s, by task type and outcome.`);
  for (const s of stats) out.sample('queue_tasks_completed_window', { task_type: s.task_type, outcome: s.outcome, window_seconds: WINDOW }, s.completed);

  out.family(
    'queue_task_duration_window_seconds',
    'gauge',
    `Durations (lease to completion) of tasks completed in the last ${WINDOW} s: cumulative bucket counts, sum and count, by task type and outcome.`,
  );
  for (const s of stats) {
    out.histogram('queue_task_duration_window_seconds', { task_type: s.task_type, outcome: s.outcome }, DURATION_BUCKETS, s.duration_buckets, s.duration_sum, s.timed);
  }

  out.family('queue_active_workers', 'gauge', 'Registered workers of this task type seen in the last 10 minutes.');
  for (const c of capacity) out.sample('queue_active_workers', { task_type: c.task_type }, c.active_workers);
  out.family('queue_tasks_per_worker_hour', 'gauge', 'Throughput estimate over the last hour (absent without completions).');
  for (const c of capacity) if (c.tasks_per_worker_hour !== null) out.sample('queue_tasks_per_worker_hour', { task_type: c.task_type }, c.tasks_per_worker_hour);
  out.family('queue_workers_needed', 'gauge', 'Workers needed to drain the pending tasks within `hours` (absent without a throughput estimate).');
  for (const c of capacity) {
    const needed = { 1: c.workers_needed.for_1_hour, 4: c.workers_needed.for_4_hours, 8: c.workers_needed.for_8_hours };
    for (const [hours, n] of Object.entries(needed)) if (n !== null) out.sample('queue_workers_needed', { task_type: c.task_type, hours }, n);
  }

  // History partitions and retention (docs/operations.md, "Retention and partitions").
  out.family('queue_history_partitions', 'gauge', 'Partition sets of the queue history (the default partition not counted).');
  out.sample('queue_history_partitions', {}, history.partitions.filter((p) => !p.is_default).length);
  out.family('queue_history_partition_bytes', 'gauge', 'Bytes (tables, TOAST, indexes) of each partition set over every history table.');
  for (const p of history.partitions) {
    out.sample('queue_history_partition_bytes', { lower_bound: p.lower_bound ?? 'default', upper_bound: p.upper_bound ?? 'default' }, p.total_bytes);
  }
  out.family('queue_history_default_partition_tasks', 'gauge', 'Tasks in the default partition (0 unless maintenance fell behind).');
  out.sample('queue_history_default_partition_tasks', {}, history.default_partition_tasks);
  out.family('queue_history_retention_seconds', 'gauge', 'Retention window: a set is dropped this long after its newest completion.');
  out.sample('queue_history_retention_seconds', {}, history.retention_seconds);
  out.family('queue_history_oldest_task_timestamp_seconds', 'gauge', 'Enqueue time of the oldest retained task (absent with no task).');
  if (history.oldest_enqueued_at) out.sample('queue_history_oldest_task_timestamp_seconds', {}, Date.parse(history.oldest_enqueued_at) / 1000);
  out.family('queue_history_oldest_task_id', 'gauge', 'Id of the oldest retained task (absent with no task).');
  if (history.oldest_task_id !== null) out.sample('queue_history_oldest_task_id', {}, history.oldest_task_id);
  out.family('queue_history_next_drop_timestamp_seconds', 'gauge', 'When the next partition set leaves the window (absent while none is due or it holds pending tasks).');
  if (history.next_drop?.drop_after) out.sample('queue_history_next_drop_timestamp_seconds', {}, Date.parse(history.next_drop.drop_after) / 1000);
  out.family('queue_history_dropped_sets', 'gauge', 'Partition sets dropped by retention so far.');
  out.sample('queue_history_dropped_sets', {}, history.dropped_sets);
  return out.toString();
}
