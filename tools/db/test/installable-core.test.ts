// The installable core, as an outside app uses it (docs/installing.md): the packages an
// app needs are packed with `npm pack`, installed with `npm install` into a new app in a
// temporary folder outside this repository (dependencies from a registry on 127.0.0.1
// that serves this checkout's node_modules, so nothing goes to the network), and pointed
// at a database that already holds the app's own tables and roles. The queue's schema is
// migrated as a role of its own, granting to the roles the app names; the app enqueues
// inside its own transaction; the stock worker runs the app's defineTask (TypeScript) to
// completion. The migration installs the core alone (no business domain, nothing in
// public, the queue's owner with CREATE on the database only); a domain is added later
// with --domains. The database's own privileges, the app's tables and its roles'
// defaults are as they were.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { repoRoot } from '../src/paths.js';
import { withDatabase } from '../src/urls.js';
import { startLocalRegistry, type LocalRegistry } from './support/local-registry.js';

const run = promisify(execFile);
const root = repoRoot();
const ctx = inject('queueTestServer');

/** What an app installs: the client, the worker, task definitions, the schema and its migrator. */
const PACKAGES = ['queue-client', 'config', 'contracts', 'tasks', 'worker', 'queue-schema'];

const suffix = randomBytes(4).toString('hex');
const roles = {
  appOwner: `shop_owner_${suffix}`,
  app: `shop_app_${suffix}`,
  worker: `shop_worker_${suffix}`,
  ops: `shop_ops_${suffix}`,
  queueOwner: `shop_queue_${suffix}`,
};
const password = randomBytes(12).toString('hex');
const database = `${ctx.prefix}shop_${suffix}`;
const url = (role: string) =>
  role === 'root' ? withDatabase(ctx.rootUrl, database) : withDatabase(ctx.rootUrl, database, role, password);

const work = mkdtempSync(join(tmpdir(), 'queue-outside-app-'));
const appDir = join(work, 'shop');
let registry: LocalRegistry | undefined;
let worker: ChildProcess | undefined;
const admin = new pg.Client({ connectionString: ctx.rootUrl });

/** A clean environment: no npm_config_* of the test run, a home and npm cache of its own. */
const env = (extra: Record<string, string> = {}) => ({
  PATH: process.env.PATH ?? '',
  HOME: join(work, 'home'),
  npm_config_cache: join(work, 'npm-cache'),
  npm_config_update_notifier: 'false',
  ...extra,
});

async function asRole<T>(role: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url(role) });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** What the migration must leave alone: the database's ACL, PUBLIC's rights, the app's tables, default ACLs. */
const untouched = (c: pg.Client) =>
  c
    .query<{ what: string; value: string | null }>(
      `select 'database acl' as what, datacl::text as value from pg_database where datname = current_database()
       union all select 'public connect', has_database_privilege('public', current_database(), 'CONNECT')::text
       union all select 'public temp', has_database_privilege('public', current_database(), 'TEMP')::text
       union all select 'orders acl', relacl::text from pg_class where oid = 'public.orders'::regclass
       union all select 'schema public acl', nspacl::text from pg_namespace where nspname = 'public'
       union all select 'default acls of ' || defaclrole::regrole::text, string_agg(defaclacl::text, ',' order by defaclacl::text)
         from pg_default_acl where defaclrole <> $1::regrole group by defaclrole`,
      [roles.queueOwner],
    )
    .then((r) => r.rows);

beforeAll(async () => {
  await admin.connect();
  // The app as it was before the queue: its owner, its roles, its database and tables.
  for (const role of Object.values(roles)) await admin.query(`create role ${role} login password '${password}'`);
  await admin.query(`create database ${database} owner ${roles.appOwner}`);
  await asRole(roles.appOwner, async (c) => {
    await c.query(
      'create table public.orders (id bigint generated always as identity primary key, item text not null)',
    );
    await c.query(`grant select, insert on public.orders to ${roles.app}`);
    // What the app's DBA grants the queue's owner for the core: schemas of its own
    // (docs/installing.md); nothing in public.
    await c.query(`grant create on database ${database} to ${roles.queueOwner}`);
  });
}, 60_000);

