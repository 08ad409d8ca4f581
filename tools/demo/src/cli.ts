// `npm run demo`: one of each business process on the development database (embedded
// unless DATABASE_URL), run by a real worker with the local providers (emails and SMS
// into .data/outbox, files deleted from .data/storage), until every process reaches its
// terminal fact; then the role-based worker system's chain for DEMO_STORES (default 5)
// new stores (menu-chain.ts). Backoffs are scaled down for the run and restored after.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { dataRoot, openDevServer } from '@org/db-tools';
import { providersFromEnv } from '@org/providers';
import { createLogger, Worker } from '@org/worker';
import { defaultRegistry } from '@org/worker/command';
import { runMenuChainDemo } from './menu-chain.js';

interface Process {
  name: string;
  /** SQL returning one row {state: 'running' | 'succeeded' | 'failed', detail: text}. */
  stateSql: string;
  id: string;
}

const say = (line: string) => process.stdout.write(`${line}\n`);

async function main(): Promise<number> {
  const { server, urls } = await openDevServer({ quiet: true });
  const owner = new pg.Client({ connectionString: urls.owner });
  const app = new pg.Client({ connectionString: urls.app });
  await owner.connect();
  await app.connect();
  let worker: Worker | undefined;
  // Beside a running `npm start` (or any worker on this database), that worker would take
  // the demo's tasks, with its own providers and fake menu platform: the demo could not
  // tell what it shows. Say so instead of running.
  const others = (
    await owner.query<{ worker_id: string }>(
      `select worker_id from queues.worker
        where stopped_at is null
          and last_seen_at > now() - make_interval(secs => 3 * coalesce(heartbeat_interval_ms, 30000) / 1000.0)
        order by worker_id`,
    )
  ).rows.map((r) => r.worker_id);
  if (others.length > 0) {
    process.stderr.write(
      `demo: ${others.length} worker(s) already run on this database (${others.join(', ')}), probably an \`npm start\`: ` +
        `they would take the demo's tasks. Stop it (Ctrl-C) and run \`npm run demo\` again; the demo starts its own worker.\n`,
    );
    await owner.end();
    await app.end();
    await server.stop();
    return 2;
  }
  const previousScale = (await owner.query(`select value from internal.setting where name = 'backoff_scale'`)).rows[0]
    ?.value as string | undefined;
  try {
    await owner.query(
      `insert into internal.setting (name, value) values ('backoff_scale', '0.02')
       on conflict (name) do update set value = excluded.value, updated_at = now()`,
    );
    const storage = join(dataRoot(), 'storage');
    const bucket = 'demo-recordings';
    const stamp = Date.now().toString(36);
    const object = (key: string) => {
      const path = join(storage, bucket, key);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, 'demo audio');
      return key;
    };

    // Domain data (as the owner: the demo plays the app that owns accounts and files).
    const accountId = (
      await owner.query(
        `insert into accounts.account (email, display_name) values ($1, 'Demo User') returning account_id`,
        [`demo-${stamp}@example.com`],
      )
    ).rows[0].account_id as string;
    for (const n of [1, 2]) {
      await owner.query(`insert into files.file (account_id, bucket, object_key) values ($1, $2, $3)`, [
        accountId,
        bucket,
        object(`accounts/${accountId}/recording-${stamp}-${n}.webm`),
      ]);
    }
    const looseFileId = (
      await owner.query(
        `insert into files.file (account_id, bucket, object_key) values ($1, $2, $3) returning file_id`,
        [accountId, bucket, object(`exports/${stamp}.zip`)],
      )
    ).rows[0].file_id as string;

    // Kick-offs, as the app role.
    const email = (
      await app.query(
        `select * from comms.send_email('Demo <demo@example.com>', $1, 'Hello from the queue', '<p>It works.</p>')`,
        [`reader-${stamp}@example.com`],
      )
    ).rows[0];
    const sms = (await app.query(`select * from comms.send_sms('+14155550123', 'Hello from the queue')`)).rows[0];
    const file = (await app.query(`select * from files.kickoff_file_deletion($1)`, [looseFileId])).rows[0];
    const account = (await app.query(`select * from api.request_account_deletion($1)`, [accountId])).rows[0];
    for (const [name, row] of [
      ['email', email],
      ['sms', sms],
      ['file', file],
      ['account', account],
    ] as const) {
      if (row?.validation_failure_message)
        throw new Error(`${name} kickoff refused: ${row.validation_failure_message}`);
    }
    const accountTaskId = (
      await owner.query(`select account_deletion_task_id from accounts.account_deletion_task where account_id = $1`, [
        accountId,
      ])
    ).rows[0].account_deletion_task_id as string;

    const terminal = (table: string, key: string) => `
      select case when exists (select 1 from ${table}_succeeded where ${key} = $1) then 'succeeded'
                  when exists (select 1 from ${table}_failed where ${key} = $1) then 'failed'
                  else 'running' end as state,
             coalesce((select reason from ${table}_failed where ${key} = $1), '') as detail`;
    const processes: Process[] = [
      {
        name: `send email #${email.send_email_task_id}`,
        stateSql: terminal('comms.send_email_task', 'send_email_task_id'),
        id: email.send_email_task_id,
      },
      {
        name: `send SMS #${sms.send_sms_task_id}`,
        stateSql: terminal('comms.send_sms_task', 'send_sms_task_id'),
        id: sms.send_sms_task_id,
      },
      {
        name: `delete file #${looseFileId}`,
        stateSql: terminal('files.file_deletion_task', 'file_deletion_task_id'),
        id: file.file_deletion_task_id,
      },
      {
        name: `delete account #${accountId}`,
        stateSql: terminal('accounts.account_deletion_task', 'account_deletion_task_id'),
        id: accountTaskId,
      },
    ];
    say('Kicked off: ' + processes.map((p) => p.name).join(', '));

    const logger = createLogger(process.env.LOG_LEVEL ?? 'warn');
    worker = new Worker({
      databaseUrl: urls.worker,
      roles: null,
      workerId: `demo-${stamp}`,
      concurrency: 8,
      pollIntervalMs: 200,
      heartbeatIntervalMs: 5000,
      leaseSeconds: 60,
      maxLeases: 5,
      shutdownGraceMs: 5000,
      registry: defaultRegistry(providersFromEnv(process.env, logger)),
      logger,
    });
    worker.on('completed', (task, report) =>
      say(
        `  task ${task.taskId} ${task.taskType.padEnd(11)} ${report.outcome}${report.note ? ` (${report.note})` : ''}`,
      ),
    );
    await worker.start();

    const deadline = Date.now() + 120_000;
    let states: { name: string; state: string; detail: string }[] = [];
    for (;;) {
      states = [];
      for (const p of processes) {
        const { rows } = await owner.query(p.stateSql, [p.id]);
        states.push({ name: p.name, state: rows[0].state, detail: rows[0].detail });
      }
      if (states.every((s) => s.state !== 'running') || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    say('\nTerminal facts:');
    for (const s of states) say(`  ${s.name.padEnd(24)} ${s.state}${s.detail ? ` (${s.detail})` : ''}`);
    const flags = (
      await owner.query(
        `select array_agg(flag order by flag) as flags from accounts.account_flag where account_id = $1`,
        [accountId],
      )
    ).rows[0].flags;
    say(`  account #${accountId} flags: ${(flags ?? []).join(', ')}`);
    say(`\nEmails and SMS are in ${join(dataRoot(), 'outbox')}; deleted files were under ${join(storage, bucket)}.`);
    const chainOk = await runMenuChainDemo(urls, owner, Number(process.env.DEMO_STORES ?? 5));
    return states.every((s) => s.state === 'succeeded') && chainOk ? 0 : 1;
  } finally {
    await worker?.stop();
    if (previousScale === undefined) await owner.query(`delete from internal.setting where name = 'backoff_scale'`);
    else await owner.query(`update internal.setting set value = $1 where name = 'backoff_scale'`, [previousScale]);
    await owner.end();
    await app.end();
    await server.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`demo failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
