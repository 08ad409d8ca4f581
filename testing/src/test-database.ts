import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { hardenDatabase, type DbUserNames } from '@org/db-tools/db-users';
import { withDatabase } from '@org/db-tools/urls';
import './context.js';

export type DbUser = keyof DbUserNames | 'root';

export interface TestDatabase {
  name: string;
  dbUsers: DbUserNames;
  url(dbUser: DbUser): string;
  /** A pool connected as `dbUser` (cached; closed by drop()). */
  pool(dbUser: DbUser): pg.Pool;
  /** A single new client connected as `dbUser` (closed by drop() unless ended before). */
  client(dbUser: DbUser): Promise<pg.Client>;
  /** Runs a query as the owner. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
  drop(): Promise<void>;
}

/**
 * A database of its own for one test file: a clone of the migrated template, or with
 * `empty`, a new database with nothing migrated (hardened the same way).
 */
export async function createTestDatabase(options: { empty?: boolean } = {}): Promise<TestDatabase> {
  const ctx = inject('queueTestServer');
  const name = `${ctx.prefix}${randomBytes(5).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ctx.rootUrl });
  await admin.connect();
  try {
    const template = options.empty ? '' : ` template ${admin.escapeIdentifier(ctx.template)}`;
    await admin.query(
      `create database ${admin.escapeIdentifier(name)}${template} owner ${admin.escapeIdentifier(ctx.dbUsers.owner)}`,
    );
    await hardenDatabase(admin, name, ctx.dbUsers);
  } finally {
    await admin.end();
  }

  const url = (dbUser: DbUser): string =>
    dbUser === 'root'
      ? withDatabase(ctx.rootUrl, name)
      : withDatabase(ctx.rootUrl, name, ctx.dbUsers[dbUser], ctx.dbUserPasswords[dbUser]);
  const pools = new Map<DbUser, pg.Pool>();
  const clients = new Set<pg.Client>();
  const pool = (dbUser: DbUser): pg.Pool => {
    let p = pools.get(dbUser);
    if (!p) {
      p = new pg.Pool({ connectionString: url(dbUser), max: 10 });
      p.on('error', () => {}); // idle clients killed by drop(): nothing to do
      pools.set(dbUser, p);
    }
    return p;
  };

  return {
    name,
    dbUsers: ctx.dbUsers,
    url,
    pool,
    async client(dbUser) {
      const c = new pg.Client({ connectionString: url(dbUser) });
      c.on('error', () => {});
      await c.connect();
      clients.add(c);
      c.on('end', () => clients.delete(c));
      return c;
    },
    query: (sql, params) => pool('owner').query(sql, params),
    async drop() {
      await Promise.all([...pools.values()].map((p) => p.end()));
      await Promise.all([...clients].map((c) => c.end().catch(() => {})));
      const dropper = new pg.Client({ connectionString: ctx.rootUrl });
      await dropper.connect();
      try {
        await dropper.query(`drop database if exists ${dropper.escapeIdentifier(name)} with (force)`);
      } finally {
        await dropper.end();
      }
    },
  };
}
