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
  const [types, counts, stats, capacity, queues] = await Promise.all([
    store.taskTypes(),
    store.counts(WINDOW),
    store.completionStats(WINDOW),
    store.capacity(),
    store.queues(),
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

  out.family('queue_paused', 'gauge', 'Whether claiming of this task type is paused (1) or not (0).');
  for (const q of queues) out.sample('queue_paused', { task_type: q.task_type }, q.paused ? 1 : 0);

  out.family('queue_active_workers', 'gauge', 'Registered workers of this task type seen in the last 10 minutes.');
  for (const c of capacity) out.sample('queue_active_workers', { task_type: c.task_type }, c.active_workers);
  out.family('queue_tasks_per_worker_hour', 'gauge', 'Throughput estimate over the last hour (absent without completions).');
  for (const c of capacity) if (c.tasks_per_worker_hour !== null) out.sample('queue_tasks_per_worker_hour', { task_type: c.task_type }, c.tasks_per_worker_hour);
  out.family('queue_workers_needed', 'gauge', 'Workers needed to drain the pending tasks within `hours` (absent without a throughput estimate).');
  for (const c of capacity) {
    const needed = { 1: c.workers_needed.for_1_hour, 4: c.workers_needed.for_4_hours, 8: c.workers_needed.for_8_hours };
    for (const [hours, n] of Object.entries(needed)) if (n !== null) out.sample('queue_workers_needed', { task_type: c.task_type, hours }, n);
  }
  return out.toString();
}
