/**
 * Prometheus metrics of one in-process Worker (prom-client), fed by its events:
 *   claimed     → queue_worker_tasks_claimed_total{task_type}
 *   completed   → queue_worker_tasks_completed_total{task_type,outcome},
 *                 queue_worker_tasks_failed_total{task_type} (outcome failed or an error;
 *                 not a validation failure, a business outcome),
 *                 queue_worker_task_duration_seconds{task_type} (histogram)
 *   lease_lost  → queue_worker_leases_lost_total{task_type}
 *   cancelled   → queue_worker_tasks_cancelled_total{task_type} (cancelled while running)
 *   timed_out   → queue_worker_tasks_timed_out_total{task_type} (its run timeout passed)
 *   released    → queue_worker_leases_released_total
 *   extended    → queue_worker_lease_extensions_total
 * plus queue_worker_tasks_in_flight (claimed, not yet completed, lost or released).
 * `labels` (e.g. worker_id) are added to every sample.
 *
 *   const metrics = new WorkerMetrics(worker, { worker_id });             // subscribe
 *   const server = await serveWorkerMetrics(metrics, { port: 9464 });   // GET /metrics, node:http
 *
 * The same port answers GET /healthz and GET /readyz when given a WorkerHealth (health.ts).
 *
 * Each WorkerMetrics has its own registry, so several workers in one process do not mix.
 * prom-client is loaded by the first WorkerMetrics and node:http by the first server: a
 * worker without METRICS_PORT loads neither (about 1.5 and 1.8 MB of heap; a larger heap
 * also lets the garbage of a busy worker grow larger before it is collected).
 */
