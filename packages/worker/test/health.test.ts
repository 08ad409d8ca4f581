// The worker's health port (METRICS_PORT): a real worker process on a test database
// answers GET /healthz, /readyz and /metrics; /readyz turns 503 while its database cannot
// be reached (the worker reaches it through a TCP proxy that this test closes) and back to
// 200 when it can again, and 503 while the worker shuts down gracefully, when /healthz
// stays 200 so that a liveness probe does not cut the grace period short.
import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '@org/db-tools';
import { WorkerHealth, type WorkerStatus } from '@org/worker';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { enqueue, eventually, installFixtures } from './support/fixtures.js';
import { startChild, type Child } from './support/child.js';

let db: TestDatabase;
const children: Child[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
});
afterAll(async () => {
  for (const c of children) if (c.process.exitCode === null) c.process.kill('SIGKILL');
  await db?.drop();
});

/** A TCP proxy to the test database that can be closed (connections cut, new ones refused) and opened again. */
class DatabaseProxy {
  #server: Server | undefined;
  readonly #sockets = new Set<Socket>();
  constructor(
    readonly port: number,
    private readonly target: { host: string; port: number },
  ) {}

  open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.target.port, this.target.host);
      for (const s of [client, upstream]) {
        this.#sockets.add(s);
        s.on('close', () => this.#sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    this.#server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
  }

  close(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    for (const s of this.#sockets) s.destroy();
    return new Promise((resolve) => (server ? server.close(() => resolve()) : resolve()));
  }
}

async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: response.status, body: await response.text() };
}

describe('worker health port', () => {
  it('answers /healthz, /readyz and /metrics; readiness follows the database and the shutdown', async () => {
    const url = new URL(db.url('worker'));
    const proxy = new DatabaseProxy(await freePort(), { host: url.hostname, port: Number(url.port) });
    await proxy.open();
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    const port = await freePort();
    const child = startChild({
      DATABASE_URL: url.toString(),
      WORKER_ROLE: 'slow',
      WORKER_ID: 'health-1',
      METRICS_PORT: String(port),
      CONCURRENCY: '2',
      POLL_INTERVAL_MS: '100',
      HEARTBEAT_INTERVAL_MS: '500',
      LEASE_SECONDS: '30',
      SHUTDOWN_GRACE_MS: '60000',
    });
    children.push(child);
    const status = async (path: string) => (await get(port, path).catch(() => ({ status: 0, body: '' }))).status;

    try {
      // Up: every check passes.
      await eventually(async () => (await status('/readyz')) === 200, 'ready', 30_000);
      const ready = JSON.parse((await get(port, '/readyz')).body);
      expect(ready).toMatchObject({ status: 'ok', state: 'running' });
      expect(Object.keys(ready.checks).sort()).toEqual(['claim_loop', 'claims', 'database', 'state']);
      for (const check of Object.values(ready.checks)) expect(check).toMatchObject({ ok: true });
      const live = await get(port, '/healthz');
      expect(live.status).toBe(200);
      expect(JSON.parse(live.body)).toMatchObject({ status: 'ok', state: 'running' });
      const metrics = await get(port, '/metrics');
      expect(metrics.status).toBe(200);
      expect(metrics.body).toContain('# TYPE queue_worker_tasks_in_flight gauge');
      expect(metrics.body).toContain('queue_worker_tasks_in_flight{worker_id="health-1"} 0');
      expect((await get(port, '/nothing')).status).toBe(404);

      // The database unreachable: not ready (and why), still alive.
      await proxy.close();
      // (Failing claims may say so first; the database check follows within its cache time.)
      let down: { status: string; checks: Record<string, { ok: boolean; detail: string }> } | undefined;
      await eventually(async () => {
        const r = await get(port, '/readyz');
        down = JSON.parse(r.body);
        return r.status === 503 && !down!.checks.database.ok;
      }, 'not ready, the database check failing, while the database is down');
      expect(down!.status).toBe('unavailable');
      expect(down!.checks.database.detail).toMatch(/^database unreachable: /);
      expect((await get(port, '/healthz')).status).toBe(200);

      // Reachable again: ready again.
      await proxy.open();
      await eventually(async () => (await status('/readyz')) === 200, 'ready once the database is back', 30_000);

      // A task running, then SIGTERM: not ready (no new claims) while the task gets its
      // grace period, alive all along; then a clean exit.
      const taskId = await enqueue(db, 'slow', { ms: 8000 });
      await eventually(
        async () =>
          (
            await db.query('select 1 from queues.task_lease_effective where task_id = $1 and worker_id = $2', [
              taskId,
              'health-1',
            ])
          ).rowCount === 1,
        'the slow task leased',
      );
      child.process.kill('SIGTERM');
      await eventually(async () => (await status('/readyz')) === 503, 'not ready while shutting down');
      const stopping = JSON.parse((await get(port, '/readyz')).body);
      expect(stopping).toMatchObject({ status: 'unavailable', state: 'stopping' });
      expect(stopping.checks.state).toEqual({ ok: false, detail: 'shutting down: no new claims' });
      const aliveWhileStopping = await get(port, '/healthz');
      expect(aliveWhileStopping.status).toBe(200);
      expect(JSON.parse(aliveWhileStopping.body)).toMatchObject({ status: 'ok', state: 'stopping' });
      expect(await child.exited).toEqual({ code: 0, signal: null });
    } finally {
      await proxy.close();
    }
  });
});

