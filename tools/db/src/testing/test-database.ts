import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { hardenDatabase, type RoleNames } from '../roles.js';
import { withDatabase } from '../urls.js';
import './context.js';

export type Role = keyof RoleNames | 'root';

export interface TestDatabase {
  name: string;
  roles: RoleNames;
  url(role: Role): string;
  /** A pool connected as `role` (cached; closed by drop()). */
  pool(role: Role): pg.Pool;
  /** A single new client connected as `role` (closed by drop() unless ended before). */
  client(role: Role): Promise<pg.Client>;
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
    await admin.query(`create database ${admin.escapeIdentifier(name)}${template} owner ${admin.escapeIdentifier(ctx.roles.owner)}`);
    await hardenDatabase(admin, name, ctx.roles);
  } finally {
    await admin.end();
  }

  const url = (role: Role): string =>
    role === 'root'
      ? withDatabase(ctx.rootUrl, name)
      : withDatabase(ctx.rootUrl, name, ctx.roles[role], ctx.rolePasswords[role]);
  const pools = new Map<Role, pg.Pool>();
  const clients = new Set<pg.Client>();
  const pool = (role: Role): pg.Pool => {
    let p = pools.get(role);
    if (!p) {
      p = new pg.Pool({ connectionString: url(role), max: 10 });
      p.on('error', () => {}); // idle clients killed by drop(): nothing to do
      pools.set(role, p);
    }
    return p;
  };

  return {
    name,
    roles: ctx.roles,
    url,
    pool,
    async client(role) {
      const c = new pg.Client({ connectionString: url(role) });
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
