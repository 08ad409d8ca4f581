import pg from 'pg';

/**
 * Anything a query can run on: a pool, a pooled client, or a single client. Calls made
 * on a client inside `withTransaction` join that transaction.
 */
export type Queryable = pg.Pool | pg.PoolClient | pg.Client;

export interface ConnectOptions {
  /** postgres:// URL; defaults to the DATABASE_URL environment variable. */
  connectionString?: string;
  /** Pool size (default 10). */
  max?: number;
  /** Sent as application_name, visible in pg_stat_activity. */
  applicationName?: string;
}

/** Opens a connection pool. Close it with `pool.end()`. */
export function connect(options: ConnectOptions = {}): pg.Pool {
  const connectionString = options.connectionString ?? process.env.DATABASE_URL;
  if (!connectionString) {
    throw new Error('no database: pass connectionString or set DATABASE_URL');
  }
  const pool = new pg.Pool({
    connectionString,
    max: options.max ?? 10,
    application_name: options.applicationName ?? 'queue-client',
  });
  // A connection that dies (server restart, terminated backend) must not crash the app:
  // idle clients are dropped by the pool, and a query in flight rejects on its own.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

/**
 * Runs `fn` in a transaction on one client of `pool`: COMMIT when it resolves, ROLLBACK
 * when it throws (the error is rethrown). The client is always released.
 */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (error) {
    try {
      await client.query('rollback');
    } catch {
      broken = true; // the connection is unusable: do not return it to the pool
    }
    throw error;
  } finally {
    client.release(broken);
  }
}
