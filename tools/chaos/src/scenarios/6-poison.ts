// 6. Poison tasks: a handler that kills its process (SIGKILL) and one that exhausts its
// heap. They are abandoned after MAX_LEASES leases, while the other tasks' throughput
// drops by less than 10%. Dead workers are restarted at once (as an orchestrator would).
import { dropPending, lastTaskId, one, Report, round, sleep, taskTally, waitFor, type ChaosDb, type Scenario } from '../harness.js';
import { killAll, startWorker, type WorkerProcess } from '../workers.js';

const MAX_LEASES = 3;

async function phase(db: ChaosDb, n: number, poison: boolean, tag: string) {
  const fromId = await lastTaskId(db);
  const env = {
    DATABASE_URL: db.url('worker'), WORKER_ROLE: 'db_function,crash,oom', CONCURRENCY: '4', POLL_INTERVAL_MS: '200',
    HEARTBEAT_INTERVAL_MS: '500', LEASE_SECONDS: '2', MAX_LEASES: String(MAX_LEASES), SHUTDOWN_GRACE_MS: '2000',
  };
  const workers: WorkerProcess[] = [];
  const all: WorkerProcess[] = [];
  let deaths = 0;
  let running = true;
  const keep = (slot: number) => {
    const w = startWorker({ env, script: 'entry', prefix: `s6-${tag}`, nodeArgs: ['--max-old-space-size=64'] });
    workers[slot] = w;
    all.push(w);
    void w.exited.then(async () => {
      if (!running) return;
      deaths++;
      await sleep(200);
      if (running) keep(slot);
    });
  };
  keep(0);
  keep(1);
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
  return { seconds, rate: n / seconds, done, abandoned, deaths, poisonFacts, tally };
}

export const scenario: Scenario = {
  id: 6,
  name: 'poison',
  title: 'poison tasks (crash, out of memory)',
  fast: false,
  async run({ db, quick, log }) {
    const r = new Report();
    const n = quick ? 1500 : 4000;
    const base = await phase(db, n, false, `s6b${Date.now().toString(36)}`);
    log(`  baseline ${round(base.rate)} tasks/s`);
    const hit = await phase(db, n, true, `s6p${Date.now().toString(36)}`);
    const drop = 1 - hit.rate / base.rate;
    r.figure('normal tasks per phase', n);
    r.figure('baseline throughput (tasks/s)', round(base.rate));
    r.figure('throughput with poison tasks (tasks/s)', round(hit.rate));
    r.figure('throughput drop (%)', round(drop * 100));
    r.figure('worker deaths (restarted)', hit.deaths);
    r.figure('MAX_LEASES', MAX_LEASES);
    for (const p of hit.poisonFacts) r.figure(`${p.task_type}: leases before abandonment`, p.leases);
    r.check('every normal task completed in both phases', base.done && hit.done && base.tally.open === 0 && hit.tally.open === 0);
    r.equal('normal tasks all succeeded', { base: base.tally.succeeded, hit: hit.tally.succeeded }, { base: n, hit: n });
    r.check('both poison tasks abandoned', hit.abandoned, JSON.stringify(hit.poisonFacts));
    r.check(
      `abandoned after ${MAX_LEASES} leases, with an error`,
      hit.poisonFacts.length === 2 && hit.poisonFacts.every((p) => p.outcome === 'abandoned' && p.leases === MAX_LEASES && /abandoned: 3 leases expired/.test(String(p.errors?.[0]))),
      JSON.stringify(hit.poisonFacts),
    );
    // One death per poison lease; a worker that claimed both poison tasks dies once for two.
    r.check('the workers died only of the poison (MAX_LEASES <= deaths <= 2 × MAX_LEASES)', hit.deaths >= MAX_LEASES && hit.deaths <= 2 * MAX_LEASES, `${hit.deaths}`);
    r.check('other tasks\' throughput dropped by less than 10%', drop < 0.1, `${round(drop * 100)}%`);
    return r.result();
  },
};