import { createRequire } from 'node:module';
import type { Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type * as PromClient from 'prom-client';
import type { HealthReport, WorkerHealth } from './health.js';

const require = createRequire(import.meta.url);
let promClient: typeof PromClient | undefined;
const prom = (): typeof PromClient => (promClient ??= require('prom-client') as typeof PromClient);

/** The duration bucket bounds (seconds), the same as admin.duration_buckets() in SQL. */
export const DURATION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

interface TaskLike {
  taskId: string | number;
  taskType: string;
}

/** The events of the Worker that the metrics use. */
export interface WorkerEventSource {
  on(event: 'claimed', listener: (tasks: TaskLike[]) => void): unknown;
  on(
    event: 'completed',
    listener: (task: TaskLike, report: { outcome: string; error?: string }, durationMs: number) => void,
  ): unknown;
  on(event: 'lease_lost', listener: (task: TaskLike) => void): unknown;
  on(event: 'cancelled', listener: (task: TaskLike) => void): unknown;
  on(event: 'timed_out', listener: (task: TaskLike) => void): unknown;
  on(event: 'released', listener: (taskIds: string[]) => void): unknown;
  on(event: 'extended', listener: (count: number) => void): unknown;
}

export class WorkerMetrics {
  readonly registry: PromClient.Registry;
  readonly #inFlight = new Set<string>();

  constructor(worker: WorkerEventSource, labels: Record<string, string> = {}) {
    const { Counter, Gauge, Histogram, Registry } = prom();
    this.registry = new Registry();
    this.registry.setDefaultLabels(labels);
    const registers = [this.registry];
    const claimed = new Counter({
      name: 'queue_worker_tasks_claimed_total',
      help: 'Tasks claimed by this worker.',
      labelNames: ['task_type'],
      registers,
    });
    const completed = new Counter({
      name: 'queue_worker_tasks_completed_total',
      help: 'Tasks completed by this worker, by outcome.',
      labelNames: ['task_type', 'outcome'],
      registers,
    });
    const failed = new Counter({
      name: 'queue_worker_tasks_failed_total',
      help: 'Tasks whose processing failed (outcome failed, or an error recorded other than a validation failure).',
      labelNames: ['task_type'],
      registers,
    });
    const leasesLost = new Counter({
      name: 'queue_worker_leases_lost_total',
      help: 'Leases lost to another worker after expiry or revocation.',
      labelNames: ['task_type'],
      registers,
    });
    const cancelled = new Counter({
      name: 'queue_worker_tasks_cancelled_total',
      help: 'Runs cancelled while running (the worker aborted them, nothing recorded).',
      labelNames: ['task_type'],
      registers,
    });
    const timedOut = new Counter({
      name: 'queue_worker_tasks_timed_out_total',
      help: 'Runs whose task type run timeout passed (recorded as failed).',
      labelNames: ['task_type'],
      registers,
    });
    const released = new Counter({
      name: 'queue_worker_leases_released_total',
      help: 'Leases given back at shutdown.',
      registers,
    });
    const extensions = new Counter({
      name: 'queue_worker_lease_extensions_total',
      help: 'Lease extensions (heartbeats) recorded.',
      registers,
    });
    const inFlight = this.#inFlight;
    new Gauge({
      name: 'queue_worker_tasks_in_flight',
      help: 'Tasks claimed and not yet finished.',
      registers,
      collect() {
        this.set(inFlight.size);
      },
    });
    const duration = new Histogram({
      name: 'queue_worker_task_duration_seconds',
      help: 'Processing time from claim to completion.',
      labelNames: ['task_type'],
      buckets: DURATION_BUCKETS,
      registers,
    });

    worker.on('claimed', (tasks) => {
      for (const t of tasks) {
        claimed.inc({ task_type: t.taskType });
        inFlight.add(String(t.taskId));
      }
    });
    worker.on('completed', (task, report, durationMs) => {
      inFlight.delete(String(task.taskId));
      completed.inc({ task_type: task.taskType, outcome: report.outcome });
      if (report.outcome === 'failed' || (report.error && report.outcome !== 'validation_failed')) {
        failed.inc({ task_type: task.taskType });
      }
      duration.observe({ task_type: task.taskType }, durationMs / 1000);
    });
    worker.on('lease_lost', (task) => {
      inFlight.delete(String(task.taskId));
      leasesLost.inc({ task_type: task.taskType });
    });
    worker.on('cancelled', (task) => {
      inFlight.delete(String(task.taskId));
      cancelled.inc({ task_type: task.taskType });
    });
    worker.on('timed_out', (task) => timedOut.inc({ task_type: task.taskType }));
    worker.on('released', (taskIds) => {
      for (const id of taskIds) inFlight.delete(String(id));
      released.inc(taskIds.length);
    });
    worker.on('extended', (count) => extensions.inc(count));
  }

  /** The value of one sample (0 when absent): `value('queue_worker_tasks_claimed_total', { task_type: 'email' })`. */
  async value(name: string, labels: Record<string, string> = {}): Promise<number> {
    const metric = this.registry.getSingleMetric(name);
    if (!metric) throw new Error(`no metric ${name}`);
    const { values } = await metric.get();
    const found = values.find(
      (v) =>
        (v as { metricName?: string }).metricName === undefined &&
        Object.entries(labels).every(([k, want]) => String((v.labels as Record<string, unknown>)[k]) === want),
    );
    return found?.value ?? 0;
  }

  /** The Prometheus text exposition. */
  render(): Promise<string> {
    return this.registry.metrics();
  }
}

export interface WorkerMetricsServer {
  server: Server;
  port: number;
  close(): Promise<void>;
}

/**
 * Serves `metrics.render()` at GET /metrics on host:port (default 127.0.0.1:9464), with
 * node:http; with `health`, also GET /healthz and GET /readyz (health.ts): 200 or 503 with
 * a JSON body naming each check.
 */
export async function serveWorkerMetrics(
  metrics: WorkerMetrics,
  options: { port?: number; host?: string; health?: WorkerHealth } = {},
): Promise<WorkerMetricsServer> {
  const { createServer } = await import('node:http');
  const { health } = options;
  const answer = (response: ServerResponse, report: HealthReport) =>
    response
      .writeHead(report.status === 'ok' ? 200 : 503, {
        'content-type': 'application/json',
        'cache-control': 'no-store',
      })
      .end(`${JSON.stringify(report)}\n`);
  const server = createServer((request, response) => {
    const path = request.url?.split('?')[0];
    const get = request.method === 'GET' || request.method === 'HEAD';
    if (get && path === '/metrics') {
      metrics.render().then(
        (text) => response.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
        (error: unknown) =>
          response.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics failed: ${String(error)}\n`),
      );
    } else if (get && health && path === '/healthz') {
      answer(response, health.live());
    } else if (get && health && path === '/readyz') {
      health.ready().then(
        (report) => answer(response, report),
        (error: unknown) =>
          response.writeHead(503, { 'content-type': 'text/plain' }).end(`readiness failed: ${String(error)}\n`),
      );
    } else {
      response
        .writeHead(404, { 'content-type': 'text/plain' })
        .end(`not found; try GET /metrics${health ? ', /healthz or /readyz' : ''}\n`);
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
