/**
 * Prometheus counters for one in-process Worker (@org/worker), fed by its events:
 *   claimed     → queue_worker_tasks_claimed_total{task_type}
 *   completed   → queue_worker_tasks_completed_total{task_type,outcome},
 *                 queue_worker_tasks_failed_total{task_type} (outcome failed or an error),
 *                 queue_worker_task_duration_seconds{task_type} (histogram)
 *   lease_lost  → queue_worker_leases_lost_total{task_type}
 *   released    → queue_worker_leases_released_total
 *   extended    → queue_worker_lease_extensions_total
 * plus queue_worker_tasks_in_flight (claimed, not yet completed, lost or released).
 *
 *   const metrics = new WorkerMetrics(worker);            // subscribe
 *   const server = await serveWorkerMetrics(metrics, { port: 9464 });  // GET /metrics
 *
 * Typed structurally (WorkerEventSource), so this package does not depend on @org/worker.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DURATION_BUCKETS, Exposition, PROMETHEUS_CONTENT_TYPE } from './prometheus.js';

interface TaskLike {
  taskId: string | number;
  taskType: string;
}

/** The events of @org/worker's Worker that the metrics use. */
export interface WorkerEventSource {
  on(event: 'claimed', listener: (tasks: TaskLike[]) => void): unknown;
  on(event: 'completed', listener: (task: TaskLike, report: { outcome: string; error?: string }, durationMs: number) => void): unknown;
  on(event: 'lease_lost', listener: (task: TaskLike) => void): unknown;
  on(event: 'released', listener: (taskIds: string[]) => void): unknown;
  on(event: 'extended', listener: (count: number) => void): unknown;
  off?(event: string, listener: (...args: never[]) => void): unknown;
}

class Counter {
  readonly values = new Map<string, { labels: Record<string, string>; value: number }>();
  inc(labels: Record<string, string>, by = 1): void {
    const key = JSON.stringify(labels);
    const entry = this.values.get(key) ?? { labels, value: 0 };
    entry.value += by;
    this.values.set(key, entry);
  }
  get(labels: Record<string, string>): number {
    return this.values.get(JSON.stringify(labels))?.value ?? 0;
  }
}

export class WorkerMetrics {
  readonly claimed = new Counter();
  readonly completed = new Counter();
  readonly failed = new Counter();
  readonly leasesLost = new Counter();
  readonly released = new Counter();
  readonly extensions = new Counter();
  readonly #durations = new Map<string, { buckets: number[]; sum: number; count: number }>();
  readonly #inFlight = new Set<string>();

  constructor(worker: WorkerEventSource, readonly labels: Record<string, string> = {}) {
    worker.on('claimed', (tasks) => {
      for (const t of tasks) {
        this.claimed.inc({ task_type: t.taskType });
        this.#inFlight.add(String(t.taskId));
      }
    });
    worker.on('completed', (task, report, durationMs) => {
      this.#inFlight.delete(String(task.taskId));
      this.completed.inc({ task_type: task.taskType, outcome: report.outcome });
      if (report.outcome === 'failed' || report.error) this.failed.inc({ task_type: task.taskType });
      this.observe(task.taskType, durationMs / 1000);
    });
    worker.on('lease_lost', (task) => {
      this.#inFlight.delete(String(task.taskId));
      this.leasesLost.inc({ task_type: task.taskType });
    });
    worker.on('released', (taskIds) => {
      for (const id of taskIds) this.#inFlight.delete(String(id));
      this.released.inc({}, taskIds.length);
    });
    worker.on('extended', (count) => this.extensions.inc({}, count));
  }

  observe(taskType: string, seconds: number): void {
    const h = this.#durations.get(taskType) ?? { buckets: DURATION_BUCKETS.map(() => 0), sum: 0, count: 0 };
    DURATION_BUCKETS.forEach((bound, i) => {
      if (seconds <= bound) h.buckets[i]! += 1;
    });
    h.sum += seconds;
    h.count += 1;
    this.#durations.set(taskType, h);
  }

  /** The Prometheus text exposition of every counter. */
  render(): string {
    const out = new Exposition();
    const counter = (name: string, help: string, c: Counter) => {
      out.family(name, 'counter', help);
      for (const { labels, value } of c.values.values()) out.sample(name, { ...this.labels, ...labels }, value);
    };
    counter('queue_worker_tasks_claimed_total', 'Tasks claimed by this worker.', this.claimed);
    counter('queue_worker_tasks_completed_total', 'Tasks completed by this worker, by outcome.', this.completed);
    counter('queue_worker_tasks_failed_total', 'Tasks whose processing failed (outcome failed or an error recorded).', this.failed);
    counter('queue_worker_leases_lost_total', 'Leases lost to another worker after expiry or revocation.', this.leasesLost);
    counter('queue_worker_leases_released_total', 'Leases given back at shutdown.', this.released);
    counter('queue_worker_lease_extensions_total', 'Lease extensions (heartbeats) recorded.', this.extensions);
    out.family('queue_worker_tasks_in_flight', 'gauge', 'Tasks claimed and not yet finished.');
    out.sample('queue_worker_tasks_in_flight', this.labels, this.#inFlight.size);
    out.family('queue_worker_task_duration_seconds', 'histogram', 'Processing time from claim to completion.');
    for (const [taskType, h] of this.#durations) {
      out.histogram('queue_worker_task_duration_seconds', { ...this.labels, task_type: taskType }, DURATION_BUCKETS, h.buckets, h.sum, h.count);
    }
    return out.toString();
  }
}

export interface WorkerMetricsServer {
  server: Server;
  port: number;
  close(): Promise<void>;
}

/** Serves `metrics.render()` at GET /metrics on host:port (default 127.0.0.1:9464). */
export async function serveWorkerMetrics(
  metrics: WorkerMetrics,
  options: { port?: number; host?: string } = {},
): Promise<WorkerMetricsServer> {
  const server = createServer((request, response) => {
    if (request.method === 'GET' && request.url?.split('?')[0] === '/metrics') {
      response.writeHead(200, { 'content-type': PROMETHEUS_CONTENT_TYPE }).end(metrics.render());
    } else {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found; try GET /metrics\n');
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 9464, options.host ?? '127.0.0.1', () => resolve());
  });
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () => new Promise((resolve, reject) => server.close((e) => (e ? reject(e) : resolve()))),
  };
}
