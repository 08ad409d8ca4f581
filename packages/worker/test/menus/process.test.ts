// The stock worker as a process (packages/worker/dist/cli.js), WORKER_ROLE=product_resync,
// against the fake platform: heartbeats keep a slow resync's lease; a worker killed
// (SIGKILL) mid-resync holds the store until stale recovery revokes its lease, then
// another worker completes the task once; bad platform configuration exits 2.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimTasks } from '@org/queue-client';
import { startFakeMenuPlatform, type FakeMenuPlatform } from '@org/menu-sync';
import { eventually, factsOf, startWorker } from './support.js';

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

let db: TestDatabase;
let fake: FakeMenuPlatform;
const children: ChildProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  fake = await startFakeMenuPlatform({ stores: 3 });
  await db.query(
    `insert into menus.store (slug, name, menu_url) select 'store-' || n, 'Store ' || n, 'u' || n from generate_series(1, 3) n`,
  );
  await db.query(
    `insert into menus.store_platform_id (store_id, platform_dispensary_id) select store_id, $1::jsonb ->> slug from menus.store`,
    [JSON.stringify(Object.fromEntries([1, 2, 3].map((n) => [`store-${n}`, fake.store(n).platform_dispensary_id])))],
  );
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await fake?.close();
  await db?.drop();
});

