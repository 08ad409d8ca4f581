// The worker as a process: SIGTERM with tasks in flight, SIGKILL mid-task, poison tasks
// that kill their worker, and bad configuration.
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createLogger, dbFunctionProcessor, ProcessorRegistry, Worker } from '../src/index.js';
import { effects, enqueue, eventually, factsOf, installFixtures } from './support/fixtures.js';
import { logLines, startChild, type Child } from './support/child.js';

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

function worker(env: Record<string, string> = {}): Child {
  const child = startChild({
    DATABASE_URL: db.url('worker'),
    WORKER_ID: `child-${children.length}`,
    POLL_INTERVAL_MS: '100',
    HEARTBEAT_INTERVAL_MS: '200',
    LEASE_SECONDS: '2',
    ...env,
  });
  children.push(child);
  return child;
}

const leasesOf = async (taskId: string) =>
  (
    await db.query('select worker_id from queues.task_lease_effective where task_id = $1 order by task_lease_id', [
      taskId,
    ])
  ).rows.map((r) => r.worker_id as string);

describe('worker process', () => {
  it('SIGTERM: stops claiming, finishes in-flight tasks, releases the queued ones, exits 0', async () => {
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push(await enqueue(db, 'slow', { ms: 1500 }));
    const child = worker({ WORKER_ROLE: 'slow', CONCURRENCY: '2', SHUTDOWN_GRACE_MS: '10000' });
    const started = () => logLines(child.output()).filter((l) => l.event === 'task_started').length;
    await eventually(() => started() === 2, 'two tasks running');
    const leasedBefore = (
      await db.query(`select count(*)::int as n from queues.task_lease_effective where worker_id = 'child-0'`)
    ).rows[0].n;
    child.process.kill('SIGTERM');
    const exit = await child.exited;
    expect(exit).toEqual({ code: 0, signal: null });
    const outcomes = await Promise.all(ids.map(async (id) => (await factsOf(db, id)).outcome));
    expect(outcomes.filter((o) => o === 'succeeded')).toHaveLength(2);
    expect(outcomes.filter((o) => o === null)).toHaveLength(2);
    expect(started()).toBe(2);
    // No claim after the signal, and the tasks it had queued but not started are free now.
    const leasedAfter = (
      await db.query(`select count(*)::int as n from queues.task_lease_effective where worker_id = 'child-0'`)
    ).rows[0].n;
    expect(leasedAfter).toBe(leasedBefore);
    const claimable = await db
      .pool('worker')
      .query(`select task_id from queues.claim_tasks('next', 10, array['slow'])`);
    expect(claimable.rows.map((r) => r.task_id).sort()).toEqual(ids.filter((_, i) => outcomes[i] === null).sort());
    const events = logLines(child.output()).map((l) => l.event);
    expect(events).toContain('worker_stopping');
    expect(events.at(-1)).toBe('worker_stopped');
    await db.query(`delete from queues.task_pending where task_type = 'slow'`);
  });

  it('SIGTERM: the last log line is written before the process exits, however long its write takes', async () => {
    const preload = fileURLToPath(new URL('./support/slow-last-log-write.mjs', import.meta.url));
    const child = worker({ WORKER_ROLE: 'slow', NODE_OPTIONS: `--import ${preload}` });
    await eventually(() => logLines(child.output()).some((l) => l.event === 'worker_started'), 'the worker started');
    child.process.kill('SIGTERM');
    expect(await child.exited).toEqual({ code: 0, signal: null });
    const events = logLines(child.output()).map((l) => l.event);
    expect(events).toContain('worker_stopping');
    expect(events.at(-1)).toBe('worker_stopped');
  });

  it('SIGTERM past the grace period: the rest is released, claimable at once, exit 0', async () => {
    const id = await enqueue(db, 'slow', { ms: 60_000 });
    const child = worker({
      WORKER_ROLE: 'slow',
      SHUTDOWN_GRACE_MS: '300',
      LEASE_SECONDS: '300',
      HEARTBEAT_INTERVAL_MS: '1000',
    });
    await eventually(async () => (await leasesOf(id)).length === 1, 'the task running');
    child.process.kill('SIGTERM');
    expect(await child.exited).toEqual({ code: 0, signal: null });
    const { rows } = await db.query(
      `select count(*)::int as released from queues.task_lease_release r join queues.task_leases l using (task_id, task_lease_id) where l.task_id = $1`,
      [id],
    );
    expect(rows[0].released).toBe(1);
    // Claimable now, although the 300 s lease has not expired.
    const claimed = await db.pool('worker').query(`select task_id from queues.claim_tasks('next', 1, array['slow'])`);
    expect(claimed.rows).toEqual([{ task_id: id }]);
    await db.query(`delete from queues.task_pending where task_type = 'slow'`);
  });

  it('SIGTERM while a step is stuck in SQL past the grace period: released, exit 0', async () => {
    const id = await enqueue(db, 'db_function', { db_function: 'fixture.step', key: 'stuck-in-sql', sleep: 30 });
    const child = worker({
      WORKER_ROLE: 'db_function',
      SHUTDOWN_GRACE_MS: '300',
      LEASE_SECONDS: '300',
      HEARTBEAT_INTERVAL_MS: '1000',
    });
    await eventually(async () => (await leasesOf(id)).length === 1, 'the step running');
    await new Promise((r) => setTimeout(r, 300));
    child.process.kill('SIGTERM');
    expect(await child.exited).toEqual({ code: 0, signal: null });
    const { rows } = await db.query(
      `select count(*)::int as released from queues.task_lease_release r join queues.task_leases l using (task_id, task_lease_id) where l.task_id = $1`,
      [id],
    );
    expect(rows[0].released).toBe(1);
    // The stuck statement's transaction never commits: no effect, no completion.
    await db.pool('root').query(
      `select pg_terminate_backend(pid) from pg_stat_activity
          where datname = current_database() and query like '%fixture.step%' and pid <> pg_backend_pid()`,
    );
    expect((await factsOf(db, id)).outcome).toBeNull();
    await db.query(`delete from queues.task_pending where task_id = $1`, [id]);
  });

  it('SIGKILL mid-step: the step and its completion happen exactly once', async () => {
    const id = await enqueue(db, 'db_function', { db_function: 'fixture.step', key: 'killed-mid-step', sleep: 1.5 });
    const child = worker({ WORKER_ROLE: 'db_function' });
    await eventually(async () => (await leasesOf(id)).length === 1, 'the step running');
    child.process.kill('SIGKILL');
    expect((await child.exited).signal).toBe('SIGKILL');
    const rescuer = new Worker({
      databaseUrl: db.url('worker'),
      roles: ['db_function'],
      workerId: 'rescuer',
      concurrency: 2,
      pollIntervalMs: 100,
      heartbeatIntervalMs: 200,
      leaseSeconds: 2,
      maxLeases: 5,
      shutdownGraceMs: 1000,
      registry: new ProcessorRegistry().register('db_function', dbFunctionProcessor()),
      logger: createLogger('silent'),
    });
    await rescuer.start();
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'the completion');
    await rescuer.stop();
    // The step runs in the database (queues.run_steps): the killed worker's call either
    // committed with its completion after the worker died, or rolled back and the
    // rescuer ran it after the lease expired. Either way the effect exists once.
    const facts = await factsOf(db, id);
    expect(facts).toMatchObject({ outcome: 'succeeded', errors: [] });
    expect(facts.leases).toBeGreaterThanOrEqual(1);
    expect(facts.leases).toBeLessThanOrEqual(2);
    expect((await leasesOf(id))[0]).toBe(`child-${children.length - 1}`);
    expect(await effects(db, 'killed-mid-step')).toBe(1);
  });

  it('a poison task that kills its worker is abandoned after MAX_LEASES counted expiries, with an error', async () => {
    const id = await enqueue(db, 'crash', {});
    // Its first expiry makes it a suspect (uncounted); the next two leases name it the
    // claim's suspect, and their expiries count.
    for (let i = 0; i < 3; i++) {
      const child = worker({ WORKER_ROLE: 'crash', MAX_LEASES: '2', LEASE_SECONDS: '1', HEARTBEAT_INTERVAL_MS: '200' });
      expect((await child.exited).signal).toBe('SIGKILL');
    }
    expect(await leasesOf(id)).toHaveLength(3);
    // The fourth worker finds the task with two counted expiries and abandons it.
    const survivor = worker({
      WORKER_ROLE: 'crash',
      MAX_LEASES: '2',
      LEASE_SECONDS: '1',
      HEARTBEAT_INTERVAL_MS: '200',
    });
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'abandonment', 30_000);
    expect(await factsOf(db, id)).toEqual({
      outcome: 'abandoned',
      errors: ['abandoned: 2 leases expired without completion (max_leases 2)'],
      leases: 3,
    });
    survivor.process.kill('SIGTERM');
    expect((await survivor.exited).code).toBe(0);
  });
});

