/**
 * A chaos database on an embedded PostgreSQL server of its own: for scenarios that crash
 * the server (a backend killed with SIGKILL resets every connection of the server, which
 * the test run's shared server must not suffer).
 */
import { join } from 'node:path';
import pg from 'pg';
import { dataRoot, openServer, provisionDatabase, type DatabaseUrls } from '@org/db-tools';
import { installFixtures } from './fixtures.js';
import { quietPool, type ChaosDb, type DbUser } from './harness.js';

/** A ChaosDb on `urls`: one quiet pool per database user, made on first use. */
export function chaosDb(urls: DatabaseUrls, dbUsers: ChaosDb['dbUsers']): ChaosDb & { end(): Promise<void> } {
  const pools = new Map<DbUser, pg.Pool>();
  const pool = (dbUser: DbUser) => {
    let p = pools.get(dbUser);
    if (!p) pools.set(dbUser, (p = quietPool(urls[dbUser], 10)));
    return p;
  };
  return {
    dbUsers,
    url: (dbUser) => urls[dbUser],
    pool,
    query: (sql, params) => pool('owner').query(sql, params),
    end: async () => {
      await Promise.all([...pools.values()].map((p) => p.end().catch(() => {})));
      pools.clear();
    },
  };
}

export interface OwnServer {
  db: ChaosDb;
  dataDir: string;
  /** Ends the pools, stops the server and deletes its data. */
  close(): Promise<void>;
}

/** Starts a fresh embedded server named `name` (under .data/), migrated, with the chaos fixtures. */
export async function openOwnServer(name: string): Promise<OwnServer> {
  const server = await openServer({ name });
  try {
    const urls = await provisionDatabase(server, 'chaos', { fresh: true, quiet: true });
    const db = chaosDb(urls, server.dbUsers);
    await installFixtures(db);
    return {
      db,
      dataDir: join(dataRoot(), name),
      close: async () => {
        await db.end();
        await server.stop({ destroy: true });
      },
    };
  } catch (error) {
    await server.stop({ destroy: true }).catch(() => {});
    throw error;
  }
}
