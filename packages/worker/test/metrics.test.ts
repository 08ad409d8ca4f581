// The worker's Prometheus metrics (prom-client): every Worker event counted under the
// documented names and labels, served by node:http at GET /metrics. And what the worker
// loads only when its configuration asks for it (prom-client among others).
import { execFileSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { serveWorkerMetrics, WorkerMetrics } from '@org/worker';

describe('WorkerMetrics', () => {
  it('counts a worker’s events and serves them on GET /metrics', async () => {
    const worker = new EventEmitter();
    const metrics = new WorkerMetrics(worker, { worker_id: 'w-1' });
    const email = { taskId: '1', taskType: 'email' };
    const sms = { taskId: '2', taskType: 'sms' };
    worker.emit('claimed', [email, sms, { taskId: '5', taskType: 'email' }]);
    worker.emit('completed', email, { outcome: 'succeeded' }, 120);
    worker.emit('completed', sms, { outcome: 'failed', error: 'x' }, 2000);
    worker.emit('extended', 3);
    worker.emit('lease_lost', { taskId: '3', taskType: 'email' });
    worker.emit('released', ['4']);
    const server = await serveWorkerMetrics(metrics, { port: 0 });
    try {
      const response = await fetch(`http://127.0.0.1:${server.port}/metrics`);
      expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      const text = await response.text();
      expect(text).toContain('# TYPE queue_worker_tasks_claimed_total counter');
      expect(text).toContain('queue_worker_tasks_claimed_total{task_type="email",worker_id="w-1"} 2');
      expect(text).toContain('queue_worker_tasks_completed_total{task_type="sms",outcome="failed",worker_id="w-1"} 1');
      expect(text).toContain(
        'queue_worker_tasks_completed_total{task_type="email",outcome="succeeded",worker_id="w-1"} 1',
      );
      expect(text).toContain('queue_worker_tasks_failed_total{task_type="sms",worker_id="w-1"} 1');
      expect(text).not.toContain('queue_worker_tasks_failed_total{task_type="email"');
      expect(text).toContain('queue_worker_lease_extensions_total{worker_id="w-1"} 3');
      expect(text).toContain('queue_worker_leases_lost_total{task_type="email",worker_id="w-1"} 1');
      expect(text).toContain('queue_worker_leases_released_total{worker_id="w-1"} 1');
      // Claimed 1, 2, 5; 1 and 2 completed: 5 is still running.
      expect(text).toContain('queue_worker_tasks_in_flight{worker_id="w-1"} 1');
      expect(text).toContain('# TYPE queue_worker_task_duration_seconds histogram');
      expect(text).toContain('queue_worker_task_duration_seconds_bucket{le="0.1",worker_id="w-1",task_type="email"} 0');
      expect(text).toContain(
        'queue_worker_task_duration_seconds_bucket{le="0.25",worker_id="w-1",task_type="email"} 1',
      );
      expect(text).toContain('queue_worker_task_duration_seconds_count{worker_id="w-1",task_type="sms"} 1');
      expect(text).toContain('queue_worker_task_duration_seconds_sum{worker_id="w-1",task_type="sms"} 2');
      expect(await metrics.value('queue_worker_tasks_claimed_total', { task_type: 'email' })).toBe(2);
      expect(await metrics.value('queue_worker_tasks_claimed_total', { task_type: 'fax' })).toBe(0);
      expect((await fetch(`http://127.0.0.1:${server.port}/other`)).status).toBe(404);
    } finally {
      await server.close();
    }
  });

  it('two workers in one process keep their own counts', async () => {
    const a = new EventEmitter();
    const b = new EventEmitter();
    const ma = new WorkerMetrics(a, { worker_id: 'a' });
    const mb = new WorkerMetrics(b, { worker_id: 'b' });
    a.emit('claimed', [{ taskId: '1', taskType: 'email' }]);
    expect(await ma.value('queue_worker_tasks_claimed_total', { task_type: 'email' })).toBe(1);
    expect(await mb.value('queue_worker_tasks_claimed_total', { task_type: 'email' })).toBe(0);
    expect(await mb.render()).not.toContain('worker_id="a"');
  });

  it('prom-client, node:http, OpenTelemetry, pino-pretty and the pgtyped parser load only when asked for', () => {
    // A fresh process: what importing the worker (and making a Worker and a JSON logger)
    // loads, then what making and serving metrics, a pretty logger and a tracer load.
    const snippet = `
      import { createRequire } from 'node:module';
      import { EventEmitter } from 'node:events';
      const loaded = () => {
        const names = Object.keys(createRequire(process.cwd() + '/x.js').cache);
        return ['antlr4ts', '@pgtyped/parser', '@pgtyped/runtime', 'prom-client', 'pino-pretty', '@opentelemetry/api']
          .filter((p) => names.some((n) => n.includes('/node_modules/' + p + '/')))
          .concat(process.moduleLoadList.includes('NativeModule http') ? ['node:http'] : []);
      };
      const w = await import('@org/worker');
      const logger = w.createLogger('info', undefined, 'json');
      new w.Worker({ databaseUrl: 'postgres://nobody@127.0.0.1:1/none', roles: ['db_function'], workerId: 'w',
        concurrency: 1, pollIntervalMs: 1000, heartbeatIntervalMs: 1000, leaseSeconds: 30, maxLeases: 5,
        shutdownGraceMs: 0, registry: new w.ProcessorRegistry().register('db_function', w.dbFunctionProcessor()), logger });
      const before = loaded();
      const server = await w.serveWorkerMetrics(new w.WorkerMetrics(new EventEmitter()), { port: 0 });
      await server.close();
      w.createLogger('info', undefined, 'pretty');
      const { trace } = await import('@opentelemetry/api');
      const { BasicTracerProvider } = await import('@opentelemetry/sdk-trace-base');
      trace.setGlobalTracerProvider(new BasicTracerProvider());
      const { tracingEnabled } = await import('./dist/tracing.js');
      console.log(JSON.stringify({ before, enabled: tracingEnabled(), after: loaded() }));
    `;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', snippet], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      encoding: 'utf8',
    });
    const { before, enabled, after } = JSON.parse(out) as { before: string[]; enabled: boolean; after: string[] };
    expect(before).toEqual([]);
    expect(enabled).toBe(true);
    expect(after).toEqual(['prom-client', 'pino-pretty', '@opentelemetry/api', 'node:http']);
  });

  it('importing the worker loads neither zod nor the menu platform; the first db_function task loads zod', () => {
    // ES modules are not in require's cache: a loader hook posts every module's URL.
    const hooks = `export async function initialize({ port }) { globalThis.port = port; }
      export async function load(url, context, next) { globalThis.port.postMessage(url); return next(url, context); }`;
    const snippet = `
      import { register } from 'node:module';
      import { MessageChannel } from 'node:worker_threads';
      const { port1, port2 } = new MessageChannel();
      const urls = [];
      port1.on('message', (url) => urls.push(url));
      port1.unref();
      register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hooks)}),
        { data: { port: port2 }, transferList: [port2] });
      const settle = () => new Promise((resolve) => setTimeout(resolve, 50));
      // (@org/contracts' schemas, index.js; its ThrottledError, throttled.js, loads no zod)
      const loaded = () => ['/node_modules/zod/', '/menu-sync/', '/config/dist/settings.js', '/contracts/dist/index.js']
        .filter((part) => urls.some((url) => url.includes(part)));
      const w = await import('@org/worker');
      new w.Worker({ databaseUrl: 'postgres://nobody@127.0.0.1:1/none', roles: ['db_function'], workerId: 'w',
        concurrency: 1, pollIntervalMs: 1000, heartbeatIntervalMs: 1000, leaseSeconds: 30, maxLeases: 5,
        shutdownGraceMs: 0, registry: new w.ProcessorRegistry().register('db_function', w.dbFunctionProcessor()),
        logger: w.createLogger('info', undefined, 'json') });
      await settle();
      const before = loaded();
      const step = await w.dbFunctionStep({ payload: { db_function: 'internal.noop' } });
      const invalid = await w.dbFunctionStep({ payload: { db_function: 42 } });
      await settle();
      console.log(JSON.stringify({ before, step, invalid: invalid.outcome, after: loaded() }));
    `;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', snippet], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      encoding: 'utf8',
    });
    const { before, step, invalid, after } = JSON.parse(out) as {
      before: string[];
      step: unknown;
      invalid: string;
      after: string[];
    };
    expect(before).toEqual([]);
    expect(step).toEqual({ outcome: 'succeeded', step: { functionName: 'internal.noop' } });
    expect(invalid).toBe('failed');
    expect(after).toEqual(['/node_modules/zod/', '/contracts/dist/index.js']);
  });
});