function workerProcess(env: Record<string, string>) {
  const child = spawn(process.execPath, [CLI], {
    env: {
      PATH: process.env.PATH ?? '',
      LOG_LEVEL: 'info',
      DATABASE_URL: db.url('worker'),
      POLL_INTERVAL_MS: '100',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, output: () => output, exited };
}

const resync = async (n: number) =>
  (
    await db.query(
      `select queues.enqueue('product_resync', jsonb_build_object('store_id', store_id, 'platform_dispensary_id', platform_dispensary_id),
                             null, 0, 'store:' || store_id, 3)::text as id
         from menus.store_platform_id where store_id = (select store_id from menus.store where slug = $1)`,
      [`store-${n}`],
    )
  ).rows[0].id as string;

it('heartbeats keep the lease of a resync slower than its lease', async () => {
  const id = await resync(2);
  fake.delayMenu(fake.store(2).platform_dispensary_id, 4000);
  const w = workerProcess({
    WORKER_ROLE: 'product_resync',
    WORKER_ID: 'steady',
    MENU_PLATFORM_URL: fake.url,
    LEASE_SECONDS: '2',
    HEARTBEAT_INTERVAL_MS: '200',
  });
  try {
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'slow resync done', 30_000);
  } finally {
    fake.delayMenu(fake.store(2).platform_dispensary_id, 0);
    w.child.kill('SIGTERM');
  }
  expect(await w.exited).toEqual({ code: 0, signal: null });
  expect(await factsOf(db, id)).toMatchObject({ outcome: 'succeeded', errors: 0, leases: 1 });
  const { rows } = await db.query(
    `select count(*)::int as n from queues.task_lease_extension x join queues.task_leases l using (task_id, task_lease_id) where l.task_id = $1`,
    [id],
  );
  expect(rows[0].n).toBeGreaterThanOrEqual(5);
});

it('SIGKILL mid-resync: the store stays locked until stale recovery; then another worker resyncs it once', async () => {
  const id = await resync(1);
  const blocked = await resync(1); // a second resync of the same store
  const platformId = fake.store(1).platform_dispensary_id;
  fake.delayMenu(platformId, 60_000);
  const w = workerProcess({
    WORKER_ROLE: 'product_resync',
    WORKER_ID: 'doomed',
    MENU_PLATFORM_URL: fake.url,
    LEASE_SECONDS: '3600',
    HEARTBEAT_INTERVAL_MS: '200',
  });
  await eventually(() => Promise.resolve(fake.menuFetches(platformId) === 1), 'the worker is mid-resync', 30_000);
  await eventually(
    async () =>
      (
        await db.query(
          `select count(*)::int as n from queues.task_lease_extension x join queues.task_leases l using (task_id, task_lease_id) where l.task_id = $1`,
          [id],
        )
      ).rows[0].n > 0,
    'a heartbeat',
  );
  w.child.kill('SIGKILL');
  expect((await w.exited).signal).toBe('SIGKILL');
  fake.delayMenu(platformId, 0);

  // The dead worker's lease is live for an hour: neither task of that store is claimable.
  expect(await claimTasks(db.pool('worker'), { workerId: 'eager', limit: 10, taskTypes: ['product_resync'] })).toEqual(
    [],
  );

  // After ten minutes of silence (the clock moved by the owner) the lease counts as stale.
  const { rows: stale } = await db.query(
    `select task_id::text, worker_id from queues.stale_leases_at(now() + interval '11 minutes', 600)`,
  );
  expect(stale).toEqual([{ task_id: id, worker_id: 'doomed' }]);
  // Stale recovery with a one-second threshold (real time) revokes it; the task is ready at once.
  let revoked: { task_id: string; worker_id: string }[] = [];
  await eventually(async () => {
    revoked = (
      await db.query<{ task_id: string; worker_id: string }>(
        `select task_id::text, worker_id from queues.recover_stale_leases(1)`,
      )
    ).rows;
    return revoked.length > 0;
  }, 'stale recovery');
  expect(revoked).toEqual([{ task_id: id, worker_id: 'doomed' }]);

  const rescuer = await startWorker(db, fake, { roles: ['product_resync'], workerId: 'rescuer' });
  try {
    await eventually(
      async () => (await factsOf(db, blocked)).outcome !== null && (await factsOf(db, id)).outcome !== null,
      'both resyncs done',
    );
  } finally {
    await rescuer.stop();
  }
  const facts = await factsOf(db, id);
  expect(facts).toMatchObject({ outcome: 'succeeded', errors: 0, leases: 2 });
  expect(facts.results).toHaveLength(1);
  // Snapshots from the rescuer's run only: store-1 has 5 products.
  expect(
    (await db.query(`select count(*)::int as n from menus.product_snapshot where task_id = $1`, [id])).rows[0].n,
  ).toBe(5);
  const { rows: leases } = await db.query(
    `select l.worker_id, v.task_lease_id is not null as revoked, r.task_lease_id is not null as has_result
       from queues.task_lease_effective l left join queues.task_lease_revocation v using (task_id, task_lease_id)
       left join queues.task_result r using (task_id, task_lease_id) where l.task_id = $1 order by l.task_lease_id`,
    [id],
  );
  expect(leases).toEqual([
    { worker_id: 'doomed', revoked: true, has_result: false },
    { worker_id: 'rescuer', revoked: false, has_result: true },
  ]);
});

it('a bad MENU_PLATFORM_URL stops the worker with exit code 2 and says which variable', async () => {
  const w = workerProcess({
    WORKER_ROLE: 'product_resync',
    MENU_PLATFORM_URL: 'ftp://menus.example',
    MENU_PLATFORM_TIMEOUT_MS: 'soon',
  });
  expect(await w.exited).toEqual({ code: 2, signal: null });
  expect(w.output()).toMatch(/MENU_PLATFORM_URL: must be an http\(s\) URL/);
  expect(w.output()).toMatch(/MENU_PLATFORM_TIMEOUT_MS: must be a whole number/);
});

it('without MENU_PLATFORM_URL (local mode) the worker serves the menu roles from its own fake platform', async () => {
  const id = await resync(3);
  const w = workerProcess({ WORKER_ROLE: 'product_resync', WORKER_ID: 'local' });
  try {
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'local resync done', 30_000);
  } finally {
    w.child.kill('SIGTERM');
  }
  expect(await w.exited).toEqual({ code: 0, signal: null });
  expect(w.output()).toMatch(/LOCAL MODE: no MENU_PLATFORM_URL/);
  // The local fake serves the same stores; 5% of its answers fail, so allow a retry.
  expect((await factsOf(db, id)).outcome).toBe('succeeded');
});
