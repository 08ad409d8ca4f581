// The baseline builds what the five migrations it replaced built, and a database migrated
// with those five (tools/db/test/fixtures/legacy-migrations) is moved onto the baseline by
// the project's migrate step, keeping its data, with a queue that still works.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate, type Settings } from 'graphile-migrate';
import { clearAllPools } from 'graphile-migrate/dist/pgReal.js';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { BASELINE_FILENAME, LEGACY_HISTORY, recordedFilename, replaceLegacyHistory } from '../src/legacy.js';
import { committedMigrations } from '../src/migration-files.js';
import { migrateDatabase, migrateSettings } from '../src/migrate.js';
import { repoRoot } from '../src/paths.js';
import { dumpDatabase } from '../src/schema-dump-file.js';
import { unifiedDiff } from '../src/schema-dump.js';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { queueFacts, seedQueue } from './support/queue-fixture.js';

const legacyFolder = join(repoRoot(), 'tools', 'db', 'test', 'fixtures', 'legacy-migrations');
const dbs: TestDatabase[] = [];
const temps: string[] = [];
afterAll(async () => {
  for (const dir of temps) rmSync(dir, { recursive: true, force: true });
  await Promise.all(dbs.map((db) => db.drop()));
});

async function database(options: { empty?: boolean } = {}): Promise<TestDatabase> {
  const db = await createTestDatabase(options);
  dbs.push(db);
  return db;
}

async function settingsFor(db: TestDatabase, migrationsFolder = join(repoRoot(), 'migrations')): Promise<Settings> {
  const settings = await migrateSettings({
    ownerUrl: db.url('owner'),
    rootUrl: inject('queueTestServer').rootUrl,
    dbUsers: db.dbUsers,
    quiet: true,
  });
  settings.migrationsFolder = migrationsFolder;
  return settings;
}

/** A migrations folder holding only the first `count` legacy migrations (or only the baseline). */
function folderWith(files: string[]): string {
  const folder = mkdtempSync(join(tmpdir(), 'legacy-'));
  temps.push(folder);
  mkdirSync(join(folder, 'committed'));
  for (const file of files) copyFileSync(file, join(folder, 'committed', file.split('/').pop()!));
  return folder;
}
const legacyFiles = (count = LEGACY_HISTORY.length) =>
  readdirSync(join(legacyFolder, 'committed'))
    .sort()
    .slice(0, count)
    .map((f) => join(legacyFolder, 'committed', f));

/** A database migrated with graphile-migrate alone (no legacy handling), from `folder`. */
async function migratedWith(folder: string): Promise<TestDatabase> {
  const db = await database({ empty: true });
  try {
    await migrate(await settingsFor(db, folder));
  } finally {
    clearAllPools();
  }
  return db;
}

/** Every row of every table of ours as JSON, timestamps left out (they are now()). */
async function tableContents(db: TestDatabase): Promise<Record<string, unknown[]>> {
  const { rows: tables } = await db.query<{ name: string; cols: string }>(
    `select format('%I.%I', n.nspname, c.relname) as name,
            string_agg(format('%I', a.attname), ', ' order by a.attnum)
              filter (where a.atttypid not in ('timestamptz'::regtype, 'timestamp'::regtype)) as cols
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
       join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
      where c.relkind = 'r' and n.nspname not in ('pg_catalog', 'information_schema', 'graphile_migrate')
        and n.nspname not like 'pg\\_%'
      group by 1 order by 1`,
  );
  const contents: Record<string, unknown[]> = {};
  for (const t of tables) {
    contents[t.name] = (await db.query(`select ${t.cols} from ${t.name} order by ${t.cols}`)).rows;
  }
  return contents;
}

describe('the baseline', () => {
  it('builds the same catalog and the same rows as the five migrations it replaced', async () => {
    const legacy = await migratedWith(folderWith(legacyFiles()));
    const baseline = await migratedWith(folderWith([join(repoRoot(), 'migrations', 'committed', BASELINE_FILENAME)]));
    const diff = unifiedDiff(
      await dumpDatabase(legacy.url('owner'), legacy.dbUsers),
      await dumpDatabase(baseline.url('owner'), baseline.dbUsers),
      ['legacy 000001-000005', BASELINE_FILENAME],
    );
    expect(diff, diff).toBe('');
    const rows = await tableContents(baseline);
    expect(rows['queues.task_type'].length).toBeGreaterThan(5);
    expect(rows['internal.runnable_function'].length).toBeGreaterThan(5);
    expect(await tableContents(legacy)).toEqual(rows);
  });

  it('the fixture holds the legacy history the migrate step recognises', () => {
    expect(committedMigrations(legacyFolder).map((m) => ({ filename: m.name, hash: m.hash }))).toEqual(LEGACY_HISTORY);
    expect(committedMigrations(join(repoRoot(), 'migrations'))[0]?.name).toBe(BASELINE_FILENAME);
  });
});

