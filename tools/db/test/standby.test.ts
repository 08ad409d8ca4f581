// The standby helper (src/standby.ts): a synchronous standby of an embedded server of its
// own replays the primary's writes, counts as synchronous, and takes writes once promoted.
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { dataRoot, openServer, startStandby, type DatabaseServer, type Standby } from '../src/index.js';

const name = `standby-test-${process.pid}`;
let server: DatabaseServer;
let standby: Standby | undefined;

beforeAll(async () => {
  server = await openServer({ name });
});
afterAll(async () => {
  await standby?.stop({ destroy: true }).catch(() => {});
  await server?.stop({ destroy: true });
});

async function query<R extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

it('a synchronous standby replays every committed write, and takes writes once promoted', async () => {
  standby = await startStandby({
    primaryRootUrl: server.rootUrl,
    primaryDataDir: join(dataRoot(), name),
    dataDir: join(dataRoot(), `${name}-standby`),
    synchronous: true,
  });
  const replication = await query<{ sync_state: string; state: string }>(
    server.rootUrl,
    'select sync_state, state from pg_stat_replication where application_name = $1',
    [standby.name],
  );
  expect(replication).toEqual([{ sync_state: 'sync', state: 'streaming' }]);
  expect((await query<{ r: boolean }>(standby.rootUrl, 'select pg_is_in_recovery() as r'))[0].r).toBe(true);

  await query(server.rootUrl, 'create table standby_probe (n int primary key)');
  // Each commit returns once the standby has flushed it (synchronous_commit = on).
  for (let i = 1; i <= 200; i++) await query(server.rootUrl, 'insert into standby_probe values ($1)', [i]);
  const primaryLsn = (await query<{ lsn: string }>(server.rootUrl, 'select pg_current_wal_flush_lsn()::text as lsn'))[0]
    .lsn;
  // Flushed on the standby is not yet replayed: wait for the replay to reach the primary's LSN.
  for (let i = 0; i < 300; i++) {
    const [row] = await query<{ caught_up: boolean }>(
      standby.rootUrl,
      'select pg_last_wal_replay_lsn() >= $1::pg_lsn as caught_up',
      [primaryLsn],
    );
    if (row.caught_up) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const [replayed] = await query<{ n: number; total: number }>(
    standby.rootUrl,
    'select count(*)::int as n, sum(n)::int as total from standby_probe',
  );
  expect(replayed).toEqual({ n: 200, total: (200 * 201) / 2 });
  await expect(query(standby.rootUrl, 'insert into standby_probe values (0)')).rejects.toThrow(/read-only/);

  // The primary's setting keeps commits waiting for a standby that is gone: unset it first.
  await query(server.rootUrl, 'alter system reset synchronous_standby_names');
  await query(server.rootUrl, 'select pg_reload_conf()');
  await standby.promote();
  await query(standby.rootUrl, 'insert into standby_probe values (201)');
  expect((await query<{ n: number }>(standby.rootUrl, 'select count(*)::int as n from standby_probe'))[0].n).toBe(201);
});
