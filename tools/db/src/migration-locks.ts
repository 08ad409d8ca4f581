// The lock check of migrations: each migration is applied in order, in a transaction, on
// a database whose hot queue tables already exist with rows; the ACCESS EXCLUSIVE locks
// it holds on those tables are read from pg_locks before it commits. Such a lock stops
// every worker and app that touches the table until the deploy's transaction ends, so a
// migration may take one only when it says so, with a marker comment:
//
//   -- lock: access exclusive on queues.task_pending: <why it cannot be avoided>
//
// Every migration that runs a statement must also set lock_timeout (`set local
// lock_timeout = '5s';`), so that waiting for a lock fails the deploy instead of queueing
// every later query on the table behind it.
import pg from 'pg';
import { isBlankSql } from './migration-files.js';

/**
 * The hot tables: read or written by every enqueue, claim, heartbeat or completion (or by
 * every db_function task, for internal.runnable_function). An ACCESS EXCLUSIVE lock on any
 * of them stalls the queue.
 */
export const HOT_TABLES: readonly string[] = [
  'queues.task_type',
  'queues.task',
  'queues.task_pending',
  'queues.task_lease',
  'queues.task_lease_extension',
  'queues.task_lease_release',
  'queues.task_lease_revocation',
  'queues.task_completed',
  'queues.task_attempt_failed',
  'queues.error',
  'queues.resource_lease',
  'queues.worker',
  'internal.runnable_function',
];

export interface MigrationToCheck {
  name: string;
  /** The SQL it runs (includes compiled, placeholders replaced). */
  sql: string;
  /** `--! no-transaction`: applied outside a transaction; its locks cannot be read. */
  noTransaction?: boolean;
}

export interface MigrationLockReport {
  name: string;
  /** Hot tables it held ACCESS EXCLUSIVE locks on. */
  locked: string[];
  /** lock_timeout in force at its end ('0' means none). */
  lockTimeout: string;
  problems: string[];
}

const MARKER =
  /^--[ \t]*lock:[ \t]*access exclusive on[ \t]+([A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*)[ \t]*:[ \t]*(\S.*)$/gim;

/** The tables a migration's marker comments allow an ACCESS EXCLUSIVE lock on, with why. */
export function lockMarkers(sql: string): Map<string, string> {
  const markers = new Map<string, string>();
  for (const match of sql.matchAll(MARKER)) markers.set(match[1]!.toLowerCase(), match[2]!.trim());
  return markers;
}

/**
 * Applies `migrations` in order to the database at `url` (connected as its owner) and
 * reports, for each, the hot tables it locked ACCESS EXCLUSIVE and what is wrong with it.
 * `seed` runs once, as soon as every hot table exists (before the next migration), so
 * the later migrations meet tables with rows. Each migration is committed, as a deploy
 * would, so the next sees its effects.
 */
export async function checkMigrationLocks(options: {
  url: string;
  migrations: MigrationToCheck[];
  seed: (client: pg.Client) => Promise<void>;
  hotTables?: readonly string[];
}): Promise<MigrationLockReport[]> {
  const hotTables = options.hotTables ?? HOT_TABLES;
  const client = new pg.Client({ connectionString: options.url });
  client.on('error', () => {});
  await client.connect();
  const reports: MigrationLockReport[] = [];
  let seeded = false;
  /** oid -> name of the hot tables that exist now. */
  const existingHot = async (): Promise<Map<number, string>> => {
    const { rows } = await client.query<{ name: string; oid: number | null }>(
      'select t as name, to_regclass(t)::oid::int8 as oid from unnest($1::text[]) t',
      [hotTables],
    );
    return new Map(rows.filter((r) => r.oid !== null).map((r) => [Number(r.oid), r.name]));
  };
  const seedIfReady = async () => {
    if (seeded) return;
    if ((await existingHot()).size < hotTables.length) return;
    await options.seed(client);
    seeded = true;
  };
  try {
    for (const migration of options.migrations) {
      await seedIfReady();
      const problems: string[] = [];
      const before = await existingHot();
      const blank = isBlankSql(migration.sql);
      let locked: string[] = [];
      let lockTimeout = '0';
      if (migration.noTransaction) {
        await client.query('set lock_timeout = 0');
        await client.query(migration.sql);
        lockTimeout = (await client.query<{ v: string }>(`select current_setting('lock_timeout') as v`)).rows[0]!.v;
        await client.query('reset lock_timeout');
      } else {
        await client.query('begin');
        try {
          await client.query('set local lock_timeout = 0');
          await client.query(migration.sql);
          const { rows } = await client.query<{ oid: number }>(
            `select distinct relation::int8 as oid from pg_locks
              where pid = pg_backend_pid() and locktype = 'relation' and mode = 'AccessExclusiveLock'
                and relation = any($1::oid[])`,
            [[...before.keys()]],
          );
          locked = rows.map((r) => before.get(Number(r.oid))!).sort();
          lockTimeout = (await client.query<{ v: string }>(`select current_setting('lock_timeout') as v`)).rows[0]!.v;
          await client.query('commit');
        } catch (error) {
          await client.query('rollback').catch(() => {});
          throw new Error(`${migration.name} failed: ${error instanceof Error ? error.message : String(error)}`, {
            cause: error,
          });
        }
      }
      if (!blank && lockTimeout === '0') {
        problems.push(`${migration.name} does not set lock_timeout (start it with: set local lock_timeout = '5s';)`);
      }
      const markers = lockMarkers(migration.sql);
      for (const table of locked) {
        if (!markers.has(table)) {
          problems.push(
            `${migration.name} takes an ACCESS EXCLUSIVE lock on ${table}, a hot table, without saying why: avoid it, ` +
              `or add the line \`-- lock: access exclusive on ${table}: <why>\``,
          );
        }
      }
      reports.push({ name: migration.name, locked, lockTimeout, problems });
    }
    await seedIfReady();
  } finally {
    await client.end();
  }
  return reports;
}
