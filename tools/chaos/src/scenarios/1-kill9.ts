// 1. kill -9 a worker mid-task, again and again, under a steady mixed load: db_function
// steps, email processes (supervisor + email task through the fake Resend).
import { startFakeResend } from '@org/providers/testing';
import { dropPending, lastTaskId, openDue, Report, sleep, taskTally, waitFor, type Scenario } from '../harness.js';
import { effectAnomalies, startLoad } from '../load.js';
import { fastEnv, killAll, startWorker, stopWorker, type WorkerProcess } from '../workers.js';

export const scenario: Scenario = {
  id: 1,
  name: 'kill9',
  title: 'kill -9 a worker mid-task under a steady mixed load',
  fast: false,
  async run({ db, quick, log }) {
    const r = new Report();
    const kills = quick ? 10 : 50;
    const tag = `s1-${Date.now().toString(36)}`;
    const fromId = await lastTaskId(db);
    const resend = await startFakeResend();
    const env = fastEnv(db.url('worker'), {
      WORKER_ROLE: 'db_function,email',
      RESEND_API_KEY: 're_chaos_key',
      RESEND_BASE_URL: resend.url,
    });
    const workers: WorkerProcess[] = [];
    const all: WorkerProcess[] = [];
    const spawn = () => {
      const w = startWorker({ env, prefix: 's1' });
      workers.push(w);
      all.push(w);
      return w;
    };
    spawn();
    spawn();
    // Sampled during the run: the most attempts without an outcome any email root had.
    let maxOutstanding = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        try {
          const { rows } = await db.query(
            `select coalesce(max(n), 0)::int as n from (
               select count(*) as n from comms.send_email_attempt a
                where not exists (select 1 from comms.send_email_attempt_succeeded s where s.send_email_attempt_id = a.send_email_attempt_id)
                  and not exists (select 1 from comms.send_email_attempt_failed f where f.send_email_attempt_id = a.send_email_attempt_id)
                group by a.send_email_task_id) x`,
          );
          maxOutstanding = Math.max(maxOutstanding, rows[0]!.n);
        } catch {
          // ignore
        }
        await sleep(250);
      }
    })();
    const load = startLoad({
      app: db.pool('app'),
      owner: db.pool('owner'),
      tag,
      tickMs: 250,
      stepsPerTick: 3,
      emailsPerTick: 1,
      stepSleep: [0.05, 0.4],
      maxTicks: 4 * 400,
    });
    // Per kill: the tasks the killed worker held (live leases) at that moment.
    const inFlightAtKill: { taskId: string; taskType: string; attemptId: string | null }[][] = [];
    const started = Date.now();
    try {
      await sleep(1000);
      for (let k = 0; k < kills; k++) {
        // The worker holding the most live leases right now.
        const { rows } = await db.query(
          `select l.worker_id, l.task_id::text, t.task_type, t.payload->>'send_email_attempt_id' as attempt_id
             from queues.task_lease_effective l join queues.task t using (task_id)
            where l.worker_id = any($1) and l.expires_at > now()
              and not exists (select 1 from queues.task_end c where c.task_id = l.task_id)`,
          [workers.map((w) => w.id)],
        );
        const byWorker = new Map<string, typeof rows>();
        for (const row of rows) byWorker.set(row.worker_id, [...(byWorker.get(row.worker_id) ?? []), row]);
        const victimId = [...byWorker.entries()].sort((a, b) => b[1].length - a[1].length)[0]?.[0];
        const victim = workers.find((w) => w.id === victimId) ?? workers[k % workers.length]!;
        victim.process.kill('SIGKILL');
        await victim.exited;
        inFlightAtKill.push(
          (byWorker.get(victim.id) ?? []).map((x) => ({
            taskId: x.task_id,
            taskType: x.task_type,
            attemptId: x.attempt_id,
          })),
        );
        workers.splice(workers.indexOf(victim), 1);
        spawn();
        await sleep(600 + Math.random() * 600);
      }
    } finally {
      await load.stop();
    }
    const chaosSeconds = (Date.now() - started) / 1000;
    log(`  ${kills} kills in ${Math.round(chaosSeconds)} s; draining`);
    const drained = await waitFor(async () => (await openDue(db, fromId)) === 0, 90_000, 250);
    sampling = false;
    await sampler;
    const exits = await Promise.all(workers.map((w) => stopWorker(w)));
    killAll(all);
    await resend.close();

    const tally = await taskTally(db, fromId);
    const effects = await effectAnomalies(db.pool('owner'), tag, fromId);
    const roots = (
      await db.query(
        `select t.send_email_task_id,
                exists (select 1 from comms.send_email_task_succeeded s where s.send_email_task_id = t.send_email_task_id) as succeeded,
                (select count(*)::int from comms.send_email_attempt a where a.send_email_task_id = t.send_email_task_id) as attempts,
                (select count(*)::int from comms.send_email_attempt_failed f join comms.send_email_attempt a using (send_email_attempt_id)
                  where a.send_email_task_id = t.send_email_task_id) as failed_attempts
           from comms.send_email_task t join comms.email_message m using (message_id)
          where m.to_address like $1 || '-%'`,
        [tag],
      )
    ).rows;
    // Provider calls per attempt (the attempt id is the Idempotency-Key).
    // The key ends with the attempt id (the provider namespaces it: "<namespace>:<schema>:<table>:<id>").
    const calls = new Map<string, number>();
    for (const req of resend.requests) {
      const key = String(req.headers['idempotency-key'] ?? '')
        .split(':')
        .pop()!;
      calls.set(key, (calls.get(key) ?? 0) + 1);
    }
    const killsHolding = new Map<string, number>();
    for (const held of inFlightAtKill)
      for (const t of held) if (t.attemptId) killsHolding.set(t.attemptId, (killsHolding.get(t.attemptId) ?? 0) + 1);
    const overCalled = [...calls.entries()].filter(([key, n]) => n > 1 + (killsHolding.get(key) ?? 0));
    const inFlightTasks = inFlightAtKill.flat();

    r.figure('kills', kills);
    r.figure('chaos duration (s)', Math.round(chaosSeconds));
    r.figure('tasks (steps + supervisors + email tasks)', tally.total);
    r.figure('steps enqueued', load.steps);
    r.figure('email processes', load.emails);
    r.figure('tasks in flight at a kill (sum)', inFlightTasks.length);
    r.figure('email tasks in flight at a kill (sum)', inFlightTasks.filter((t) => t.taskType === 'email').length);
    r.figure('provider calls', resend.requests.length);
    r.figure(
      'provider calls for attempts in flight at a kill',
      [...killsHolding.keys()].reduce((s, k) => s + (calls.get(k) ?? 0), 0),
    );
    r.figure('lost tasks', tally.open);
    r.figure('max outstanding attempts per email root (sampled)', maxOutstanding);
    r.check('load ran without enqueue errors', load.errors.length === 0, load.errors.slice(0, 3).join('; '));
    r.check('every task completed (0 lost)', drained && tally.open === 0, `${tally.open} open of ${tally.total}`);
    const failures =
      tally.failed + tally.abandoned > 0
        ? (
            await db.query(
              `select t.task_type, c.outcome, (select e.error_message from queues.error e where e.task_id = t.task_id order by e.error_id desc limit 1) as error
                 from queues.task t join queues.task_end c using (task_id)
                where t.task_id > $1 and c.outcome <> 'succeeded' limit 5`,
              [fromId],
            )
          ).rows
        : [];
    r.check(
      'every task succeeded',
      tally.failed === 0 && tally.abandoned === 0,
      `failed ${tally.failed}, abandoned ${tally.abandoned} ${JSON.stringify(failures)}`,
    );
    r.equal('every step took effect exactly once', effects, { duplicated: 0, missing: 0 });
    r.check(
      'every email process succeeded',
      roots.length === load.emails && roots.every((x) => x.succeeded),
      `${roots.filter((x) => x.succeeded).length}/${load.emails}`,
    );
    r.check(
      'one attempt per email process (no double scheduling)',
      roots.every((x) => x.attempts === x.failed_attempts + 1),
      JSON.stringify(roots.filter((x) => x.attempts !== x.failed_attempts + 1).slice(0, 3)),
    );
    r.check('no supervisor ever had two outstanding attempts (sampled)', maxOutstanding <= 1, `max ${maxOutstanding}`);
    r.check(
      'provider calls per attempt <= 1 + kills that hit it',
      overCalled.length === 0,
      JSON.stringify(overCalled.slice(0, 5)),
    );
    r.check(
      'every attempt reached the provider',
      roots.reduce((s, x) => s + x.attempts, 0) <= calls.size,
      `${calls.size} keys`,
    );
    r.check(
      'surviving workers stopped with exit 0',
      exits.every((e) => e.code === 0),
      JSON.stringify(exits),
    );
    await dropPending(db, fromId);
    return r.result();
  },
};
