#!/usr/bin/env node
// npm run soak [-- --minutes 30] [--retention-minutes 60] [--partition-minutes 10]
//              [--sample-seconds 10] [--maintain-seconds 0] [--out FILE]
// A soak of the queue with history retention: on a fresh embedded PostgreSQL, two CLI
// workers (db_function, concurrency 8) first drain a backlog of about a minute of work to
// measure the peak they sustain; then
// tasks are enqueued at 70% of it for --minutes, with history sets sized to
// --partition-minutes of tasks at that rate and a --retention-minutes window. Maintenance
// runs from its installed schedule (every 10 minutes, through the schedules supervisor
// and the workers); --maintain-seconds N also enqueues the schedule's task (its task type
// and payload, as installed) every N s, so the workers run it as they run the schedule's
// (for short runs with short sets). Sampled every --sample-seconds: database and history
// size, dead tuples of the queue's tables, backlog and throughput; every 100 ms: lock waits
// of the worker role's backends (pg_locks.waitstart), by path (claim, settle/complete,
// other), with the relation waited for and what the blocking backend was running; and the
// server's log_lock_waits lines (every wait longer than deadlock_timeout, 1 s by default,
// left so: a shorter one makes the deadlock check run in the workers' backends before
// maintenance's own lock_timeout gives its locks back). Prints the samples and a summary;
// exits 1 when the backlog did not drain or a task did not succeed.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { dataRoot, openServer, provisionDatabase } from '@org/db-tools';
import { quietPool, round, sleep, waitFor } from './harness.js';
import { killAll, startWorker, stopWorker, type WorkerProcess } from './workers.js';

const say = (line: string) => process.stdout.write(`${line}\n`);

