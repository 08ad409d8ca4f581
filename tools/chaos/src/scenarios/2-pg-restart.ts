// 2. Restart PostgreSQL (pg_ctl restart -m fast) under load, three times: the workers
// reconnect by themselves (pool and LISTEN), nothing is lost.
import {
  dropPending,
  lastTaskId,
  openDue,
  percentile,
  Report,
  round,
  sleep,
  taskTally,
  waitFor,
  type Scenario,
} from '../harness.js';
import { effectAnomalies, startLoad } from '../load.js';
import { fastEnv, killAll, startWorker, stopWorker } from '../workers.js';

export const scenario: Scenario = {
  id: 2,
  name: 'pg-restart',
  title: 'restart PostgreSQL during load',
  fast: false,
  async run({ db, quick, restartServer }) {
    const r = new Report();
    if (!restartServer) return { figures: {}, checks: [], skipped: 'needs a server the harness owns (CLI only)' };
    const tag = `s2-${Date.now().toString(36)}`;
    const fromId = await lastTaskId(db);
    const workers = [0, 1].map(() =>
      startWorker({ env: fastEnv(db.url('worker'), { WORKER_ROLE: 'db_function', LOG_LEVEL: 'info' }), prefix: 's2' }),
    );
    const owner = db.pool('owner');
    const load = startLoad({
      app: db.pool('app'),
      owner: db.pool('owner'),
      tag,
      tickMs: 200,
      stepsPerTick: 4,
      stepSleep: [0, 0.1],
      maxTicks: 5 * 300,
    });
    const restarts: { downMs: number; firstMs: number; allMs: number }[] = [];
    try {
      await sleep(quick ? 2000 : 4000);
      for (let i = 0; i < 3; i++) {
        const t0 = Date.now();
        await restartServer();
        const up = Date.now();
        // Recovery: from the server accepting connections to a completion by the first,
        // then by every worker, of a task leased after the restart.
        const firstBy = new Map<string, number>();
        await waitFor(
          async () => {
            const { rows } = await owner.query(
              `select distinct l.worker_id from queues.task_end c join queues.task_lease_effective l on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
              where c.completed_at > now() - make_interval(secs => $1) and l.leased_at > now() - make_interval(secs => $1)`,
              [(Date.now() - up) / 1000 + 0.05],
            );
            for (const row of rows) if (!firstBy.has(row.worker_id)) firstBy.set(row.worker_id, Date.now() - up);
            return workers.every((w) => firstBy.has(w.id));
          },
          60_000,
          100,
        );
        const times = [...firstBy.values()];
        restarts.push({
          downMs: up - t0,
          firstMs: Math.min(...times, Infinity),
          allMs: times.length === workers.length ? Math.max(...times) : Infinity,
        });
        await sleep(quick ? 2000 : 5000);
      }
    } finally {
      await load.stop();
    }
    const drained = await waitFor(async () => (await openDue(db, fromId)) === 0, 60_000, 250);
    const listeners = (
      await owner.query(
        `select count(*)::int as n from pg_stat_activity where application_name = 'queue-worker-listen' and datname = current_database()`,
      )
    ).rows[0].n;
    const alive = workers.filter((w) => w.alive()).length;
    const exits = await Promise.all(workers.map((w) => stopWorker(w)));
    killAll(workers);
    const tally = await taskTally(db, fromId);
    const effects = await effectAnomalies(owner, tag, fromId);
    restarts.forEach((x, i) => {
      r.figure(`restart ${i + 1}: pg_ctl restart (s)`, round(x.downMs / 1000, 2));
      r.figure(`restart ${i + 1}: first worker completing again (s)`, round(x.firstMs / 1000, 2));
      r.figure(`restart ${i + 1}: every worker completing again (s)`, round(x.allMs / 1000, 2));
    });
    r.figure(
      'recovery p100, every worker (s)',
      round(
        percentile(
          restarts.map((x) => x.allMs),
          100,
        ) / 1000,
        2,
      ),
    );
    r.figure('steps enqueued', load.steps);
    r.figure('enqueue calls refused while down', load.errors.length);
    r.figure('lost tasks', tally.open);
    r.check(
      'every worker completed tasks again after each restart',
      restarts.every((x) => Number.isFinite(x.allMs)),
      JSON.stringify(restarts),
    );
    r.check('workers stayed up through the restarts', alive === workers.length, `${alive}/${workers.length}`);
    r.check('LISTEN re-established by every worker', listeners === workers.length, `${listeners} listening`);
    r.check('every task completed (0 lost)', drained && tally.open === 0, `${tally.open} open of ${tally.total}`);
    r.equal(
      'no task failed or was abandoned',
      { failed: tally.failed, abandoned: tally.abandoned },
      { failed: 0, abandoned: 0 },
    );
    r.equal('every step took effect exactly once', effects, { duplicated: 0, missing: 0 });
    r.check(
      'workers stopped with exit 0',
      exits.every((e) => e.code === 0),
      JSON.stringify(exits),
    );
    await dropPending(db, fromId);
    return r.result();
  },
};
