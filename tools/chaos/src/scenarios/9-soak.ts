// 9. Soak at about 70% of the measured peak: RSS and errors flat, no deadlocks, table
// and index growth per million tasks.
import { readFileSync } from 'node:fs';
import {
  lastTaskId,
  one,
  openDue,
  Report,
  round,
  sleep,
  taskTally,
  waitFor,
  type ChaosDb,
  type Scenario,
} from '../harness.js';
import { killAll, logLines, rssKb, startWorker, stopWorker, type WorkerProcess } from '../workers.js';

const relSizes = async (db: ChaosDb) =>
  Object.fromEntries(
    (
      await db.query(
        `select format('%I.%I', n.nspname, c.relname) as rel, pg_table_size(c.oid)::bigint as t, pg_indexes_size(c.oid)::bigint as i
           from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'queues' and c.relkind = 'r'`,
      )
    ).rows.map((x) => [x.rel as string, { t: Number(x.t), i: Number(x.i) }]),
  ) as Record<string, { t: number; i: number }>;

/** Microseconds stalled so far from /proc/pressure (`full` for io, `some` for cpu); 0 when unavailable. */
function pressureUs(resource: 'io' | 'cpu'): number {
  try {
    const text = readFileSync(`/proc/pressure/${resource}`, 'utf8');
    const m = new RegExp(`^${resource === 'io' ? 'full' : 'some'} .*total=(\\d+)`, 'm').exec(text);
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

async function enqueueNoops(db: ChaosDb, n: number) {
  const batch = JSON.stringify(
    Array.from({ length: n }, () => ({ task_type: 'db_function', payload: { db_function: 'internal.noop' } })),
  );
  await db.pool('owner').query('select queues.enqueue_many($1::jsonb)', [batch]);
}

export const scenario: Scenario = {
  id: 9,
  name: 'soak',
  title: 'soak at ~70% of peak throughput',
  fast: false,
  async run({ db, quick, log }) {
    const r = new Report();
    const seconds = quick ? 30 : 600;
    const env = {
      DATABASE_URL: db.url('worker'),
      WORKER_ROLE: 'db_function',
      CONCURRENCY: '8',
      POLL_INTERVAL_MS: '500',
      HEARTBEAT_INTERVAL_MS: '5000',
      LEASE_SECONDS: '30',
    };
    const workers: WorkerProcess[] = [0, 1].map(() => startWorker({ env, prefix: 's9' }));
    try {
      // Peak: a backlog drained as fast as the two workers go.
      const peakN = quick ? 2000 : 5000;
      const from0 = await lastTaskId(db);
      await sleep(1000);
      for (let i = 0; i < peakN; i += 1000) await enqueueNoops(db, Math.min(1000, peakN - i));
      const t0 = Date.now();
      await waitFor(async () => (await openDue(db, from0)) === 0, 120_000, 100);
      const peak = peakN / ((Date.now() - t0) / 1000);
      const rate = peak * 0.7;
      log(`  peak ${round(peak)} tasks/s; soaking at ${round(rate)} tasks/s for ${seconds} s`);

      const fromId = await lastTaskId(db);
      const deadlocks0 = Number(
        (await one(db, 'select deadlocks from pg_stat_database where datname = current_database()')).deadlocks,
      );
      const sizes0 = await relSizes(db);
      const errors0 = Number((await one(db, 'select count(*) as n from queues.error')).n);
      // Per sample (10 s): RSS, backlog, errors, tasks completed, the machine's stalls
      // (/proc/pressure: io full, cpu some), and what the worker role's active backends
      // were waiting on (sampled every tick), to tell a slow interval's cause.
      const samples: {
        at: number;
        ms: number;
        rss: number;
        backlog: number;
        errors: number;
        done: number;
        ioStall: number;
        cpuStall: number;
        waits: Record<string, number>;
      }[] = [];
      let enqueued = 0;
      let last = { at: 0, enqueued: 0, backlog: 0, io: pressureUs('io'), cpu: pressureUs('cpu') };
      let waits: Record<string, number> = {};
      const start = Date.now();
      let owed = 0;
      let nextSample = start;
      while (Date.now() - start < seconds * 1000) {
        const tick = Date.now();
        owed += rate / 4;
        const n = Math.floor(owed);
        owed -= n;
        if (n > 0) await enqueueNoops(db, n);
        enqueued += n;
        for (const w of // As the superuser: other roles' sessions show no state to the owner.
        (
          await db.pool('root').query(
            `select coalesce(wait_event_type || ':' || wait_event, 'running') as w, count(*)::int as n
               from pg_stat_activity where usename = $1 and state = 'active' group by 1`,
            [db.dbUsers.worker],
          )
        ).rows) {
          waits[w.w] = (waits[w.w] ?? 0) + w.n;
        }
        if (tick >= nextSample) {
          nextSample += quick ? 3000 : 10_000;
          const at = tick - start;
          const backlog = await openDue(db, fromId);
          const errors = Number((await one(db, 'select count(*) as n from queues.error')).n) - errors0;
          const io = pressureUs('io');
          const cpu = pressureUs('cpu');
          const ms = Math.max(1, at - last.at);
          samples.push({
            at,
            ms,
            rss: workers.reduce((s, w) => s + rssKb(w.pid), 0),
            backlog,
            errors,
            done: enqueued - last.enqueued - (backlog - last.backlog),
            ioStall: (io - last.io) / 1000 / ms,
            cpuStall: (cpu - last.cpu) / 1000 / ms,
            waits,
          });
          last = { at, enqueued, backlog, io, cpu };
          waits = {};
        }
        await sleep(Math.max(0, 250 - (Date.now() - tick)));
      }
      const drained = await waitFor(async () => (await openDue(db, fromId)) === 0, 60_000, 200);
      const elapsed = (Date.now() - start) / 1000;
      const tally = await taskTally(db, fromId);
      const deadlocks =
        Number((await one(db, 'select deadlocks from pg_stat_database where datname = current_database()')).deadlocks) -
        deadlocks0;
      const sizes1 = await relSizes(db);
      const alive = workers.filter((w) => w.alive()).length;
      const exits = await Promise.all(workers.map((w) => stopWorker(w)));
      const logErrors = workers.flatMap((w) => logLines(w.output())).filter((l) => Number(l.level) >= 50).length;

      // Flat: the mean of the last third against the first third, after a warm-up (first 20%).
      const warm = samples.filter((s) => s.at >= seconds * 200);
      const third = Math.max(1, Math.floor(warm.length / 3));
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
      const rssFirst = mean(warm.slice(0, third).map((s) => s.rss));
      const rssLast = mean(warm.slice(-third).map((s) => s.rss));
      const perMillion = (bytes: number) => round(((bytes / Math.max(1, tally.total)) * 1e6) / 1024 / 1024, 1);
      let tableGrowth = 0;
      let indexGrowth = 0;
      const rows: string[] = [];
      for (const [rel, s1] of Object.entries(sizes1)) {
        const s0 = sizes0[rel] ?? { t: 0, i: 0 };
        tableGrowth += s1.t - s0.t;
        indexGrowth += s1.i - s0.i;
        if (s1.t - s0.t + s1.i - s0.i > 0) rows.push(`${rel} ${perMillion(s1.t - s0.t)}+${perMillion(s1.i - s0.i)}`);
      }
      r.figure('peak throughput (tasks/s, 2 workers × 8)', round(peak));
      r.figure('soak rate (tasks/s)', round(rate));
      r.figure('soak duration (s)', round(elapsed, 0));
      r.figure('tasks during the soak', tally.total);
      r.figure('backlog max (tasks)', Math.max(0, ...samples.map((s) => s.backlog)));
      // The slowest interval after the first, and what the machine and the backends did then.
      const slowest = samples
        .slice(1)
        .reduce<(typeof samples)[number] | undefined>(
          (a, b) => (!a || b.done / b.ms < a.done / a.ms ? b : a),
          undefined,
        );
      if (slowest) {
        const topWaits = Object.entries(slowest.waits)
          .sort((a, b) => b[1] - a[1])
          .slice(0, 4)
          .map(([w, c]) => `${w} ${c}`)
          .join(', ');
        r.figure(
          'slowest interval (tasks/s completed; io and cpu stall % from /proc/pressure; worker backends by wait)',
          `${round((slowest.done * 1000) / slowest.ms)} tasks/s at ${round(slowest.at / 1000, 0)} s; io ${round(slowest.ioStall * 100)}%, cpu ${round(slowest.cpuStall * 100)}%; ${topWaits || 'no active backend sampled'}`,
        );
      }
      r.figure(
        'io stall, max over intervals (% of time, /proc/pressure/io full)',
        round(Math.max(0, ...samples.map((s) => s.ioStall)) * 100),
      );
      r.figure('worker RSS first third (MB, both workers)', round(rssFirst / 1024));
      r.figure('worker RSS last third (MB, both workers)', round(rssLast / 1024));
      r.figure('error rows during the soak', samples.at(-1)?.errors ?? 0);
      r.figure('worker error log lines', logErrors);
      r.figure('deadlocks (pg_stat_database delta)', deadlocks);
      r.figure('queues tables growth per 1M tasks (MB)', perMillion(tableGrowth));
      r.figure('queues indexes growth per 1M tasks (MB)', perMillion(indexGrowth));
      r.figure('growth per 1M tasks by table (MB table+index)', rows.join('; '));
      r.check(
        'every task completed, none failed',
        drained && tally.open === 0 && tally.succeeded === tally.total,
        JSON.stringify(tally),
      );
      r.check(
        'the backlog stayed bounded (< 10 s of work)',
        Math.max(0, ...samples.map((s) => s.backlog)) < rate * 10,
        JSON.stringify(samples.map((s) => s.backlog)),
      );
      r.check(
        'RSS flat (last third within 25% of the first)',
        rssLast <= rssFirst * 1.25,
        `${round(rssFirst / 1024)} -> ${round(rssLast / 1024)} MB`,
      );
      r.check('no error rows, no error log lines', (samples.at(-1)?.errors ?? 0) === 0 && logErrors === 0);
      r.equal('no deadlocks', deadlocks, 0);
      r.check(
        'workers stayed up and stopped with exit 0',
        alive === 2 && exits.every((e) => e.code === 0),
        JSON.stringify(exits),
      );
    } finally {
      killAll(workers);
    }
    return r.result();
  },
};
