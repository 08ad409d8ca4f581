// The embedded PostgreSQL: initialised on first start, restarted with its data and
// credentials, shared with a second process instead of started twice.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { destroyEmbedded, startEmbedded, type EmbeddedServer } from '../src/embedded.js';
import { dataRoot } from '../src/paths.js';

const dataDir = join(dataRoot(), `embedded-test-${randomBytes(4).toString('hex')}`);
let last: EmbeddedServer | undefined;
afterAll(async () => {
  if (last) await destroyEmbedded(last).catch(() => {});
});

async function query(url: string, sql: string): Promise<pg.QueryResultRow[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql)).rows;
  } finally {
    await client.end();
  }
}

describe('embedded PostgreSQL', () => {
  it('initialises a data folder inside the checkout, keeps data across restarts, and is shared while running', async () => {
    const first = await startEmbedded({ dataDir });
    last = first;
    expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(true);
    const [version] = await query(first.rootUrl, 'show server_version_num');
    expect(Number(version?.server_version_num)).toBeGreaterThanOrEqual(180000);
    const [listen] = await query(first.rootUrl, 'show listen_addresses');
    expect(listen?.listen_addresses).toBe('127.0.0.1');
    await query(first.rootUrl, 'create table kept (x int); insert into kept values (42)');

    // A second start while it runs shares the server; its stop leaves the server up.
    const second = await startEmbedded({ dataDir });
    expect(second.rootUrl).toBe(first.rootUrl);
    await second.stop();
    expect(await query(first.rootUrl, 'select x from kept')).toEqual([{ x: 42 }]);

    await first.stop();
    await expect(query(first.rootUrl, 'select 1')).rejects.toThrow();

    const restarted = await startEmbedded({ dataDir });
    last = restarted;
    expect(restarted.rootUrl).toBe(first.rootUrl);
    expect(restarted.dbUserPasswords).toEqual(first.dbUserPasswords);
    expect(await query(restarted.rootUrl, 'select x from kept')).toEqual([{ x: 42 }]);
  });
});
