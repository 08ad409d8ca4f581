// `npm run screenshots`: screenshots of every dashboard page, in docs/screenshots/.
//
// Starts a throwaway embedded PostgreSQL (.data/screenshots, deleted at the end), migrates
// a database, fills it with a little of everything (tasks of each type and state, a dead
// letter, a paused type, workers live and stale, a schedule with runs, an account
// deletion with a stuck file deletion), serves the API on a free port and photographs
// each page in headless Chromium (/usr/bin/chromium, or CHROMIUM).
// Run after a build: `npm run screenshots` builds first.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { chromium } from 'playwright-core';
import { openServer, provisionDatabase, repoRoot } from '@org/db-tools';
import { createApi } from '@org/web';

const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const TOKEN = 'screenshots-token-0123456789';
/** A read-only user's token: the shots marked not unlocked are taken logged in as it. */
const VIEWER_TOKEN = 'screenshots-viewer-0123456789';
const OUT = join(repoRoot(), 'docs', 'screenshots');
const say = (line) => process.stdout.write(`${line}\n`);

async function seed(urls) {
  const owner = new pg.Client({ connectionString: urls.owner });
  const app = new pg.Client({ connectionString: urls.app });
  const worker = new pg.Client({ connectionString: urls.worker });
  await Promise.all([owner.connect(), app.connect(), worker.connect()]);
  try {
    const q = (client, sql, params) => client.query(sql, params).then((r) => r.rows);
    // A busy hour: completions spread over the last 60 minutes (clock moved by the owner-only *_at functions).
    const now = Date.now();
    for (let m = 59; m >= 0; m -= 1) {
      const at = new Date(now - m * 60_000);
      for (const [type, n] of [
        ['email', 3 + (m % 7)],
        ['sms', 1 + (m % 3)],
        ['db_function', 4 + (m % 5)],
        ['file_delete', m % 2],
      ]) {
        for (let i = 0; i < n; i += 1) {
          const [{ task_id }] = await q(owner, `select queues.enqueue($1, $2::jsonb, $3::timestamptz) as task_id`, [
            type,
            JSON.stringify({ batch: m, i }),
            new Date(at.getTime() - 30_000).toISOString(),
          ]);
          const [lease] = await q(
            owner,
            `select task_lease_id from queues.claim_tasks_at($1::timestamptz, 'worker-a-1', 1, array[$2], 60, 5) where task_id = $3`,
            [new Date(at.getTime() - 20_000).toISOString(), type, task_id],
          );
          if (!lease) continue;
          const outcome = i === 0 && m % 11 === 0 ? 'failed' : 'succeeded';
          await q(
            owner,
            `insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type) values ($1, $2, $3, $4, $5)`,
            [task_id, lease.task_lease_id, at.toISOString(), outcome, type],
          );
          await q(owner, `delete from queues.task_pending where task_id = $1`, [task_id]);
          if (outcome === 'failed')
            await q(
              owner,
              `insert into queues.error (task_id, task_lease_id, error_message, created_at) values ($1, $2, 'provider answered 503 Service Unavailable', $3)`,
              [task_id, lease.task_lease_id, at.toISOString()],
            );
        }
      }
    }
    // A backlog: ready, scheduled, running tasks. Channel and db_function tasks are
    // worker-only types: enqueued as the owner, as the database's own processes do.
    for (let i = 0; i < 40; i += 1)
      await q(owner, `select queues.enqueue('email', $1::jsonb)`, [
        JSON.stringify({ to: `user${i}@example.com`, campaign: 'november' }),
      ]);
    for (let i = 0; i < 12; i += 1)
      await q(app, `select queues.enqueue('product_resync', $1::jsonb, now() + make_interval(hours => $2), 0, $3)`, [
        JSON.stringify({ store_id: 100 + i }),
        1 + (i % 4),
        `store:${100 + i}`,
      ]);
    await q(worker, `select queues.record_worker_heartbeat('worker-a-1', '{email,sms,db_function,file_delete}')`);
    await q(
      worker,
      `select queues.record_worker_heartbeat('worker-b-1', '{product_resync,store_discovery,analytics_refresh}')`,
    );
    await q(worker, `select * from queues.claim_tasks('worker-a-1', 3, '{email}', 300)`);
    // A stale worker holding a lease.
    await q(worker, `select queues.record_worker_heartbeat('worker-c-7', '{sms}')`);
    await q(owner, `select queues.enqueue('sms', '{"to": "+14155550100"}'::jsonb)`);
    await q(worker, `select * from queues.claim_tasks('worker-c-7', 1, '{sms}', 3600)`);
    await q(
      owner,
      `update queues.worker set last_seen_at = now() - interval '25 minutes', started_at = now() - interval '3 hours' where worker_id = 'worker-c-7'`,
    );
    // A dead letter with its error.
    const [dead] = await q(
      owner,
      `select queues.enqueue('db_function', '{"db_function": "internal.noop", "order_id": 4711}'::jsonb) as task_id`,
    );
    const [lease] = await q(
      worker,
      `select task_lease_id from queues.claim_tasks('worker-a-1', 1, '{db_function}', 60)`,
    );
    await q(worker, `select queues.fail_task($1, 'deadlock detected while refreshing orders', $2)`, [
      dead.task_id,
      lease.task_lease_id,
    ]);
    await q(worker, `select * from queues.complete_tasks($1, $2, '{failed}')`, [[dead.task_id], [lease.task_lease_id]]);
    // A paused type.
    await q(owner, `select admin.pause_task_type('sms', 'provider maintenance until 22:00')`);
    // A schedule with runs.
    await q(
      owner,
      `select * from schedules.upsert_schedule_at(now() - interval '2 hours', 'analytics.refresh', '*/30 * * * *', 'analytics_refresh', '{"views": ["daily_sales"]}'::jsonb, 0, 'skip')`,
    );
    await q(
      owner,
      `select * from schedules.upsert_schedule_at(now() - interval '2 hours', 'stores.discovery', '0 3 * * 1', 'store_discovery', '{}'::jsonb, 0, 'catch_up_once')`,
    );
    const [{ schedule_id: sid }] = await q(
      owner,
      `select schedule_id from schedules.schedule where name = 'analytics.refresh'`,
    );
    for (const ago of [90, 60, 30, 0])
      await q(owner, `select schedules.run_schedule_at(now() - make_interval(mins => $1), $2)`, [ago, sid]);
    await q(owner, `select * from schedules.set_schedule_enabled_at(now(), 'stores.discovery', false)`);
    // An account deletion whose first file deletion is stuck (three failed attempts).
    const [account] = await q(
      owner,
      `insert into accounts.account (email, display_name) values ('ada@example.com', 'Ada') returning account_id`,
    );
    for (const n of [1, 2])
      await q(owner, `insert into files.file (account_id, bucket, object_key) values ($1, 'recordings', $2)`, [
        account.account_id,
        `accounts/${account.account_id}/rec-${n}.webm`,
      ]);
    await q(app, `select * from api.request_account_deletion($1)`, [account.account_id]);
    await q(
      owner,
      `select * from internal.run_function('accounts.account_deletion_supervisor', (select jsonb_build_object('account_deletion_task_id', account_deletion_task_id) from accounts.account_deletion_task where account_id = $1))`,
      [account.account_id],
    );
    const [fd] = await q(
      owner,
      `select fd.file_deletion_task_id from files.file_deletion_task fd join files.file f using (file_id) where f.account_id = $1 order by 1 limit 1`,
      [account.account_id],
    );
    if (fd) {
      for (let i = 0; i < 3; i += 1) {
        const [a] = await q(
          owner,
          `insert into files.file_deletion_attempt (file_deletion_task_id) values ($1) returning file_deletion_attempt_id`,
          [fd.file_deletion_task_id],
        );
        await q(
          owner,
          `insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message) values ($1, 'storage answered 403 Forbidden')`,
          [a.file_deletion_attempt_id],
        );
      }
    }
    await q(
      app,
      `select * from comms.send_email('Shop <shop@example.com>', 'ada@example.com', 'Your receipt', '<p>Thanks</p>')`,
    );
    return {
      accountTaskId: (
        await q(
          owner,
          `select account_deletion_task_id as id from accounts.account_deletion_task where account_id = $1`,
          [account.account_id],
        )
      )[0].id,
      deadTaskId: dead.task_id,
    };
  } finally {
    await Promise.all([owner.end(), app.end(), worker.end()]);
  }
}

