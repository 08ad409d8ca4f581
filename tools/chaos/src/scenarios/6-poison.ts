// 6. Poison tasks: a handler that kills its process (SIGKILL) and one that exhausts its
// heap. They are abandoned after MAX_LEASES leases, while the other tasks' throughput
// drops by less than 10%. Run twice: under the worker's own supervisor (PROCESSES=2, one
// spare), which the invariant is about, and with a plain restart loop (a new process
// 200 ms after each death, as a container orchestrator would), for comparison.
import { dropPending, lastTaskId, one, Report, round, sleep, taskTally, waitFor, type ChaosDb, type Scenario } from '../harness.js';
import { killAll, startWorker, stopWorker, type WorkerProcess } from '../workers.js';

const MAX_LEASES = 3;
type Mode = 'supervised' | 'restarted';

async function phase(db: ChaosDb, n: number, poison: boolean, tag: string, mode: Mode) {
  const fromId = await lastTaskId(db);
  const env: Record<string, string> = {
    DATABASE_URL: db.url('worker'), WORKER_ROLE: 'db_function,crash,oom', CONCURRENCY: '4', POLL_INTERVAL_MS: '200',
    HEARTBEAT_INTERVAL_MS: '500', LEASE_SECONDS: '2', MAX_LEASES: String(MAX_LEASES), SHUTDOWN_GRACE_MS: '2000',
  };
  const nodeArgs = ['--max-old-space-size=64'];
  const all: WorkerProcess[] = [];
  let restartedDeaths = 0;
  let running = true;
  let supervisor: WorkerProcess | undefined;
  if (mode === 'supervised') {
    // Two working processes and one spare; the supervisor's children inherit nodeArgs.
    supervisor = startWorker({ env: { ...env, PROCESSES: '2', SPARES: '1' }, script: 'entry', prefix: `s6-${tag}`, nodeArgs });
    all.push(supervisor);
  } else {
    const keep = () => {
      const w = startWorker({ env, script: 'entry', prefix: `s6-${tag}`, nodeArgs });
      all.push(w);
      void w.exited.then(async () => {
        if (!running) return;
        restartedDeaths++;
        await sleep(200);
        if (running) keep();
      });
    };
    keep();
    keep();
  }
  await waitFor(async () => (await one(db, `select count(*)::int as n from pg_stat_activity where application_name = 'queue-worker-listen' and datname = current_database()`)).n >= 2, 15_000);
  const started = Date.now();
  if (poison) {
    await db.pool('app').query(`select queues.enqueue('crash', '{}'::jsonb), queues.enqueue('oom', '{}'::jsonb)`);
  }
  const tasks = Array.from({ length: n }, (_, i) => ({ task_type: 'db_function', payload: { db_function: 'chaos.step', key: `${tag}-${i}`, sleep: 0.02 } }));
  for (let i = 0; i < tasks.length; i += 500) {
    await db.pool('app').query('select queues.enqueue_many($1::jsonb)', [JSON.stringify(tasks.slice(i, i + 500))]);
  }
  const done = await waitFor(async () => (await taskTally(db, fromId, `t.task_type = 'db_function'`)).open === 0, 180_000, 100);
  const seconds = (Date.now() - started) / 1000;
  // The poison tasks: wait for their abandonment (their leases must expire first).
  const abandoned = poison
    ? await waitFor(async () => (await taskTally(db, fromId, `t.task_type in ('crash', 'oom')`)).abandoned === 2, 60_000, 200)
    : true;
  running = false;
  let deaths = restartedDeaths;
  let stoppedCleanly = true;
  if (supervisor) {
    // Deaths as the supervisor logged them, before its own stop.
    deaths = supervisor.output().split('\n').filter((l) => l.includes('"event":"child_exited"')).length;
    const exit = await stopWorker(supervisor, 15_000);
    stoppedCleanly = exit.code === 0;
  }
  killAll(all);
  const poisonFacts = poison
    ? (
        await db.query(
          `select t.task_type, c.outcome, (select count(*)::int from queues.task_lease l where l.task_id = t.task_id) as leases,
                  (select array_agg(e.error_message) from queues.error e where e.task_id = t.task_id) as errors
             from queues.task t left join queues.task_completed c using (task_id)
            where t.task_id > $1 and t.task_type in ('crash', 'oom') order by t.task_type`,
          [fromId],
        )
      ).rows
    : [];
  const tally = await taskTally(db, fromId, `t.task_type = 'db_function'`);
  await dropPending(db, fromId);
  return { seconds, rate: n / seconds, done, abandoned, deaths, poisonFacts, tally, stoppedCleanly };
}

