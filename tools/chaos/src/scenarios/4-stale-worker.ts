// 4. A stale worker (SIGSTOP past its lease, then SIGCONT) cannot complete, fail or
// record against a task another worker leased meanwhile.
import { one, Report, waitFor, type ChaosDb, type Scenario } from '../harness.js';
import { killAll, logLines, startWorker, stopWorker, type WorkerProcess } from '../workers.js';

interface Case {
  name: string;
  taskType: string;
  payload: (key: string) => Record<string, unknown>;
  /** What the stale worker would have done. */
  action: string;
}

const CASES: Case[] = [
  // The step runs in the database (queues.run_steps), where SIGSTOP of the worker does not
  // reach it: it waits at its gate until the second worker holds a lease, so the stopped
  // worker's call ends after the task was taken over, and its completion is refused.
  {
    name: 'complete (db_function step)',
    taskType: 'db_function',
    payload: (key) => ({ db_function: 'chaos.step', key, gate: key }),
    action: 'complete',
  },
  {
    name: 'fail (error row + failed completion)',
    taskType: 'slow',
    payload: (key) => ({ key, ms: 1200, fail: true }),
    action: 'fail',
  },
  {
    name: 'record (a business fact with the completion)',
    taskType: 'slow',
    payload: (key) => ({ key, ms: 1200, record: true }),
    action: 'record',
  },
];

const leasesOf = async (db: ChaosDb, taskId: string) =>
  (
    await db.query(
      `select task_lease_id::text as id, worker_id, expires_at <= now() as expired from queues.task_lease_effective where task_id = $1 order by task_lease_id`,
      [taskId],
    )
  ).rows as { id: string; worker_id: string; expired: boolean }[];

export const scenario: Scenario = {
  id: 4,
  name: 'stale-worker',
  title: 'a stale worker cannot act on a task leased by another',
  fast: true,
  async run({ db }) {
    const r = new Report();
    const env = (role: string) => ({
      DATABASE_URL: db.url('worker'),
      WORKER_ROLE: role,
      CONCURRENCY: '1',
      POLL_INTERVAL_MS: '100',
      HEARTBEAT_INTERVAL_MS: '500',
      LEASE_SECONDS: '2',
      LOG_LEVEL: 'info',
      SHUTDOWN_GRACE_MS: '3000',
    });
    const spawned: WorkerProcess[] = [];
    let refused = 0;
    try {
      for (const c of CASES) {
        const key = `s4-${Date.now().toString(36)}-${c.action}`;
        const taskId = String(
          (
            await db
              .pool('owner')
              // One attempt: the 'fail' case's failure is the task's last.
              .query('select queues.enqueue($1, $2::jsonb, _max_attempts => 1) as id', [
                c.taskType,
                JSON.stringify(c.payload(key)),
              ])
          ).rows[0].id,
        );
        const a = startWorker({ env: env(c.taskType), script: 'entry', prefix: 's4-stale' });
        spawned.push(a);
        await waitFor(async () => (await leasesOf(db, taskId)).length === 1, 20_000, 50);
        a.process.kill('SIGSTOP');
        // Past its lease: the lease expires (no heartbeat), another worker takes the task.
        await waitFor(async () => (await leasesOf(db, taskId))[0]?.expired === true, 10_000, 100);
        const b = startWorker({ env: env(c.taskType), script: 'entry', prefix: 's4-fresh' });
        spawned.push(b);
        if (c.action === 'complete') {
          // The stale worker's step ends only once the task is leased again, however long
          // the second worker takes to start.
          await waitFor(async () => (await leasesOf(db, taskId)).length === 2, 20_000, 50);
          await db.query('insert into chaos.gate (key) values ($1)', [key]);
        }
        const completed = await waitFor(
          async () => (await db.query('select 1 from queues.task_end where task_id = $1', [taskId])).rowCount === 1,
          20_000,
        );
        await stopWorker(b);
        a.process.kill('SIGCONT');
        // The stale worker wakes up, finishes its work and tries to record it.
        const noticed = await waitFor(
          () => Promise.resolve(logLines(a.output()).some((l) => l.event === 'lease_lost')),
          15_000,
        );
        if (noticed) refused++;
        const exitA = await stopWorker(a);
        const leases = await leasesOf(db, taskId);
        const facts = await one<{
          completed_by: string | null;
          outcome: string;
          error_leases: string[];
          effects: number;
          records: number;
        }>(
          db,
          `select c.task_lease_id::text as completed_by, c.outcome,
                  (select coalesce(array_agg(coalesce(e.task_lease_id::text, 'none') order by e.error_id), '{}') from queues.error e where e.task_id = $1) as error_leases,
                  (select count(*)::int from chaos.effect where task_key = $2) as effects,
                  (select count(*)::int from chaos.record where task_key = $2) as records
             from queues.task_end c where c.task_id = $1`,
          [taskId, key],
        );
        const staleLease = leases.find((l) => l.worker_id === a.id)?.id;
        const freshLease = leases.find((l) => l.worker_id === b.id)?.id;
        r.check(
          `${c.name}: the second worker completed the task`,
          completed && facts?.completed_by === freshLease,
          JSON.stringify({ facts, leases }),
        );
        r.check(
          `${c.name}: nothing recorded against the stale lease`,
          !!staleLease && !(facts?.error_leases ?? []).includes(staleLease),
          JSON.stringify(facts?.error_leases),
        );
        if (c.action === 'complete') r.equal(`${c.name}: the step's effect exists once`, facts?.effects, 1);
        if (c.action === 'fail')
          r.equal(`${c.name}: one error row, the fresh worker's`, facts?.error_leases, [freshLease]);
        if (c.action === 'record') r.equal(`${c.name}: the fact exists once`, facts?.records, 1);
        r.check(
          `${c.name}: the stale worker saw lease_lost and carried on`,
          noticed && exitA.code === 0,
          JSON.stringify(exitA),
        );
      }
    } finally {
      killAll(spawned);
    }
    r.figure('cases', CASES.length);
    r.figure('stale completions refused (lease_lost)', refused);
    r.figure(
      'stale writes that got through',
      r.checks.filter((c) => !c.ok && /nothing recorded|once|one error/.test(c.name)).length,
    );
    return r.result();
  },
};