/** The path a worker backend's statement belongs to. */
function pathOf(query: string): 'claim' | 'settle' | 'other' {
  if (/claim_tasks/.test(query)) return 'claim';
  if (/settle_tasks|complete_tasks|run_steps/.test(query)) return 'settle';
  return 'other';
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string', default: '30' },
      'retention-minutes': { type: 'string', default: '60' },
      'partition-minutes': { type: 'string', default: '10' },
      'sample-seconds': { type: 'string', default: '10' },
      'maintain-seconds': { type: 'string', default: '0' },
      out: { type: 'string' },
    },
  });
  const minutes = Number(values.minutes);
  const retentionMinutes = Number(values['retention-minutes']);
  const partitionMinutes = Number(values['partition-minutes']);
  const sampleSeconds = Number(values['sample-seconds']);
  const maintainSeconds = Number(values['maintain-seconds']);
  for (const [name, v] of Object.entries({ minutes, retentionMinutes, partitionMinutes, sampleSeconds }))
    if (!(v > 0 && v <= 24 * 60)) throw new Error(`${name} must be a number of minutes/seconds above 0, got ${v}`);
  if (!(maintainSeconds >= 0)) throw new Error(`--maintain-seconds must be 0 or more, got ${maintainSeconds}`);

  const name = `soak-${process.pid}`;
  // log_lock_waits lines from the server log, with the statement that followed each.
  const lockLog: { line: string; ms: number; statement?: string }[] = [];
  const server = await openServer({
    name,
    log: (chunk) => {
      for (const line of chunk.split('\n')) {
        const m =
          /(?:still waiting for|acquired|detected deadlock while waiting for) .* after ([\d.]+) ms|detected deadlock/.exec(
            line,
          );
        if (m) lockLog.push({ line: line.trim(), ms: Number(m[1] ?? 0) });
        else if (/STATEMENT:/.test(line) && lockLog.length > 0 && !lockLog.at(-1)!.statement)
          lockLog.at(-1)!.statement = line.trim();
      }
    },
  });
  say(`soak: embedded PostgreSQL in ${join(dataRoot(), name)}`);
  const workers: WorkerProcess[] = [];
  const pools: pg.Pool[] = [];
  const lines: string[] = [];
  const out = (line: string) => {
    lines.push(line);
    say(line);
  };
  let failed: boolean;
  try {
    const urls = await provisionDatabase(server, 'soak', { fresh: true, quiet: true });
    const root = quietPool(urls.root, 3);
    const owner = quietPool(urls.owner, 3);
    pools.push(root, owner);
    await root.query(`alter system set log_lock_waits = on`);
    await root.query('select pg_reload_conf()');

    const env = {
      DATABASE_URL: urls.worker,
      WORKER_ROLE: 'db_function',
      CONCURRENCY: '8',
      POLL_INTERVAL_MS: '500',
      HEARTBEAT_INTERVAL_MS: '5000',
      LEASE_SECONDS: '30',
    };
    for (let i = 0; i < 2; i++) workers.push(startWorker({ env, prefix: 'soak' }));
    const enqueueNoops = async (n: number) =>
      owner.query('select queues.enqueue_many($1::jsonb)', [
        JSON.stringify(
          Array.from({ length: n }, () => ({ task_type: 'db_function', payload: { db_function: 'internal.noop' } })),
        ),
      ]);
    const open = async () =>
      Number(
        (
          await owner.query(
            `select count(*) as n from queues.task_pending_or_held p where p.scheduled_at <= now()
                and exists (select 1 from queues.task t where t.task_id = p.task_id and t.payload->>'db_function' = 'internal.noop')`,
          )
        ).rows[0].n,
      );

    // Peak: the rate the two workers sustain. A first backlog of 30,000 gives an estimate
    // (a few seconds: what the server does before its first checkpoint); a second one of
    // 60 s of work at that estimate is drained through checkpoints and autovacuum, which
    // is what a soak meets. The peak is the second rate. Its tasks (up to 2 million) go
    // into sets made for them, not the default partition (whose rows every attach of a
    // new partition would scan); retention drops them like the soak's own.
    await owner.query('update queues.history_setting set partition_size = 2500000, partitions_ahead = 1');
    await owner.query('select queues.maintain_history_at(now())');
    await sleep(1000);
    // The workers run while the backlog is enqueued: the rate is what was left once it was
    // all in, over the time it took to drain.
    const drain = async (n: number): Promise<number> => {
      for (let done = 0; done < n; done += 5000) await enqueueNoops(Math.min(5000, n - done));
      const left = await open();
      const t0 = Date.now();
      await waitFor(async () => (await open()) === 0, 600_000, 100);
      return left / ((Date.now() - t0) / 1000);
    };
    const estimate = await drain(30_000);
    const peak = await drain(Math.min(2_000_000, Math.round(estimate * 60)));
    const rate = peak * 0.7;

    // History sized to the rate: sets of partition-minutes of tasks, a retention-minutes
    // window; task ids continue above the sets the migration made, so the soak's tasks
    // fall into the sized sets.
    const partitionSize = Math.max(100, Math.round(rate * 60 * partitionMinutes));
    await owner.query(
      `update queues.history_setting set partition_size = $1, partitions_ahead = 2,
              retention = make_interval(mins => $2)`,
      [partitionSize, retentionMinutes],
    );
    await owner.query(
      `select setval(pg_get_serial_sequence('queues.task', 'task_id'),
                     greatest((select coalesce(max(upper_bound), 1) from queues.history_partitions() where not is_default),
                              (select coalesce(max(task_id), 0) + 1 from queues.task)))`,
    );
    await owner.query('select queues.maintain_history_at(now())');
    // The installed maintenance schedule runs once a supervisor is pending.
    await owner.query('select schedules.ensure_schedule_supervisor()');
    out(
      `peak ${round(peak)} tasks/s; soak at ${round(rate)} tasks/s for ${minutes} min; sets of ${partitionSize} task ids ` +
        `(${partitionMinutes} min), retention ${retentionMinutes} min, maintenance ${maintainSeconds > 0 ? `every ${maintainSeconds} s and ` : ''}on its schedule (*/10)`,
    );

    // Lock waits of the worker role's backends, every 100 ms: the longest wait seen per
    // (backend, wait start), by path.
    type Wait = { path: string; ms: number; query: string; on: string; blocker: string };
    const waitsSeen = new Map<string, Wait>();
    let sampling = true;
    const lockSampler = (async () => {
      while (sampling) {
        try {
          // The lock waited for (relation and mode), and what the first blocking backend runs.
          const { rows } = await root.query(
            `select l.pid, l.waitstart, extract(epoch from clock_timestamp() - l.waitstart) * 1000 as ms, a.query,
                    coalesce(l.relation::regclass::text, l.locktype) || ' ' || l.mode as on,
                    (select coalesce(b.state, '') || ': ' || left(b.query, 80) from pg_stat_activity b
                      where b.pid = (pg_blocking_pids(l.pid))[1]) as blocker
               from pg_locks l join pg_stat_activity a on a.pid = l.pid
              where not l.granted and l.waitstart is not null and a.usename = $1`,
            [server.dbUsers.worker],
          );
          for (const r of rows) {
            const key = `${r.pid}@${new Date(r.waitstart).toISOString()}`;
            const ms = Number(r.ms);
            const seen = waitsSeen.get(key);
            if (!seen || seen.ms < ms)
              waitsSeen.set(key, {
                path: pathOf(r.query),
                ms,
                query: String(r.query),
                on: String(r.on),
                blocker: String(r.blocker ?? ''),
              });
          }
        } catch {
          // keep sampling
        }
        await sleep(100);
      }
    })();
    // The maintenance schedule's task as installed, enqueued every --maintain-seconds:
    // the workers run it as they run the schedule's.
    const { rows: maintenanceTask } = await owner.query(
      `select v.task_type, v.payload from schedules.schedule s, schedules.current_version(s.schedule_id) v
        where s.name = 'queue_history_maintenance'`,
    );
    let maintaining = maintainSeconds > 0;
    const maintainer = (async () => {
      while (maintaining) {
        await sleep(maintainSeconds * 1000);
        if (maintaining)
          await owner
            .query('select queues.enqueue_many($1::jsonb)', [
              JSON.stringify([{ ...maintenanceTask[0], priority: 100 }]),
            ])
            .catch(() => {});
      }
    })();

    const sample = async () =>
      (
        await root.query(
          `select pg_database_size(current_database())::bigint as db_bytes,
                  (select coalesce(sum(total_bytes), 0) from queues.history_partitions())::bigint as history_bytes,
                  (select count(*) from queues.history_partitions() where not is_default)::int as sets,
                  (select count(*) from queues.history_partition_dropped)::int as dropped,
                  (select count(*) from queues.task_default)::int as in_default,
                  (select count(*) from queues.history_step_skipped)::int as skipped,
                  (select coalesce(sum(n_dead_tup), 0) from pg_stat_user_tables where schemaname = 'queues')::bigint as dead,
                  (select coalesce(max(n_dead_tup), 0) from pg_stat_user_tables where schemaname = 'queues' and relname = 'task_pending')::bigint as dead_pending`,
        )
      ).rows[0];
    out('');
    out(
      '| min | tasks/s done | backlog | db MB | history MB | sets | sets dropped | dead tuples (queues) | dead in task_pending | lock waits ≥ 100 ms (claim / settle / other) |',
    );
    out('|---|---|---|---|---|---|---|---|---|---|');
    const samples: Awaited<ReturnType<typeof sample>>[] = [];
    const start = Date.now();
    let owed = 0;
    let nextSample = start;
    // Done per interval: enqueued minus the change of the backlog (completions cannot be
    // counted in task_completed, whose old sets retention drops).
    let enqueued = 0;
    let prev = { at: start, enqueued: 0, backlog: await open() };
    while (Date.now() - start < minutes * 60_000) {
      const tick = Date.now();
      owed += rate / 4;
      const n = Math.floor(owed);
      owed -= n;
      if (n > 0)
        await enqueueNoops(n).then(
          () => (enqueued += n),
          () => {},
        );
      if (tick >= nextSample) {
        nextSample += sampleSeconds * 1000;
        const s = await sample();
        samples.push(s);
        const long = [...waitsSeen.values()].filter((w) => w.ms >= 100);
        const by = (p: string) => long.filter((w) => w.path === p).length;
        const backlog = await open();
        const done = ((enqueued - prev.enqueued - (backlog - prev.backlog)) * 1000) / Math.max(1, tick - prev.at);
        prev = { at: tick, enqueued, backlog };
        out(
          `| ${round((tick - start) / 60_000, 1)} | ${round(done)} | ${backlog} | ${round(Number(s.db_bytes) / 1048576)} | ` +
            `${round(Number(s.history_bytes) / 1048576)} | ${s.sets} | ${s.dropped} | ${s.dead} | ${s.dead_pending} | ${by('claim')} / ${by('settle')} / ${by('other')} |`,
        );
      }
      await sleep(Math.max(0, 250 - (Date.now() - tick)));
    }
    const drained = await waitFor(async () => (await open()) === 0, 120_000, 250);
    sampling = false;
    maintaining = false;
    await lockSampler;
    await maintainer;
    const exits = await Promise.all(workers.map((w) => stopWorker(w)));
    const { rows: notSucceeded } = await owner.query(
      `select c.task_id, t.task_type, t.payload->>'db_function' as fn, c.outcome,
              (select e.error_message from queues.error e where e.task_id = c.task_id order by e.error_id desc limit 1) as error
         from queues.task_end c join queues.task t on t.task_id = c.task_id
        where c.outcome <> 'succeeded' order by c.task_id limit 5`,
    );
    const failedTasks = Number(
      (await owner.query(`select count(*) as n from queues.task_end where outcome <> 'succeeded'`)).rows[0].n,
    );
    const deadlocks = Number(
      (await root.query('select deadlocks from pg_stat_database where datname = current_database()')).rows[0].deadlocks,
    );
    // Relation oids of the lock log, named where the relation still exists.
    const oids = [...new Set(lockLog.flatMap((l) => [...l.line.matchAll(/relation (\d+)/g)].map((m) => m[1]!)))];
    const names = new Map<string, string>(
      (
        await root.query(
          `select c.oid::text as oid, c.oid::regclass::text as name from pg_class c where c.oid = any($1::oid[])`,
          [oids],
        )
      ).rows.map((r) => [r.oid, r.name]),
    );

    const waits = [...waitsSeen.values()];
    const cell = (text: string, max: number) => text.split('\n')[0]!.replace(/\|/g, '\\|').slice(0, max);
    const max = (p: string) => round(Math.max(0, ...waits.filter((w) => w.path === p).map((w) => w.ms)), 1);
    const first = samples[0];
    const last = samples.at(-1);
    out('');
    out('| figure | value |');
    out('|---|---|');
    out(`| peak (tasks/s, 2 workers × 8) / soak rate | ${round(peak)} / ${round(rate)} |`);
    out(`| duration (min) | ${minutes} |`);
    out(
      `| database size first → last sample (MB) | ${round(Number(first?.db_bytes ?? 0) / 1048576)} → ${round(Number(last?.db_bytes ?? 0) / 1048576)} |`,
    );
    out(
      `| history size first → last sample (MB) | ${round(Number(first?.history_bytes ?? 0) / 1048576)} → ${round(Number(last?.history_bytes ?? 0) / 1048576)} |`,
    );
    out(`| history sets at the end / dropped during the run | ${last?.sets ?? 0} / ${last?.dropped ?? 0} |`);
    out(
      `| tasks in the default partition, most over samples | ${Math.max(0, ...samples.map((x) => Number(x.in_default)))} |`,
    );
    out(`| dead tuples in queues, max over samples | ${Math.max(0, ...samples.map((s) => Number(s.dead)))} |`);
    // Maintenance steps skipped (no free moment for their locks), by kind of step.
    const { rows: skips } = await owner.query(
      `select regexp_replace(step, '_p[0-9]+', '_p<n>') as step, count(*)::int as n, min(reason) as reason
         from queues.history_step_skipped group by 1 order by 2 desc`,
    );
    out(`| maintenance steps skipped | ${skips.reduce((sum, r) => sum + r.n, 0)} |`);
    for (const r of skips) out(`|   ${cell(r.step, 80)} × ${r.n} | ${cell(r.reason, 120)} |`);
    out(
      `| lock waits sampled (worker role): count; max ms claim / settle / other | ${waits.length}; ${max('claim')} / ${max('settle')} / ${max('other')} |`,
    );
    out(
      `| lock waits ≥ 100 ms on the claim path (sampled) | ${waits.filter((w) => w.path === 'claim' && w.ms >= 100).length} |`,
    );
    // The longest waits of each path: the lock waited for and what held it.
    for (const p of ['claim', 'settle', 'other'])
      for (const w of waits
        .filter((x) => x.path === p)
        .sort((a, b) => b.ms - a.ms)
        .slice(0, 2))
        out(`|   ${p} ${round(w.ms, 1)} ms on ${cell(w.on, 80)} | blocked by ${cell(w.blocker, 120)} |`);
    out(`| log_lock_waits lines (waits ≥ deadlock_timeout, any role) | ${lockLog.length} |`);
    out(`| deadlocks (pg_stat_database) | ${deadlocks} |`);
    // Deadlocks first, then the first waits.
    const shown = [
      ...lockLog.filter((l) => /deadlock/.test(l.line)),
      ...lockLog.filter((l) => !/deadlock/.test(l.line)),
    ];
    for (const l of shown.slice(0, 6)) {
      const line = l.line.replace(/relation (\d+)/g, (m, oid: string) => `${m} (${names.get(oid) ?? 'dropped since'})`);
      out(`|   ${cell(line, 240)} | ${cell(l.statement ?? '', 120)} |`);
    }
    out(`| backlog drained at the end / tasks not succeeded | ${drained ? 'yes' : '**no**'} / ${failedTasks} |`);
    for (const t of notSucceeded)
      out(`|   task ${t.task_id} (${t.task_type} ${t.fn ?? ''}) ${t.outcome} | ${cell(String(t.error ?? ''), 200)} |`);
    out(
      `| workers stopped with exit 0 | ${exits.every((e) => e.code === 0) ? 'yes' : `**no**: ${JSON.stringify(exits)}`} |`,
    );
    failed = !drained || failedTasks > 0;
  } finally {
    killAll(workers);
    for (const p of pools) await p.end().catch(() => {});
    await server.stop({ destroy: true });
  }
  if (values.out) writeFileSync(values.out, `${lines.join('\n')}\n`);
  return failed ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`soak failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