describe('a database migrated with the legacy history', () => {
  it("is moved onto the baseline by the project's migrate, keeps its tasks, and its queue still works", async () => {
    const db = await migratedWith(folderWith(legacyFiles()));
    const owner = await db.client('owner');
    const seeded = await seedQueue(owner);
    expect(Object.values(seeded.states).sort()).toEqual(
      ['dead-lettered', 'errored', 'heartbeated', 'pending', 'pending', 'released', 'scheduled', 'succeeded'].sort(),
    );
    const before = await queueFacts(owner);

    const lines: string[] = [];
    await migrateDatabase(await settingsFor(db), { log: (line) => lines.push(line) });
    expect(lines).toEqual([
      expect.stringMatching(/replaced the legacy history \(5 migrations\) with 000001-baseline\.sql/),
    ]);

    // Its history is the repository's now, and its schema is a fresh database's.
    const { rows: history } = await db.query<{ filename: string; previous_hash: string | null }>(
      'select filename, previous_hash from graphile_migrate.migrations order by filename',
    );
    expect(history.map((h) => h.filename)).toEqual(
      committedMigrations(join(repoRoot(), 'migrations')).map((m) => recordedFilename(m.name)),
    );
    expect(history[0].previous_hash).toBeNull();
    const fresh = await database();
    const diff = unifiedDiff(
      await dumpDatabase(fresh.url('owner'), fresh.dbUsers),
      await dumpDatabase(db.url('owner'), db.dbUsers),
      ['fresh database', 'upgraded legacy database'],
    );
    expect(diff, diff).toBe('');

    // The data is there.
    expect(await queueFacts(owner)).toEqual(before);

    // The queue works, through the functions apps and the worker call: the worker claims
    // what is ready (the pending and the released tasks) and completes it; the scheduled
    // one waits; the app enqueues, and that task is claimed next.
    const worker = db.pool('worker');
    const claim = async (taskTypes: string[] | null) =>
      (
        await worker.query<{ task_id: string; task_lease_id: string }>(
          'select task_id::text, task_lease_id::text from queues.claim_tasks($1, 10, $2)',
          ['upgraded-worker', taskTypes],
        )
      ).rows;
    const byId = (a: string, b: string) => Number(a) - Number(b);
    const claimed = await claim(['db_function']);
    const ready = Object.entries(seeded.states)
      .filter(([, state]) => state === 'pending' || state === 'released')
      .map(([id]) => id)
      .sort(byId);
    expect(claimed.map((c) => c.task_id).sort(byId)).toEqual(ready);
    const { rows: results } = await worker.query<{ result: string }>(
      'select result from queues.complete_tasks($1::bigint[], $2::bigint[])',
      [claimed.map((c) => c.task_id), claimed.map((c) => c.task_lease_id)],
    );
    expect(results.map((r) => r.result)).toEqual(ready.map(() => 'completed'));
    const { rows: enqueued } = await db
      .pool('app')
      .query<{ id: string }>(`select queues.enqueue('product_resync', '{"store_id": 1}')::text as id`);
    const next = await claim(null);
    expect(next.map((t) => t.task_id)).toEqual([enqueued[0].id]);

    // Migrating again changes nothing.
    expect(await replaceLegacyHistory(await settingsFor(db))).toBe('not-legacy');
    await migrateDatabase(await settingsFor(db));
  });

  it('is refused, its history untouched, when its schema was changed outside the migrations', async () => {
    const db = await migratedWith(folderWith(legacyFiles()));
    await db.query('alter table queues.worker add column hostname text');
    await expect(migrateDatabase(await settingsFor(db))).rejects.toThrow(
      /its schema is not what 000001-baseline\.sql builds[\s\S]*\n\+ {2}hostname text,/,
    );
    const { rows } = await db.query<{ hash: string }>('select hash from graphile_migrate.migrations order by filename');
    expect(rows.map((r) => r.hash)).toEqual(LEGACY_HISTORY.map((m) => m.hash));
    // The check (drop, rebuild, compare) was rolled back: the schemas are as they were.
    const { rows: kept } = await db.query(`select count(hostname)::int as n from queues.worker`);
    expect(kept[0]).toEqual({ n: 0 });
  });

  it('is refused when it has only part of the legacy history', async () => {
    const db = await migratedWith(folderWith(legacyFiles(3)));
    await expect(migrateDatabase(await settingsFor(db))).rejects.toThrow(
      /only a database with exactly the five legacy migrations/,
    );
    const { rows } = await db.query('select count(*)::int as n from graphile_migrate.migrations');
    expect(rows[0]).toEqual({ n: 3 });
  });
});

describe('npm run migrate', () => {
  it('migrates a new database with the committed migrations only, as the owner', async () => {
    const db = await database({ empty: true });
    const { spawnSync } = await import('node:child_process');
    const result = spawnSync(process.execPath, [join(repoRoot(), 'tools', 'db', 'dist', 'cli', 'migrate.js')], {
      env: {
        ...process.env,
        DATABASE_URL: db.url('owner'),
        DATABASE_WORKER: db.dbUsers.worker,
        DATABASE_APP: db.dbUsers.app,
        DATABASE_API: db.dbUsers.api,
      },
      encoding: 'utf8',
    });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('migrated postgres://');
    expect(result.stdout).not.toContain(db.url('owner').split('@')[0].split(':').pop()!); // no password
    const { rows } = await db.query<{ filename: string }>(
      'select filename from graphile_migrate.migrations order by filename',
    );
    expect(rows.map((r) => r.filename)).toEqual(
      committedMigrations(join(repoRoot(), 'migrations')).map((m) => recordedFilename(m.name)),
    );

    const bad = spawnSync(process.execPath, [join(repoRoot(), 'tools', 'db', 'dist', 'cli', 'migrate.js')], {
      env: { ...process.env, DATABASE_URL: db.url('owner'), DATABASE_WORKER: '', DATABASE_APP: '', DATABASE_API: '' },
      encoding: 'utf8',
    });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toBe(
      'migrate failed: set DATABASE_WORKER, DATABASE_APP, DATABASE_API (the database user names the migrations grant to)\n',
    );
  });
});