afterAll(async () => {
  worker?.kill('SIGKILL');
  await registry?.close();
  await admin.query(`drop database if exists ${database} with (force)`);
  for (const role of Object.values(roles)) await admin.query(`drop role if exists ${role}`);
  await admin.end();
  rmSync(work, { recursive: true, force: true });
});

it('packs, installs into an outside app, migrates its database, enqueues in its transaction and runs its defineTask', async () => {
  // 1. Pack (the packages are built: npm test builds before it tests).
  const tarballs = join(work, 'tarballs');
  mkdirSync(tarballs);
  await run('npm', ['pack', '--silent', '--pack-destination', tarballs, ...PACKAGES.map((p) => `./packages/${p}`)], {
    cwd: root,
    env: env(),
  });
  const packed = readdirSync(tarballs).sort();
  expect(packed).toEqual(PACKAGES.map((p) => `org-${p}-0.1.0.tgz`).sort());

  // 2. Install into a new app outside the repository: the tarballs, and zod for its task file.
  registry = await startLocalRegistry(join(root, 'node_modules'), (name) => name.startsWith('@org/'));
  mkdirSync(join(appDir, 'tasks'), { recursive: true });
  writeFileSync(join(appDir, 'package.json'), JSON.stringify({ name: 'shop', private: true, type: 'module' }));
  await run(
    'npm',
    [
      'install',
      '--registry',
      registry.url,
      '--no-audit',
      '--no-fund',
      '--ignore-scripts',
      'zod@4',
      ...packed.map((t) => join(tarballs, t)),
    ],
    { cwd: appDir, env: env() },
  );
  // Only optional dependencies were asked for and not found; nothing of the business
  // domains or the provider SDKs came along with the worker.
  const installed = (scope: string) =>
    existsSync(join(appDir, 'node_modules', scope)) ? readdirSync(join(appDir, 'node_modules', scope)) : [];
  expect(installed('@org').sort()).toEqual(PACKAGES.sort());
  for (const absent of ['twilio', 'resend', '@google-cloud', 'fastify'])
    expect(existsSync(join(appDir, 'node_modules', absent)), absent).toBe(false);
  expect([...new Set(registry.missing)].filter((n) => !/^(@esbuild\/|fsevents$|pg-native$)/.test(n)).sort()).toEqual([
    '@org/menu-sync',
    '@org/providers',
  ]);

  // An app embedding the worker loads its entries without the optional peers.
  const entries = await run(
    'node',
    [
      '--input-type=module',
      '-e',
      "const w = await import('@org/worker'); const c = await import('@org/worker/command'); console.log(typeof w.Worker, typeof c.defaultRegistry, c.defaultRegistry().taskTypes().join(','))",
    ],
    { cwd: appDir, env: env() },
  );
  expect(entries.stdout.trim()).toBe('function function db_function');

  // The app's one task file, TypeScript, loaded by the stock worker without a compile step.
  writeFileSync(
    join(appDir, 'tasks', 'send_receipt.ts'),
    `import { z } from 'zod';
import { defineTask } from '@org/tasks';

export default defineTask({
  name: 'send_receipt',
  payload: z.object({ order_id: z.number().int().positive() }),
  run: async ({ order_id }: { order_id: number }) => ({ receipt: \`order \${order_id}\` }),
});
`,
  );
  // The app's code: an order and its task in one transaction, then one rolled back.
  writeFileSync(
    join(appDir, 'place-order.mjs'),
    `import { connect, enqueue, withTransaction } from '@org/queue-client';

const app = connect({ connectionString: process.env.DATABASE_URL });
const placed = await withTransaction(app, async (tx) => {
  const { rows } = await tx.query("insert into orders (item) values ('tea') returning id");
  const orderId = Number(rows[0].id);
  const taskId = await enqueue(tx, { taskType: 'send_receipt', payload: { order_id: orderId } });
  return { orderId, taskId };
});
await withTransaction(app, async (tx) => {
  await tx.query("insert into orders (item) values ('coffee')");
  await enqueue(tx, { taskType: 'send_receipt', payload: { order_id: 999 } });
  throw new Error('changed my mind');
}).catch(() => {});
await app.end();
process.stdout.write(JSON.stringify(placed));
`,
  );

  // 3. Migrate the app's database as the queue's own role, granting to the app's roles:
  // the core alone.
  const before = await asRole(roles.appOwner, untouched);
  const catalog = () =>
    asRole('root', async (c) => ({
      schemas: (
        await c.query<{ n: string }>(
          `select nspname as n from pg_namespace
            where nspname not like 'pg\\_%' and nspname <> 'information_schema' order by 1`,
        )
      ).rows.map((r) => r.n),
      inPublic: (
        await c.query<{ n: string }>(
          `select relname::text as n from pg_class where relnamespace = 'public'::regnamespace
           union all select proname::text from pg_proc where pronamespace = 'public'::regnamespace
           union all select typname::text from pg_type where typnamespace = 'public'::regnamespace order by 1`,
        )
      ).rows.map((r) => r.n),
    }));
  const appCatalog = await catalog();
  const bin = (name: string) => join(appDir, 'node_modules', '.bin', name);
  const migrate = (args: string[] = []) =>
    run(bin('queue-schema'), ['migrate', ...args], {
      cwd: appDir,
      env: env({
        DATABASE_URL: url(roles.queueOwner),
        DATABASE_WORKER: roles.worker,
        DATABASE_APP: roles.app,
        DATABASE_API: roles.ops,
      }),
    });
  const migrated = await migrate();
  expect(migrated.stdout).toContain('migrated core');
  expect(migrated.stdout).toContain('migrated postgres://');
  expect(await asRole(roles.appOwner, untouched)).toEqual(before);
  // The core's schemas and its bookkeeping; no business domain, nothing new in public.
  expect(await catalog()).toEqual({
    schemas: [...appCatalog.schemas, 'admin', 'api', 'internal', 'queue_migrate', 'queues', 'schedules'].sort(),
    inPublic: appCatalog.inPublic,
  });
  // Migrating again is a no-op.
  const again = await migrate();
  expect(again.stdout).toContain('up to date (core)');
  // A name that is not a domain: bad usage, nothing applied.
  const wrong = await migrate(['--domains', 'comms,billing']).then(
    () => ({ code: 0, stderr: '' }),
    (e: { code: number; stderr: string }) => e,
  );
  expect(wrong).toMatchObject({
    code: 2,
    stderr: 'queue-schema: unknown domain "billing": the domains are comms, files, accounts, menus, learning, public\n',
  });
  expect((await catalog()).schemas).not.toContain('comms');
  // The queue's grants went to the roles the app named, each its part.
  const { rows: grants } = await asRole(roles.ops, (c) =>
    c.query<{ ops: boolean; app: boolean; worker_claims: boolean; app_claims: boolean }>(
      `select has_schema_privilege($1, 'admin', 'usage') as ops,
              has_schema_privilege($2, 'admin', 'usage') as app,
              has_function_privilege($3, 'queues.complete_task(bigint, bigint, text)', 'execute') as worker_claims,
              has_function_privilege($2, 'queues.complete_task(bigint, bigint, text)', 'execute') as app_claims`,
      [roles.ops, roles.app, roles.worker],
    ),
  );
  expect(grants).toEqual([{ ops: true, app: false, worker_claims: true, app_claims: false }]);
  // The app's task type, registered by the queue's owner.
  const registered = await run(bin('queue-tasks'), ['register'], {
    cwd: appDir,
    env: env({ DATABASE_URL: url(roles.queueOwner) }),
  });
  expect(registered.stdout).toContain('send_receipt');

  // 4. Enqueue inside the app's transactions, as the app's own role.
  const placed = JSON.parse(
    (await run('node', ['place-order.mjs'], { cwd: appDir, env: env({ DATABASE_URL: url(roles.app) }) })).stdout,
  ) as { orderId: number; taskId: string };
  const state = await asRole('root', async (c) => ({
    orders: (await c.query<{ item: string }>('select item from public.orders order by id')).rows.map((r) => r.item),
    tasks: (
      await c.query<{ id: string }>("select task_id::text as id from queues.task where task_type = 'send_receipt'")
    ).rows.map((r) => r.id),
  }));
  expect(state).toEqual({ orders: ['tea'], tasks: [String(placed.taskId)] });

  // 5. The stock worker, as the app's worker role, runs the task.
  worker = spawn(bin('queue-worker'), [], {
    cwd: appDir,
    env: env({ DATABASE_URL: url(roles.worker), LOG_FORMAT: 'json', POLL_INTERVAL_MS: '200' }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  worker.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  worker.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const completed = await asRole(roles.queueOwner, async (c) => {
    for (;;) {
      const { rows } = await c.query<{ outcome: string; result: unknown }>(
        // queues.task_end: a task's end in either shape (the package installs the
        // committed migrations only: this reads it once completion rounds are committed).
        `select c.outcome, r.result from queues.task_end c
           left join queues.task_result r on r.task_id = c.task_id
          where c.task_id = $1`,
        [placed.taskId],
      );
      if (rows.length > 0) return rows[0];
      if (worker!.exitCode !== null) throw new Error(`the worker exited (${worker!.exitCode}):\n${output}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });
  expect(completed, output).toEqual({ outcome: 'succeeded', result: { receipt: `order ${placed.orderId}` } });
  expect(output).toContain('"event":"tasks_loaded"');
  expect(output).toContain('@org/providers is not installed: no email, sms or file_delete processors');
  expect(output).toContain('@org/menu-sync is not installed: no menu roles');

  const exited = new Promise<number | null>((resolve) => worker!.once('exit', (code) => resolve(code)));
  worker.kill('SIGTERM');
  expect(await exited, output).toBe(0);

  // 6. A domain later: the specification's names in public (they use menus, which comes
  // along), for which the app's DBA lets the queue's owner create in public for the while.
  await asRole(roles.appOwner, (c) => c.query(`grant create on schema public to ${roles.queueOwner}`));
  const added = await migrate(['--domains', 'public']);
  expect(added.stdout).toContain('adding menus: the domains named depend on them');
  expect(added.stdout).toContain('migrated core, menus, public');
  await asRole(roles.appOwner, (c) => c.query(`revoke create on schema public from ${roles.queueOwner}`));
  expect((await catalog()).schemas).toEqual(
    [...appCatalog.schemas, 'admin', 'api', 'internal', 'menus', 'queue_migrate', 'queues', 'schedules'].sort(),
  );
  // The operator's role reads the specification's view unqualified, the app's role does not.
  const { rows: specGrants } = await asRole(roles.ops, (c) =>
    c.query<{ ops: boolean; app: boolean }>(
      `select has_table_privilege($1, 'v_worker_capacity', 'select') as ops,
              has_table_privilege($2, 'v_worker_capacity', 'select') as app`,
      [roles.ops, roles.app],
    ),
  );
  expect(specGrants).toEqual([{ ops: true, app: false }]);
  await asRole(roles.ops, (c) => c.query('select pending_tasks, active_workers from v_worker_capacity'));
  // Any domain can be added later: comms replays its history onto today's core, and the
  // app's role may start an email process (nothing sends it: no provider is configured).
  const comms = await migrate(['--domains', 'comms']);
  expect(comms.stdout).toContain('migrated core, comms, menus, public');
  const { rows: sent } = await asRole(roles.app, (c) =>
    c.query<{ id: string }>(
      `select send_email_task_id::text as id from comms.send_email('Shop <shop@example.com>', 'ada@example.com', 'Hi', '<p>Hi</p>')`,
    ),
  );
  expect(sent[0]?.id).toMatch(/^\d+$/);
  // Installed domains are kept up to date without being named again.
  expect((await migrate()).stdout).toContain('up to date (core, comms, menus, public)');
  expect(await asRole(roles.appOwner, untouched)).toEqual(before);
}, 240_000);
