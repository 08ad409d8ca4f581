// DATABASE_READ_URL: with a streaming standby of the database as the read replica,
// every read of the API goes to the replica and every change (with its audit fact) to the
// primary. Shown by pausing the replica's replay: a task the API just created is then not
// found through the API, and is once the replay resumes; the primary had it all along.
import { join } from 'node:path';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  dataRoot,
  openServer,
  provisionDatabase,
  startStandby,
  withDatabase,
  type DatabaseServer,
  type DatabaseUrls,
  type Standby,
} from '@org/db-tools';
import { createApi } from '../src/index.js';

const TOKEN = 'read-replica-token-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };
const name = `read-replica-${process.pid}`;

let server: DatabaseServer;
let standby: Standby;
let urls: DatabaseUrls;
let app: FastifyInstance;

async function query<R extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

/** The standby's superuser connection to the queue database (to pause and resume its replay). */
const standbyRoot = () => withDatabase(standby.rootUrl, urls.database);

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

beforeAll(async () => {
  server = await openServer({ name });
  urls = await provisionDatabase(server, 'queue', { fresh: true, quiet: true });
  standby = await startStandby({
    primaryRootUrl: server.rootUrl,
    primaryDataDir: join(dataRoot(), name),
    dataDir: join(dataRoot(), `${name}-standby`),
  });
  app = createApi({
    databaseUrl: urls.api,
    readDatabaseUrl: standby.urlOf(urls.api),
    apiToken: TOKEN,
    logLevel: 'silent',
  });
  await app.ready();
});

afterAll(async () => {
  await app?.close();
  await standby?.stop({ destroy: true }).catch(() => {});
  await server?.stop({ destroy: true });
});

it('reads come from the replica, changes and their facts go to the primary', async () => {
  const create = async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/tasks',
      headers: auth,
      payload: { task_type: 'store_discovery', payload: { n: 1 } },
    });
    expect(res.statusCode, res.body).toBe(201);
    return res.json<{ task_id: number }>().task_id;
  };
  const found = async (taskId: number) =>
    (await app.inject({ method: 'GET', url: `/api/tasks/${taskId}`, headers: auth })).statusCode === 200;

  // Replaying: a task created through the API is soon readable through it.
  const first = await create();
  await until(() => found(first), 'the first task on the replica');

  // Replay paused: the primary takes the change and its fact; the API's reads do not see it.
  await query(standbyRoot(), 'select pg_wal_replay_pause()');
  await until(
    async () =>
      (await query<{ s: string }>(standbyRoot(), 'select pg_get_wal_replay_pause_state() as s'))[0].s === 'paused',
    'the replay to pause',
  );
  const second = await create();
  const onPrimary = await query<{ n: number }>(
    urls.owner,
    `select (select count(*) from queues.task where task_id = $1)::int
          + (select count(*) from admin.api_change where $1 = any (task_ids))::int as n`,
    [second],
  );
  expect(onPrimary[0].n).toBe(2);
  const missing = await app.inject({ method: 'GET', url: `/api/tasks/${second}`, headers: auth });
  expect(missing.statusCode).toBe(404);
  const list = await app.inject({ method: 'GET', url: '/api/tasks?task_type=store_discovery', headers: auth });
  expect(list.json<{ tasks: { task_id: number }[] }>().tasks.map((t) => t.task_id)).toEqual([first]);

  // Replay resumed: the replica catches up and the API reads the task.
  await query(standbyRoot(), 'select pg_wal_replay_resume()');
  await until(() => found(second), 'the second task on the replica');
  const audit = await app.inject({ method: 'GET', url: `/api/audit?task_id=${second}`, headers: auth });
  expect(audit.json<{ changes: { action: string }[] }>().changes.map((c) => c.action)).toEqual(['create_task']);
});

it('says how far behind the replica is: growing while its replay is paused and the primary writes, 0 once caught up', async () => {
  const lag = async () =>
    (await app.inject({ method: 'GET', url: '/api/overview/live', headers: auth })).json<{
      replica_lag_seconds: number | null;
    }>().replica_lag_seconds;
  await until(async () => (await lag()) === 0, 'the replica to catch up');
  await query(standbyRoot(), 'select pg_wal_replay_pause()');
  // Two writes a moment apart: the first is replayed before the pause takes hold at worst,
  // the second is received and not replayed, so the lag is the age of the last replayed one.
  await query(urls.owner, `select queues.enqueue('store_discovery', '{}')`);
  await new Promise((resolve) => setTimeout(resolve, 300));
  await query(urls.owner, `select queues.enqueue('store_discovery', '{}')`);
  await until(async () => ((await lag()) ?? 0) > 0.2, 'a lag while the replay is paused');
  await query(standbyRoot(), 'select pg_wal_replay_resume()');
  await until(async () => (await lag()) === 0, 'the replica to catch up again');
});

it('is ready only while both the primary and the replica answer', async () => {
  expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  await standby.stop();
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  expect(res.statusCode).toBeGreaterThanOrEqual(500);
});