describe('WorkerHealth', () => {
  const running: WorkerStatus = {
    state: 'running',
    loopRunning: true,
    msSinceLoopTurn: 5,
    claimFailures: 0,
    running: 0,
    timedOut: 0,
    waiting: 0,
    pollIntervalMs: 1000,
  };
  const health = (status: Partial<WorkerStatus>, databaseUrl = db.url('worker')) =>
    new WorkerHealth({ status: () => ({ ...running, ...status }) }, { databaseUrl });
  const failing = async (status: Partial<WorkerStatus>, databaseUrl?: string) =>
    Object.entries((await health(status, databaseUrl).ready()).checks)
      .filter(([, c]) => !c.ok)
      .map(([name]) => name);

  it('is ready only when running, turning, claiming and reaching its database', async () => {
    expect(await health({}).ready()).toMatchObject({ status: 'ok', state: 'running' });
    expect(await failing({ claimFailures: 2 })).toEqual(['claims']);
    // A loop with no turn for max(3 × poll interval, 60 s) is stuck.
    expect(await failing({ msSinceLoopTurn: 59_000 })).toEqual([]);
    expect(await failing({ msSinceLoopTurn: 61_000 })).toEqual(['claim_loop']);
    expect(await failing({ msSinceLoopTurn: 61_000, pollIntervalMs: 30_000 })).toEqual([]);
    expect(await failing({ loopRunning: false })).toEqual(['claim_loop']);
    const closed = `postgres://nobody:x@127.0.0.1:${await freePort()}/none`;
    expect(await failing({}, closed)).toEqual(['database']);
    // Starting or stopping: not ready, and no connection is opened to find out.
    expect(await failing({ state: 'starting', loopRunning: false, msSinceLoopTurn: null }, closed)).toEqual([
      'state',
      'claim_loop',
      'database',
    ]);
    expect((await health({ state: 'stopping' }).ready()).checks.database).toEqual({
      ok: false,
      detail: 'not checked: not running',
    });
  });

  it('is alive while it runs, starts and stops, not when its claim loop ended on its own', () => {
    for (const state of ['created', 'starting', 'running', 'stopping'] as const)
      expect(health({ state, loopRunning: state !== 'created' && state !== 'starting' }).live().status, state).toBe(
        'ok',
      );
    expect(health({ state: 'stopping', loopRunning: false }).live().status).toBe('ok');
    const ended = health({ loopRunning: false }).live();
    expect(ended.status).toBe('unavailable');
    expect(ended.checks.claim_loop).toEqual({ ok: false, detail: 'the claim loop ended without a stop' });
  });
});
