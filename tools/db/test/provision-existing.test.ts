// Provisioning (npm run dev, npm run demo, codegen with an admin URL) on a database that
// already exists changes nothing database-wide: PUBLIC keeps CONNECT and TEMP, the app's
// tables keep their privileges; our database users get only what they need (CONNECT, the
// owner CREATE on the database and on schema public). A database
// it creates itself is hardened (PUBLIC loses CONNECT and TEMP).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, expect, inject, it } from 'vitest';
import { provisionDatabase, type DatabaseServer } from '../src/server.js';
import { withDatabase } from '../src/urls.js';

const ctx = inject('queueTestServer');
const server: DatabaseServer = {
  kind: 'external',
  rootUrl: ctx.rootUrl,
  dbUsers: ctx.dbUsers,
  dbUserPasswords: ctx.dbUserPasswords,
  stop: async () => {},
};
const existing = `${ctx.prefix}existing_${randomBytes(4).toString('hex')}`;
const created = `${ctx.prefix}created_${randomBytes(4).toString('hex')}`;

async function asRoot<T>(database: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: database ? withDatabase(ctx.rootUrl, database) : ctx.rootUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const publicRights = (database: string) =>
  asRoot('', async (c) => {
    const { rows } = await c.query<{ connect: boolean; temp: boolean }>(
      `select has_database_privilege('public', $1, 'CONNECT') as connect, has_database_privilege('public', $1, 'TEMP') as temp`,
      [database],
    );
    return rows[0];
  });

afterAll(async () => {
  await asRoot('', async (c) => {
    for (const db of [existing, created])
      await c.query(`drop database if exists ${c.escapeIdentifier(db)} with (force)`);
  });
});

it('leaves an existing database as it was, but for the privileges our database users need', async () => {
  await asRoot('', (c) => c.query(`create database ${c.escapeIdentifier(existing)}`));
  await asRoot(existing, (c) => c.query('create table app_orders (id int primary key)'));
  const aclBefore = await asRoot(existing, (c) =>
    c.query<{ acl: string | null }>(`select relacl::text as acl from pg_class where relname = 'app_orders'`),
  );

  const urls = await provisionDatabase(server, existing, { current: false, quiet: true });

  expect(await publicRights(existing)).toEqual({ connect: true, temp: true });
  expect(
    await asRoot(existing, (c) =>
      c.query<{ acl: string | null }>(`select relacl::text as acl from pg_class where relname = 'app_orders'`),
    ).then((r) => r.rows),
  ).toEqual(aclBefore.rows);
  // Migrated, and each database user can connect.
  for (const url of [urls.owner, urls.worker, urls.app, urls.api]) {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.end();
  }
  const { rows } = await asRoot(existing, (c) => c.query("select 1 from pg_namespace where nspname = 'queues'"));
  expect(rows).toHaveLength(1);
});

it('hardens a database it creates', async () => {
  await provisionDatabase(server, created, { current: false, quiet: true });
  expect(await publicRights(created)).toEqual({ connect: false, temp: false });
});
