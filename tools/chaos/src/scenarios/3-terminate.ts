// 3. pg_terminate_backend on the workers' connections (claiming, running, LISTEN) every
// few seconds: nothing lost, nothing stuck, LISTEN comes back.
import { dropPending, lastTaskId, openDue, Report, sleep, taskTally, waitFor, type Scenario } from '../harness.js';
import { effectAnomalies, startLoad } from '../load.js';
import { fastEnv, killAll, logLines, startWorker, stopWorker } from '../workers.js';

export const scenario: Scenario = {
  id: 3,
  name: 'terminate-backend',
  title: "pg_terminate_backend on the workers' connections",
  fast: true,
  async run({ db, quick }) {
    const r = new Report();
    const seconds = quick ? 12 : 60;
    const everyMs = quick ? 1500 : 3000;
    const tag = `s3-${Date.now().toString(36)}`;
    const fromId = await lastTaskId(db);
    const workers = [0, 1].map(() =>
      startWorker({ env: fastEnv(db.url('worker'), { WORKER_ROLE: 'db_function', LOG_LEVEL: 'info' }), prefix: 's3' }),
    );
    const owner = db.pool('owner');
    const load = startLoad({
      app: db.pool('app'),
      owner: db.pool('owner'),
      tag,
      tickMs: 200,
      stepsPerTick: 3,
      stepSleep: [0, 0.3],
      maxTicks: (seconds * 1000) / 200,
    });
    const killed = { running: 0, idle: 0, listen: 0 };
    const kinds = ['running', 'listen', 'all'] as const;
    try {
      await sleep(1000);
      for (let i = 0; i < Math.floor((seconds * 1000) / everyMs); i++) {
        const kind = kinds[i % kinds.length]!;
        const filter =
          kind === 'running'
            ? `application_name = 'queue-worker' and state <> 'idle'`
            : kind === 'listen'
              ? `application_name = 'queue-worker-listen'`
              : `application_name like 'queue-worker%'`;
        // As the superuser: the owner may not signal another role's backends.
        const { rows } = await db.pool('root').query(
          `select application_name, state, pg_terminate_backend(pid) as done from pg_stat_activity
            where usename = $1 and datname = current_database() and ${filter}`,
          [db.dbUsers.worker],
        );
        for (const row of rows) {
          if (!row.done) continue;
          if (row.application_name === 'queue-worker-listen') killed.listen++;
          else if (row.state === 'idle') killed.idle++;
          else killed.running++;
        }
        await sleep(everyMs);
      }
    } finally {
      await load.stop();
    }
    // Stuck: a task whose scheduled time has come that no worker completes within the
    // lease (2 s) plus the poll interval, after the storm.
    const drained = await waitFor(async () => (await openDue(db, fromId)) === 0, 30_000, 250);
    const listening = await waitFor(
      async () =>
        (
          await owner.query(
            `select count(*)::int as n from pg_stat_activity where application_name = 'queue-worker-listen' and datname = current_database()`,
          )
        ).rows[0].n === workers.length,
      15_000,
    );
    const alive = workers.filter((w) => w.alive()).length;
    const exits = await Promise.all(workers.map((w) => stopWorker(w)));
    killAll(workers);
    const tally = await taskTally(db, fromId);
    const effects = await effectAnomalies(owner, tag, fromId);
    const events = workers.flatMap((w) => logLines(w.output()).map((l) => String(l.event)));
    const count = (e: string) => events.filter((x) => x === e).length;
    r.figure('storm (s)', seconds);
    r.figure('connections terminated: running', killed.running);
    r.figure('connections terminated: idle pool', killed.idle);
    r.figure('connections terminated: LISTEN', killed.listen);
    r.figure('tasks', tally.total);
    r.figure('tasks interrupted (task_interrupted)', count('task_interrupted'));
    r.figure('LISTEN reconnects', count('listen_reconnected'));
    r.figure('lost tasks', tally.open);
    r.check(
      'connections of every kind were terminated',
      killed.running > 0 && killed.listen > 0,
      JSON.stringify(killed),
    );
    r.check(
      'every task completed (0 lost, 0 stuck)',
      drained && tally.open === 0,
      `${tally.open} open of ${tally.total}`,
    );
    r.equal(
      'no task failed or was abandoned',
      { failed: tally.failed, abandoned: tally.abandoned },
      { failed: 0, abandoned: 0 },
    );
    r.equal('every step took effect exactly once', effects, { duplicated: 0, missing: 0 });
    r.check('every worker listens again', listening);
    r.check('workers stayed up', alive === workers.length, `${alive}/${workers.length}`);
    r.check(
      'workers stopped with exit 0',
      exits.every((e) => e.code === 0),
      JSON.stringify(exits),
    );
    await dropPending(db, fromId);
    return r.result();
  },
};
