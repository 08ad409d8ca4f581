// Databases migrated before the baseline: their graphile_migrate.migrations holds the
// five migrations that 000001-baseline.sql replaced (kept as a test fixture in
// tools/db/test/fixtures/legacy-migrations/). The baseline builds the same schema, so such
// a database needs no DDL, only its history rewritten: after checking that its schema is
// what the baseline builds, the five rows are replaced by the baseline's row, in one
// transaction. Then graphile-migrate runs whatever was committed after the baseline.
import pg from 'pg';
import type { Settings } from 'graphile-migrate';
import { committedMigrations, compileMigration } from './migration-files.js';
import type { RoleNames } from './roles.js';
import { dumpSchema, unifiedDiff } from './schema-dump.js';

/** The committed history the baseline replaced, in order. */
export const LEGACY_HISTORY: ReadonlyArray<{ filename: string; hash: string }> = [
  { filename: '000001-queue-foundation-queues-and-internal-schemas.sql', hash: 'sha1:434f488b276fb9fae5c4a069761e0fc3f5a749b7' },
  { filename: '000002-worker-support-lease-heartbeats-releases-poison-tasks-and-th.sql', hash: 'sha1:8e3dadadb172f8bde850bfe8d08518b86d82a4a6' },
  { filename: '000003-retries-dead-letters-resource-keys-worker-registry-shared-pr.sql', hash: 'sha1:20561af1404f12242489398235de35fcc91d6b30' },
  { filename: '000004-faster-hot-paths-generic-plans-set-based-enqueue_many-valida.sql', hash: 'sha1:dc25d3f8fceb6bfe846d9bb57237f6dd9ad15274' },
  { filename: '000005-vacuum-queues-task_pending-on-1-000-dead-rows-unthrottled.sql', hash: 'sha1:a414ea949bb49d0efda96bf0cccc08e77579daba' },
];

export const BASELINE_FILENAME = '000001-baseline.sql';

/** The name graphile-migrate records for a committed file: its number only (`000001.sql`). */
export function recordedFilename(filename: string): string {
  return `${filename.slice(0, 6)}.sql`;
}

/** graphile-migrate's advisory lock (pgReal.ts): no `migrate` runs while the history is rewritten. */
const GRAPHILE_MIGRATE_LOCK = '4727445306447283';

export type LegacyOutcome = 'not-legacy' | 'replaced';

/** The role names behind the settings' placeholders. */
export function rolesFromSettings(settings: Settings): RoleNames {
  const p = settings.placeholders ?? {};
  const get = (key: string) => {
    const value = p[key];
    if (!value || value === '!ENV') throw new Error(`placeholder ${key} has no value`);
    return value;
  };
  if (!settings.databaseOwner) throw new Error('settings.databaseOwner is not set');
  return { owner: settings.databaseOwner, worker: get(':DATABASE_WORKER'), app: get(':DATABASE_APP'), api: get(':DATABASE_API') };
}

/**
 * If the database's history is the legacy one, replaces it with the baseline's record
 * (after checking the schema matches); otherwise does nothing. Throws, changing nothing,
 * when the history is a part of the legacy one or the schema differs (with a diff).
 */
export async function replaceLegacyHistory(settings: Settings, log: (line: string) => void = () => {}): Promise<LegacyOutcome> {
  if (!settings.connectionString || !settings.migrationsFolder) throw new Error('settings need connectionString and migrationsFolder');
  const baseline = committedMigrations(settings.migrationsFolder).find((m) => m.name === BASELINE_FILENAME);
  if (!baseline?.hash) throw new Error(`${settings.migrationsFolder}/committed/${BASELINE_FILENAME} is missing or has no hash`);
  const client = new pg.Client({ connectionString: settings.connectionString });
  client.on('error', () => {});
  await client.connect();
  try {
    const { rows: exists } = await client.query<{ t: string | null }>(`select to_regclass('graphile_migrate.migrations')::text as t`);
    if (!exists[0]?.t) return 'not-legacy';
    await client.query('begin');
    try {
      // The rewrite may wait this long for a lock, no longer (live workers hold the tables).
      await client.query(`set local lock_timeout = '5s'`);
      const { rows: locked } = await client.query<{ ok: boolean }>('select pg_try_advisory_xact_lock($1::bigint) as ok', [GRAPHILE_MIGRATE_LOCK]);
      if (!locked[0]?.ok) throw new Error('another graphile-migrate run holds its lock; try again when it has finished');
      await client.query('lock table graphile_migrate.migrations in exclusive mode');
      const { rows } = await client.query<{ hash: string; filename: string }>(
        'select hash, filename from graphile_migrate.migrations order by filename',
      );
      const legacyHashes = LEGACY_HISTORY.map((m) => m.hash);
      if (!rows.some((r) => legacyHashes.includes(r.hash))) {
        await client.query('rollback');
        return 'not-legacy';
      }
      const complete =
        rows.length >= LEGACY_HISTORY.length &&
        LEGACY_HISTORY.every((m, i) => rows[i]?.hash === m.hash && rows[i]?.filename === recordedFilename(m.filename));
      if (!complete || rows.length > LEGACY_HISTORY.length) {
        throw new Error(
          `graphile_migrate.migrations holds ${rows.map((r) => r.filename).join(', ')}: only a database with exactly the ` +
            `five legacy migrations (${LEGACY_HISTORY.map((m) => m.filename.slice(0, 6)).join(', ')}) can be moved onto ` +
            `${BASELINE_FILENAME}. Migrate it with the release that still had them first, or recreate it.`,
        );
      }

      // What the baseline builds, here: drop our schemas, run the baseline, dump, undo.
      const roles = rolesFromSettings(settings);
      const actual = await dumpSchema(client, roles);
      await client.query('savepoint baseline_check');
      const { rows: schemas } = await client.query<{ name: string }>(
        `select quote_ident(nspname) as name from pg_namespace
          where nspowner = (select oid from pg_roles where rolname = current_user) and nspname <> 'graphile_migrate'`,
      );
      for (const { name } of schemas) await client.query(`drop schema ${name} cascade`);
      await client.query(await compileMigration(settings, baseline));
      const expected = await dumpSchema(client, roles);
      await client.query('rollback to savepoint baseline_check');
      const diff = unifiedDiff(expected, actual, [`what ${BASELINE_FILENAME} builds`, 'this database']);
      if (diff) {
        const lines = diff.split('\n');
        throw new Error(
          `the database has the legacy migration history, but its schema is not what ${BASELINE_FILENAME} builds ` +
            `(changed outside the committed migrations?), so its history is left as it is:\n` +
            lines.slice(0, 200).join('\n') +
            (lines.length > 200 ? `\n... ${lines.length - 200} more lines` : ''),
        );
      }
      await client.query('delete from graphile_migrate.migrations where hash = any($1::text[])', [legacyHashes]);
      await client.query('insert into graphile_migrate.migrations (hash, previous_hash, filename) values ($1, null, $2)', [
        baseline.hash,
        recordedFilename(BASELINE_FILENAME),
      ]);
      await client.query('commit');
      log(`replaced the legacy history (${LEGACY_HISTORY.length} migrations) with ${BASELINE_FILENAME}; the schema matched`);
      return 'replaced';
    } catch (error) {
      await client.query('rollback').catch(() => {});
      throw error;
    }
  } finally {
    await client.end();
  }
}