async function main() {
  mkdirSync(OUT, { recursive: true });
  const server = await openServer({ name: 'screenshots' });
  let api;
  let browser;
  try {
    const urls = await provisionDatabase(server, 'screenshots', { fresh: true, quiet: true });
    const ids = await seed(urls);
    api = createApi({
      databaseUrl: urls.api,
      apiToken: TOKEN,
      users: [{ name: 'viewer', level: 'read', token: VIEWER_TOKEN }],
      logLevel: 'silent',
    });
    const base = await api.listen({ host: '127.0.0.1', port: 0 });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu'],
    });
    const page = await browser.newPage({ viewport: { width: 1360, height: 900 }, deviceScaleFactor: 1 });
    const shots = [
      ['overview', '#/', '[data-testid=depth-chart]', false],
      ['tasks', '#/tasks', '[data-testid=task-list]', true],
      ['task', `#/task/${ids.deadTaskId}`, '[data-testid=leases]', true],
      ['dead-letters', '#/dead-letters', '[data-testid=dead-letters]', true],
      ['queues', '#/queues', '[data-testid=queues]', true],
      ['workers', '#/workers', '[data-testid=workers]', true],
      ['schedules', '#/schedules', '[data-testid=schedules]', true],
      ['processes', '#/processes?process=account_deletion', '[data-testid=process-roots]', true],
      ['process-tree', `#/process/account_deletion/${ids.accountTaskId}`, '[data-testid=process-tree]', true],
      ['history', '#/history', '[data-testid=history-sets]', true],
    ];
    await page.goto(`${base}/#/`);
    for (const [name, hash, ready, unlocked] of shots) {
      await page.evaluate(([t]) => sessionStorage.setItem('queue-api-token', t), [unlocked ? TOKEN : VIEWER_TOKEN]);
      await page.goto(`${base}/${hash}`);
      await page.reload();
      await page.locator(ready).first().waitFor();
      const file = join(OUT, `${name}.png`);
      await page.screenshot({ path: file, fullPage: true });
      say(`wrote ${file}`);
    }
  } finally {
    await browser?.close();
    await api?.close();
    await server.stop({ destroy: true });
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
