// 11. A poison step that crashes PostgreSQL: its backend dies by SIGKILL (it kills
// itself, as a segfault in an extension or the OOM killer would kill it), each time it
// runs, under a steady mixed load (db_function steps, email processes). Each death makes
// the postmaster reset every connection and replay the WAL. Invariants: the poison task
// ends abandoned after MAX_LEASES + 1 crashes (the first makes it a suspect; each lease
// after names it the claim's suspect, commits before it runs, and its expiry counts); every other task completes, each step took
// effect exactly once, each email process sent within its idempotency bound; the workers
// stay up and reconnect by themselves.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { startFakeResend } from '@org/providers/testing';
import {
  dropPending,
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
import { effectAnomalies, startLoad } from '../load.js';
import { fastEnv, killAll, logLines, startWorker, stopWorker, type WorkerProcess } from '../workers.js';

export const MAX_LEASES = 3;

/**
 * chaos.crash_step: a step whose backend kills itself with SIGKILL, as a segfault in an
 * extension or the OOM killer would (through COPY TO PROGRAM: the function belongs to the
 * superuser). The postmaster then resets every connection and replays the WAL. (A function
 * that ends its own backend with pg_terminate_backend would be a clean FATAL, not a crash:
 * the other backends live on.)
 */
export async function installCrashFixture(db: ChaosDb): Promise<void> {
  await db.pool('root').query(`
    create or replace function chaos.crash_step(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      -- One line per crash in chaos-crashes (in the data folder) first: see crashCount.
      execute format('copy (select 1) to program %L', 'date +%s.%N >> chaos-crashes && kill -9 ' || pg_backend_pid());
      return '{"success": true}'::jsonb;
    end $$;
    revoke execute on function chaos.crash_step(jsonb) from public;
    grant execute on function chaos.crash_step(jsonb) to ${db.dbUsers.worker};
    select internal.register_runnable_function('chaos.crash_step(jsonb)'::regprocedure);
  `);
}

/** How many times chaos.crash_step crashed the server so far (the lines of chaos-crashes). */
export async function crashCount(db: ChaosDb): Promise<number> {
  const { rows } = await db
    .pool('root')
    .query<{ n: number }>(
      `select coalesce(length(f) - length(replace(f, chr(10), '')), 0)::int as n from pg_read_file('chaos-crashes', true) f`,
    );
  return rows[0]!.n;
}

interface Crash {
  /** Leases live at the last sample before the crash. */
  inFlight: number;
  /** From the crash to the server accepting connections again. */
  backInMs: number;
  /** From the crash to the first completion of a task leased after it. */
  resumedMs: number;
}

/**
 * Watches the server on a connection of its own: a crash is when that connection dies.
 * Samples the live leases every 50 ms; after a crash, waits until the server answers and
 * work resumes (a completion of a task leased after the crash).
 */
function watchCrashes(db: ChaosDb, fromId: number, onCrash: (c: Crash) => void) {
  let running = true;
  const measuring: Promise<void>[] = [];
  const measure = async (crashedAt: number, inFlight: number) => {
    await waitFor(async () => (await db.query('select 1')).rowCount === 1, 60_000, 20);
    const backInMs = Date.now() - crashedAt;
    await waitFor(
      async () =>
        (
          await db.query(
            `select 1 from queues.task_end c join queues.task_lease_effective l on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
              where c.task_id > $1 and l.leased_at > now() - make_interval(secs => $2) limit 1`,
            [fromId, (Date.now() - crashedAt) / 1000],
          )
        ).rowCount === 1,
      60_000,
      20,
    );
    onCrash({ inFlight, backInMs, resumedMs: Date.now() - crashedAt });
  };
  const loop = (async () => {
    let inFlight = 0;
    while (running) {
      const client = new pg.Client({ connectionString: db.url('root'), application_name: 'chaos-crash-watch' });
      client.on('error', () => {});
      try {
        await client.connect();
      } catch {
        // The server is still recovering.
        await sleep(20);
        continue;
      }
      while (running) {
        try {
          inFlight = (
            await client.query<{ n: number }>(
              `select count(*)::int as n from queues.task_pending
                where task_id > $1 and current_lease_id is not null and available_at > now()`,
              [fromId],
            )
          ).rows[0]!.n;
        } catch {
          if (running) measuring.push(measure(Date.now(), inFlight));
          break;
        }
        await sleep(50);
      }
      await client.end().catch(() => {});
    }
  })();
  return {
    /** The crashes seen so far. */
    count: () => measuring.length,
    stop: async () => {
      running = false;
      await loop;
      await Promise.all(measuring);
    },
  };
}

/** The poison task alone, one worker: until it is completed or has crashed the server `maxCrashes` times. */
async function quietPhase(db: ChaosDb, env: Record<string, string>, maxCrashes: number) {
  const fromId = await lastTaskId(db);
  const before = await crashCount(db);
  const worker = startWorker({ env, prefix: 's11-alone' });
  const id = (
    await one<{ id: string }>(
      db,
      `select queues.enqueue('db_function', '{"db_function": "chaos.crash_step"}'::jsonb)::text as id`,
    )
  ).id;
  const state = async () =>
    await one<{ outcome: string | null; leases: number; named: number }>(
      db,
      `select (select c.outcome from queues.task_end c where c.task_id = $1) as outcome,
                (select count(*)::int from queues.task_leases l where l.task_id = $1) as leases,
                (select count(*)::int from queues.task_leases l where l.task_id = $1 and l.suspect) as named`,
      [id],
    );
  await waitFor(
    async () => (await state()).outcome !== null || (await crashCount(db)) - before >= maxCrashes,
    120_000,
    100,
  );
  await waitFor(async () => (await db.query('select 1')).rowCount === 1, 60_000, 50);
  await stopWorker(worker);
  killAll([worker]);
  const final = await waitFor(async () => (await state()).outcome !== null, 5_000, 100).then(state);
  await dropPending(db, fromId);
  return { ...final, crashes: (await crashCount(db)) - before };
}

export const scenario: Scenario = {
  id: 11,
  name: 'backend-crash',
  title: 'a poison step crashes PostgreSQL (its backend killed with SIGKILL), again and again',
  fast: true,
  async run({ db, quick, log, ownsServer }) {
    const r = new Report();
    if (!ownsServer) return { figures: {}, checks: [], skipped: 'needs a server of its own (it crashes it)' };
    await installCrashFixture(db);
    // Whether an asynchronously committed write reaches the disk before a crash is down to
    // chance on a busy server: the WAL writer flushes every wal_writer_delay (200 ms by
    // default), and any synchronous commit writes the WAL before it. At its longest (10 s),
    // only the synchronous commits write it, as on a quiet server: what the queue must
    // keep across a crash is then kept only if it is committed to be kept.
    await db.pool('root').query(`alter system set wal_writer_delay = '10s'`);
    await db.pool('root').query('select pg_reload_conf()');
    // Enough kills for MAX_LEASES + 1 crashes and some to spare: a poison task still
    // pending after them was not abandoned.
    const maxCrashes = MAX_LEASES + (quick ? 3 : 5);
    const tag = `s11-${Date.now().toString(36)}`;
    const resend = await startFakeResend();
    const env = fastEnv(db.url('worker'), {
      WORKER_ROLE: 'db_function,email',
      RESEND_API_KEY: 're_chaos_key',
      RESEND_BASE_URL: resend.url,
      MAX_LEASES: String(MAX_LEASES),
      // Longer than the server's recovery from a crash (2 to 4 s here): the leases of runs
      // a crash cut short are given back before they expire (see the worker's crash-notice.ts).
      LEASE_SECONDS: '6',
      LOG_LEVEL: 'info',
    });
    // First alone: the poison task and one worker, nothing else. The only writes then are
    // the worker's own, so whatever the crash can take, it takes.
    const quiet = await quietPhase(db, env, maxCrashes);
    r.figure('alone: crashes until abandoned', quiet.crashes);
    r.figure('alone: poison leases / named its suspect', `${quiet.leases} / ${quiet.named}`);
    r.check(
      'alone: the poison task was abandoned after MAX_LEASES + 1 crashes',
      quiet.outcome === 'abandoned' && quiet.crashes <= MAX_LEASES + 1,
      `outcome ${quiet.outcome ?? 'none (still pending)'} after ${quiet.crashes} crashes; ${quiet.leases} leases, ${quiet.named} named it their suspect`,
    );
    const fromId = await lastTaskId(db);
    const workers: WorkerProcess[] = [0, 1].map(() => startWorker({ env, prefix: 's11' }));
    const load = startLoad({
      app: db.pool('app'),
      owner: db.pool('owner'),
      tag,
      tickMs: 250,
      stepsPerTick: 3,
      emailsPerTick: 1,
      stepSleep: [0.01, 0.1],
      maxTicks: 4 * 600,
    });
    const crashes: Crash[] = [];
    const before = await crashCount(db);
    const watch = watchCrashes(db, fromId, (c) => {
      crashes.push(c);
      log(`  crash ${crashes.length}: ${c.inFlight} tasks in flight, work resumed after ${c.resumedMs} ms`);
    });
    let poisonId = '';
    const poisonState = async () =>
      (
        await one<{ outcome: string | null }>(
          db,
          'select (select c.outcome from queues.task_end c where c.task_id = $1) as outcome',
          [poisonId],
        )
      ).outcome;
    let outcome: string | null = null;
    const started = Date.now();
    try {
      await sleep(1000);
      poisonId = (
        await one<{ id: string }>(
          db,
          `select queues.enqueue('db_function', '{"db_function": "chaos.crash_step"}'::jsonb)::text as id`,
        )
      ).id;
      // Until the poison task is completed (abandoned, if all is well), or has crashed the
      // server more than enough times.
      await waitFor(
        async () => (outcome = await poisonState()) !== null || (await crashCount(db)) - before >= maxCrashes,
        quick ? 90_000 : 180_000,
        100,
      );
      // A bit more load after the last crash, for the rest to run through the recovery.
      await sleep(1500);
    } finally {
      await load.stop();
      await watch.stop();
    }
    const chaosSeconds = (Date.now() - started) / 1000;
    await db.pool('root').query('alter system reset wal_writer_delay');
    await db.pool('root').query('select pg_reload_conf()');
    const drained = await waitFor(
      async () => (await openDue(db, fromId, `t.task_id <> ${Number(poisonId || 0)}`)) === 0,
      90_000,
      250,
    );
    outcome ??= await poisonState();
    if (process.env.CHAOS_LOGS) {
      for (const w of workers) writeFileSync(join(process.env.CHAOS_LOGS, `${w.id}.log`), w.output());
      const { rows } = await db.query(
        `select l.task_id, l.task_lease_id, extract(epoch from l.leased_at)::text as leased, l.worker_id,
                l.suspect as named,
                exists (select 1 from queues.task_lease_release s where s.task_id = l.task_id and s.task_lease_id = l.task_lease_id) as released
           from queues.task_lease_effective l
          where l.task_id in (select c.task_id from queues.task_end c where c.task_id > $1 and c.outcome <> 'succeeded')
          order by l.task_id, l.task_lease_id`,
        [fromId],
      );
      const crashesAt = (await db.pool('root').query(`select pg_read_file('chaos-crashes', true) as f`)).rows[0].f;
      writeFileSync(join(process.env.CHAOS_LOGS, 'leases.json'), JSON.stringify({ rows, crashesAt }, null, 1));
    }
    const alive = workers.filter((w) => w.alive()).length;
    const exits = await Promise.all(workers.map((w) => stopWorker(w)));
    killAll(workers);
    await resend.close();

    const poison = await one<{ leases: number; named: number; interruptions: number; error: string | null }>(
      db,
      `select (select count(*)::int from queues.task_leases l where l.task_id = $1) as leases,
              (select count(*)::int from queues.task_leases l where l.task_id = $1 and l.suspect) as named,
              (select count(*)::int from queues.task_interruption x where x.task_id = $1) as interruptions,
              (select e.error_message from queues.error e where e.task_id = $1 order by e.error_id desc limit 1) as error`,
      [poisonId],
    );
    const others = `t.task_id <> ${Number(poisonId || 0)}`;
    const tally = await taskTally(db, fromId, others);
    const effects = await effectAnomalies(db.pool('owner'), tag, fromId);
    const roots = (
      await db.query(
        `select exists (select 1 from comms.send_email_task_succeeded s where s.send_email_task_id = t.send_email_task_id) as succeeded,
                (select count(*)::int from comms.send_email_attempt a where a.send_email_task_id = t.send_email_task_id) as attempts
           from comms.send_email_task t join comms.email_message m using (message_id)
          where m.to_address like $1 || '-%'`,
        [tag],
      )
    ).rows;
    const calls = new Map<string, number>();
    for (const req of resend.requests) {
      const key = String(req.headers['idempotency-key'] ?? '');
      calls.set(key, (calls.get(key) ?? 0) + 1);
    }
    const crashTotal = (await crashCount(db)) - before;
    const overCalled = [...calls.entries()].filter(([, n]) => n > 1 + crashTotal);
    const failures =
      tally.failed + tally.abandoned > 0
        ? (
            await db.query(
              `select t.task_type, c.outcome, (select e.error_message from queues.error e where e.task_id = t.task_id order by e.error_id desc limit 1) as error
                 from queues.task t join queues.task_end c using (task_id)
                where t.task_id > $1 and ${others} and c.outcome <> 'succeeded' limit 5`,
              [fromId],
            )
          ).rows
        : [];
    const reconnects = workers
      .flatMap((w) => logLines(w.output()))
      .filter((l) => l.event === 'pool_error' || l.event === 'task_interrupted').length;

    r.figure('MAX_LEASES', MAX_LEASES);
    r.figure('crashes of PostgreSQL (backend SIGKILLed)', crashTotal);
    r.figure('chaos duration (s)', Math.round(chaosSeconds));
    r.figure(
      'poison task: leases / named its suspect / interruptions',
      `${poison.leases} / ${poison.named} / ${poison.interruptions}`,
    );
    r.figure('poison task: outcome', outcome ?? 'still pending');
    r.figure('tasks in flight at a crash (per crash)', crashes.map((c) => c.inFlight).join(', '));
    r.figure(
      'server accepting connections again after a crash (s, per crash)',
      crashes.map((c) => round(c.backInMs / 1000, 2)).join(', '),
    );
    r.figure('work resumed after a crash (s, per crash)', crashes.map((c) => round(c.resumedMs / 1000, 2)).join(', '));
    r.figure('other tasks (steps + supervisors + email tasks)', tally.total);
    r.figure('steps enqueued', load.steps);
    r.figure('email processes', load.emails);
    r.figure('enqueue calls refused while the server recovered', load.errors.length);
    r.figure('provider calls', resend.requests.length);
    r.figure('email processes that needed more than one attempt', roots.filter((x) => x.attempts > 1).length);
    r.figure('workers: lost connections and interrupted runs logged', reconnects);
    r.check(
      'the poison task was abandoned',
      outcome === 'abandoned',
      `outcome ${outcome ?? 'none (still pending)'} after ${crashTotal} crashes; ${JSON.stringify(poison)}`,
    );
    r.check(
      'after at most MAX_LEASES + 1 crashes',
      crashTotal <= MAX_LEASES + 1,
      `${crashTotal} crashes; ${JSON.stringify(poison)}`,
    );
    r.check('every other task completed (0 lost)', drained && tally.open === 0, `${tally.open} open of ${tally.total}`);
    r.check(
      'every other task succeeded',
      tally.failed === 0 && tally.abandoned === 0,
      `failed ${tally.failed}, abandoned ${tally.abandoned} ${JSON.stringify(failures)}`,
    );
    r.equal('every step took effect exactly once', effects, { duplicated: 0, missing: 0 });
    r.check(
      'every email process succeeded',
      // At least those whose enqueue was answered (one whose answer a crash cut off may exist too).
      roots.length >= load.emails && roots.every((x) => x.succeeded),
      `${roots.filter((x) => x.succeeded).length}/${roots.length} succeeded (${load.emails} answered); attempts ${roots.map((x) => x.attempts).join(',')}`,
    );
    r.check(
      'provider calls per attempt <= 1 + crashes',
      overCalled.length === 0,
      JSON.stringify(overCalled.slice(0, 5)),
    );
    r.check('workers stayed up through the crashes', alive === workers.length, `${alive}/${workers.length}`);
    r.check(
      'workers stopped with exit 0',
      exits.every((e) => e.code === 0),
      JSON.stringify(exits),
    );
    await dropPending(db, fromId);
    return r.result();
  },
};