export const scenario: Scenario = {
  id: 6,
  name: 'poison',
  title: 'poison tasks (crash, out of memory)',
  fast: false,
  async run({ db, quick, log }) {
    const r = new Report();
    const n = quick ? 1500 : 4000;
    const base = await phase(db, n, false, `s6b${Date.now().toString(36)}`, 'supervised');
    log(`  supervised: baseline ${round(base.rate)} tasks/s`);
    const hit = await phase(db, n, true, `s6p${Date.now().toString(36)}`, 'supervised');
    const drop = 1 - hit.rate / base.rate;
    log(`  supervised: with poison ${round(hit.rate)} tasks/s`);
    const plainBase = await phase(db, n, false, `s6rb${Date.now().toString(36)}`, 'restarted');
    const plainHit = await phase(db, n, true, `s6rp${Date.now().toString(36)}`, 'restarted');
    const plainDrop = 1 - plainHit.rate / plainBase.rate;
    r.figure('normal tasks per phase', n);
    r.figure('MAX_LEASES', MAX_LEASES);
    r.figure('supervised: baseline throughput (tasks/s)', round(base.rate));
    r.figure('supervised: throughput with poison tasks (tasks/s)', round(hit.rate));
    r.figure('supervised: throughput drop (%)', round(drop * 100));
    r.figure('supervised: worker process deaths', hit.deaths);
    for (const p of hit.poisonFacts) r.figure(`supervised: ${p.task_type}: leases before abandonment`, p.leases);
    r.figure('restart loop: baseline throughput (tasks/s)', round(plainBase.rate));
    r.figure('restart loop: throughput with poison tasks (tasks/s)', round(plainHit.rate));
    r.figure('restart loop: throughput drop (%)', round(plainDrop * 100));
    r.figure('restart loop: worker deaths', plainHit.deaths);
    const phases = { base, hit, plainBase, plainHit };
    r.check('every normal task completed in every phase', Object.values(phases).every((p) => p.done && p.tally.open === 0));
    r.equal(
      'normal tasks all succeeded',
      Object.values(phases).map((p) => p.tally.succeeded),
      Object.values(phases).map(() => n),
    );
    for (const [mode, p] of [['supervised', hit], ['restart loop', plainHit]] as const) {
      r.check(`${mode}: both poison tasks abandoned`, p.abandoned, JSON.stringify(p.poisonFacts));
      r.check(
        `${mode}: abandoned after ${MAX_LEASES} leases, with an error`,
        p.poisonFacts.length === 2 && p.poisonFacts.every((f) => f.outcome === 'abandoned' && f.leases === MAX_LEASES && /abandoned: 3 leases expired/.test(String(f.errors?.[0]))),
        JSON.stringify(p.poisonFacts),
      );
      // One death per poison lease; a process that claimed both poison tasks dies once for two.
      r.check(`${mode}: the workers died only of the poison (MAX_LEASES <= deaths <= 2 × MAX_LEASES)`, p.deaths >= MAX_LEASES && p.deaths <= 2 * MAX_LEASES, `${p.deaths}`);
    }
    r.check('supervised: no death without poison', base.deaths === 0, `${base.deaths}`);
    r.check('supervisor and its workers stopped with exit 0', base.stoppedCleanly && hit.stoppedCleanly);
    r.check('supervised: other tasks\' throughput dropped by less than 10%', drop < 0.1, `${round(drop * 100)}%`);
    return r.result();
  },
};