describe('configuration', () => {
  const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
  const run = async (env: Record<string, string>, args: string[] = []) => {
    const child = startChild(env, cli, args);
    const exit = await child.exited;
    return { code: exit.code, output: child.output() };
  };
  const url = () => db.url('worker');

  it.each([
    ['missing DATABASE_URL', { DATABASE_URL: '' }, /DATABASE_URL \(--database-url\): is required/],
    [
      'a DATABASE_URL that is not postgres',
      { DATABASE_URL: 'mysql://x' },
      /DATABASE_URL \(--database-url\): must be a postgres:\/\/ or postgresql:\/\/ URL\n/,
    ],
    [
      'CONCURRENCY not a number',
      { CONCURRENCY: 'ten' },
      /CONCURRENCY \(--concurrency\): must be a whole number between 1 and 1000, got "ten"/,
    ],
    ['CONCURRENCY zero', { CONCURRENCY: '0' }, /CONCURRENCY \(--concurrency\): must be at least 1, got "0"/],
    ['CONCURRENCY too high', { CONCURRENCY: '100000' }, /must be at most 1000/],
    [
      'negative POLL_INTERVAL_MS',
      { POLL_INTERVAL_MS: '-5' },
      /POLL_INTERVAL_MS \(--poll-interval-ms\): must be a whole number/,
    ],
    [
      'LEASE_SECONDS over a day',
      { LEASE_SECONDS: '90000' },
      /LEASE_SECONDS \(--lease-seconds\): must be at most 86400/,
    ],
    [
      'heartbeat not under half the lease',
      { LEASE_SECONDS: '10', HEARTBEAT_INTERVAL_MS: '6000' },
      /HEARTBEAT_INTERVAL_MS \(--heartbeat-interval-ms\): must be at most half of LEASE_SECONDS/,
    ],
    [
      'LOG_LEVEL unknown',
      { LOG_LEVEL: 'loud' },
      /LOG_LEVEL \(--log-level\): must be one of fatal, error, warn, info, debug, trace, silent, got "loud"/,
    ],
    [
      'WORKER_ROLE malformed',
      { WORKER_ROLE: 'Email,SMS' },
      /WORKER_ROLE \(--worker-role\): each role must be a task type/,
    ],
    [
      'WORKER_ROLE empty list',
      { WORKER_ROLE: ' , ' },
      /WORKER_ROLE \(--worker-role\): must name at least one task type/,
    ],
    ['WORKER_ROLE without a processor', { WORKER_ROLE: 'fax' }, /no processor for role\(s\) fax/],
    ['MAX_LEASES zero', { MAX_LEASES: '0' }, /MAX_LEASES \(--max-leases\): must be at least 1/],
    [
      'a provider credential that is malformed',
      { TWILIO_ACCOUNT_SID: 'XX123', TWILIO_AUTH_TOKEN: 't', TWILIO_FROM_NUMBER: '+15550100' },
      /TWILIO_ACCOUNT_SID/,
    ],
  ])('%s: a clear message and exit code 2', async (_name, env, message) => {
    const { code, output } = await run({ DATABASE_URL: url(), ...env });
    expect(output).toMatch(message);
    expect(code).toBe(2);
  });

  it('reports every bad value at once', async () => {
    const { code, output } = await run({ DATABASE_URL: url(), CONCURRENCY: 'x', LEASE_SECONDS: '0' });
    expect(code).toBe(2);
    expect(output).toMatch(/CONCURRENCY/);
    expect(output).toMatch(/LEASE_SECONDS/);
  });

  it('flags override the environment; unknown flags are refused', async () => {
    expect((await run({ DATABASE_URL: url(), CONCURRENCY: 'bad' }, ['--concurrency', '3', '--help'])).code).toBe(0);
    const unknown = await run({ DATABASE_URL: url() }, ['--concurency', '3']);
    expect(unknown.code).toBe(2);
    expect(unknown.output).toMatch(/Unknown option '--concurency'/);
    const bad = await run({ DATABASE_URL: url() }, ['--concurrency', 'many']);
    expect(bad.output).toMatch(/CONCURRENCY \(--concurrency\): must be a whole number/);
  });

  it('--help lists every setting and exits 0', async () => {
    const { code, output } = await run({}, ['--help']);
    expect(code).toBe(0);
    for (const name of [
      'DATABASE_URL',
      'WORKER_ROLE',
      'WORKER_ID',
      'CONCURRENCY',
      'POLL_INTERVAL_MS',
      'HEARTBEAT_INTERVAL_MS',
      'LEASE_SECONDS',
      'SHUTDOWN_GRACE_MS',
      'LOG_LEVEL',
      'MAX_LEASES',
      'METRICS_PORT',
      'PREFETCH',
      'PROCESSES',
      'SPARES',
    ]) {
      expect(output).toContain(name);
    }
  });

  it('METRICS_PORT serves Prometheus metrics of the worker', async () => {
    const { freePort } = await import('@org/db-tools');
    const port = await freePort();
    await enqueue(db, 'db_function', { db_function: 'internal.noop' });
    const child = startChild(
      { DATABASE_URL: url(), WORKER_ROLE: 'db_function', POLL_INTERVAL_MS: '100', METRICS_PORT: String(port) },
      cli,
    );
    let body = '';
    await eventually(async () => {
      body = await fetch(`http://127.0.0.1:${port}/metrics`)
        .then((r) => r.text())
        .catch(() => '');
      return /queue_worker_tasks_completed_total\{[^}]*task_type="db_function"[^}]*\} [1-9]/.test(body);
    }, 'a completion counted');
    expect(body).toContain('# TYPE queue_worker_task_duration_seconds histogram');
    child.process.kill('SIGTERM');
    expect((await child.exited).code).toBe(0);
  });

  it('the password in DATABASE_URL never reaches the logs', async () => {
    const child = startChild({ DATABASE_URL: url(), WORKER_ROLE: 'db_function', POLL_INTERVAL_MS: '100' }, cli);
    await eventually(() => child.output().includes('worker_started'), 'worker started');
    child.process.kill('SIGTERM');
    expect((await child.exited).code).toBe(0);
    const password = new URL(url()).password;
    expect(password.length).toBeGreaterThan(8);
    expect(child.output()).not.toContain(password);
    expect(child.output()).toContain('worker_service_user:***@');
  });
});
