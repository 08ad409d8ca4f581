// 5. SIGTERM with tasks in flight: no new claims, in-flight work finished, the rest
// released (claimable at once), exit 0 within the grace period.
import { dropPending, lastTaskId, one, Report, round, waitFor, type Scenario } from '../harness.js';
import { killAll, logLines, startWorker } from '../workers.js';

export const scenario: Scenario = {
  id: 5,
  name: 'sigterm',
  title: 'SIGTERM with tasks in flight',
  fast: true,
  async run({ db }) {
    const r = new Report();
    const fromId = await lastTaskId(db);
    const enqueue = async (n: number, ms: number) => {
      const tasks = Array.from({ length: n }, (_, i) => ({ task_type: 'slow', payload: { ms, key: `s5-${i}` } }));
      return (
        await db.pool('app').query('select task_id::text from queues.enqueue_many($1::jsonb)', [JSON.stringify(tasks)])
      ).rows.map((x) => x.task_id as string);
    };
    const leased = async (workerId: string) =>
      (await one(db, 'select count(*)::int as n from queues.task_lease_effective where worker_id = $1', [workerId]))
        .n as number;
    const env = (extra: Record<string, string>) => ({
      DATABASE_URL: db.url('worker'),
      WORKER_ROLE: 'slow',
      POLL_INTERVAL_MS: '100',
      HEARTBEAT_INTERVAL_MS: '500',
      LEASE_SECONDS: '30',
      LOG_LEVEL: 'info',
      ...extra,
    });

    // a) Within the grace period: 8 tasks, 4 slots, each 1.5 s; the worker claims all 8
    // into its local queue (until a task has finished, one queued task per slot); SIGTERM
    // once 4 run.
    const ids = await enqueue(8, 1500);
    const graceMs = 8000;
    const started = async () =>
      (
        await one(db, 'select count(*)::int as n from queues.task_lease_started where task_id = any($1::bigint[])', [
          ids,
        ])
      ).n as number;
    const a = startWorker({
      env: env({ CONCURRENCY: '4', SHUTDOWN_GRACE_MS: String(graceMs) }),
      script: 'entry',
      prefix: 's5a',
    });
    try {
      await waitFor(async () => (await leased(a.id)) === 8 && (await started()) === 4, 20_000, 50);
      const queuedReleased = async () =>
        (
          await one(
            db,
            `select count(*)::int as n from queues.task_lease_release r join queues.task_leases l using (task_id, task_lease_id) where l.task_id = any($1::bigint[])`,
            [ids],
          )
        ).n as number;
      const signalled = Date.now();
      a.process.kill('SIGTERM');
      const exit = await a.exited;
      const exitMs = exit.at - signalled;
      const outcomes = (
        await db.query(
          `select c.outcome from unnest($1::bigint[]) t(id) left join queues.task_end c on c.task_id = t.id`,
          [ids],
        )
      ).rows.map((x) => x.outcome as string | null);
      const events = logLines(a.output()).map((l) => l.event);
      r.figure('a) in flight at SIGTERM', 4);
      r.figure('a) exit after SIGTERM (s)', round(exitMs / 1000, 2));
      r.figure('a) grace period (s)', graceMs / 1000);
      r.equal('a) exit code 0', exit.code, 0);
      r.check('a) exited within the grace period', exitMs <= graceMs + 2000, `${exitMs} ms`);
      r.equal(
        'a) in-flight tasks finished (4 succeeded), the rest untouched',
        {
          succeeded: outcomes.filter((o) => o === 'succeeded').length,
          open: outcomes.filter((o) => o === null).length,
        },
        { succeeded: 4, open: 4 },
      );
      r.equal('a) no claim after the signal (8 claimed before it: 4 running, 4 queued)', await leased(a.id), 8);
      r.equal(
        'a) the 4 queued tasks were released at once, never started',
        { released: await queuedReleased(), started: await started() },
        { released: 4, started: 4 },
      );
      r.check(
        'a) logged worker_stopping ... worker_stopped',
        events.includes('worker_stopping') && events.at(-1) === 'worker_stopped',
        JSON.stringify(events.slice(-3)),
      );
    } finally {
      killAll([a]);
      await dropPending(db, fromId);
    }

    // b) Past the grace period: 3 tasks of 60 s, grace 0.5 s: released, claimable at once.
    const from2 = await lastTaskId(db);
    const long = await enqueue(3, 60_000);
    const b = startWorker({ env: env({ CONCURRENCY: '3', SHUTDOWN_GRACE_MS: '500' }), script: 'entry', prefix: 's5b' });
    try {
      await waitFor(async () => (await leased(b.id)) === 3, 20_000, 50);
      const signalled = Date.now();
      b.process.kill('SIGTERM');
      const exit = await b.exited;
      const exitMs = exit.at - signalled;
      const released = (
        await one(
          db,
          `select count(*)::int as n from queues.task_lease_release r join queues.task_leases l using (task_id, task_lease_id) where l.task_id = any($1::bigint[])`,
          [long],
        )
      ).n;
      const errors = (
        await one(db, `select count(*)::int as n from queues.error where task_id = any($1::bigint[])`, [long])
      ).n;
      const claimable = (
        await db
          .pool('worker')
          .query(`select task_id::text from queues.claim_tasks('s5-next', 10, array['slow'], 300, 5)`)
      ).rows.map((x) => x.task_id);
      r.figure('b) in flight past the grace period', 3);
      r.figure('b) exit after SIGTERM (s)', round(exitMs / 1000, 2));
      r.equal('b) exit code 0', exit.code, 0);
      r.check('b) exited within the grace period (+ release)', exitMs <= 500 + 2000, `${exitMs} ms`);
      r.equal('b) the unfinished leases were released', released, 3);
      r.equal('b) nothing recorded against them', errors, 0);
      r.equal('b) claimable at once (30 s leases not expired)', claimable.sort(), [...long].sort());
    } finally {
      killAll([b]);
      await dropPending(db, from2);
    }
    return r.result();
  },
};
