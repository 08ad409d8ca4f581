// Every migration (committed, then each file of migrations/current/) sets lock_timeout and
// takes no ACCESS EXCLUSIVE lock on a hot queue table unless it says why; and the check
// itself catches the migrations it is there to catch.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { compiledMigrations } from '../src/migration-files.js';
import { checkMigrationLocks, HOT_TABLES, lockMarkers, type MigrationToCheck } from '../src/migration-locks.js';
import { migrateSettings } from '../src/migrate.js';
import { repoRoot } from '../src/paths.js';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { seedQueue } from './support/queue-fixture.js';

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

async function settingsFor(db: TestDatabase, migrationsFolder = join(repoRoot(), 'migrations')) {
  const settings = await migrateSettings({
    ownerUrl: db.url('owner'),
    rootUrl: inject('queueTestServer').rootUrl,
    dbUsers: db.dbUsers,
    quiet: true,
  });
  settings.migrationsFolder = migrationsFolder;
  return settings;
}

describe("the repository's migrations", () => {
  it('each sets lock_timeout and locks no hot table ACCESS EXCLUSIVE without a marker', async () => {
    const db = await database({ empty: true });
    const migrations = await compiledMigrations(await settingsFor(db));
    expect(migrations[0]?.name).toBe('000001-baseline.sql');
    let seeded = false;
    const reports = await checkMigrationLocks({
      url: db.url('owner'),
      migrations,
      seed: async (client) => {
        await seedQueue(client);
        seeded = true;
      },
    });
    expect(reports.map((r) => r.name)).toEqual(migrations.map((m) => m.name));
    expect(reports.flatMap((r) => r.problems)).toEqual([]);
    expect(reports[0]?.lockTimeout).toBe('5s');
    // The seed ran once the baseline had made the hot tables, so later migrations meet rows.
    expect(seeded).toBe(true);
    const { rows } = await db.query(`select (select count(*)::int from queues.task_pending) as pending,
                                            (select count(*)::int from queues.task_end) as completed`);
    expect(rows[0]).toEqual({ pending: 6, completed: 2 });
  });
});

describe('the lock check', () => {
  let db: TestDatabase;
  let seeds = 0;
  const check = (migrations: MigrationToCheck[]) =>
    checkMigrationLocks({
      url: db.url('owner'),
      migrations,
      seed: async (client) => {
        seeds++;
        await seedQueue(client);
      },
    });
  beforeAll(async () => {
    db = await database();
  });

  it('fails a migration that alters queues.task_pending without a marker, and names the table', async () => {
    const [report] = await check([
      {
        name: '110-priority.sql',
        sql: `set local lock_timeout = '5s';\nalter table queues.task_pending add column if not exists probe_a integer;`,
      },
    ]);
    expect(report.locked).toEqual(['queues.task_pending']);
    expect(report.problems).toEqual([
      expect.stringMatching(/110-priority\.sql takes an ACCESS EXCLUSIVE lock on queues\.task_pending/),
    ]);
    // The hot tables existed, so the seed ran first: the table had rows.
    expect(seeds).toBe(1);
  });

  it('accepts the same migration when a marker says why', async () => {
    const [report] = await check([
      {
        name: '120-probe.sql',
        sql: `set local lock_timeout = '5s';
-- lock: access exclusive on queues.task_pending: a column every claim reads; no way round it
alter table queues.task_pending add column if not exists probe_b integer;`,
      },
    ]);
    expect(report.locked).toEqual(['queues.task_pending']);
    expect(report.problems).toEqual([]);
  });

  it('a marker for one table does not cover another', async () => {
    const [report] = await check([
      {
        name: '130-two.sql',
        sql: `set local lock_timeout = '5s';
-- lock: access exclusive on queues.task_pending: needed
alter table queues.task_lease add column if not exists probe_c integer;`,
      },
    ]);
    expect(report.locked).toEqual(['queues.task_lease']);
    expect(report.problems).toHaveLength(1);
    expect(report.problems[0]).toContain('queues.task_lease');
  });

  it('fails a migration without lock_timeout, and lets a blank one pass', async () => {
    const reports = await check([
      {
        name: '210-fn.sql',
        sql: `create or replace function queues.lock_probe() returns int language sql immutable set search_path = pg_catalog, pg_temp as $$ select 1 $$;`,
      },
      { name: '220-blank.sql', sql: '-- nothing yet\n' },
      {
        name: '230-new-table.sql',
        sql: `set local lock_timeout = '5s';\ncreate table queues.lock_probe_table (x int);\nalter table queues.lock_probe_table add column y int;`,
      },
    ]);
    expect(reports[0].problems).toEqual([expect.stringMatching(/210-fn\.sql does not set lock_timeout/)]);
    expect(reports[1].problems).toEqual([]);
    // A table that is not hot may be locked freely (and a new one is never hot).
    expect(reports[2].locked).toEqual([]);
    expect(reports[2].problems).toEqual([]);
  });

  it('reads markers in plain SQL comments only', () => {
    const markers = lockMarkers(`-- lock: access exclusive on queues.task_pending: adds a column
--lock:access exclusive on Queues.Task: rewrite
--! lock: access exclusive on queues.error: not a marker (a graphile-migrate directive)
-- lock: access exclusive on queues.task_lease:
select 1;`);
    expect([...markers.keys()]).toEqual(['queues.task_pending', 'queues.task']);
    expect(markers.get('queues.task_pending')).toBe('adds a column');
  });

  it('the hot tables exist', async () => {
    const { rows } = await db.query<{ t: string | null }>(
      'select to_regclass(t)::text as t from unnest($1::text[]) t',
      [HOT_TABLES],
    );
    expect(rows.map((r) => r.t)).toEqual([...HOT_TABLES]);
  });
});

describe('migrations/current/ as the check reads it', () => {
  it('takes any number of files in numeric order, compiles includes and placeholders, skips dotfiles', async () => {
    const db = await database({ empty: true });
    const folder = mkdtempSync(join(tmpdir(), 'locks-current-'));
    temps.push(folder);
    mkdirSync(join(folder, 'committed'));
    mkdirSync(join(folder, 'current'));
    symlinkSync(join(repoRoot(), 'sql'), join(folder, 'fixtures'));
    writeFileSync(join(folder, 'current', '.gitkeep'), '');
    writeFileSync(
      join(folder, 'current', '310-ops.sql'),
      `set local lock_timeout = '5s';\ngrant usage on schema queues to :DATABASE_API;\n`,
    );
    writeFileSync(
      join(folder, 'current', '110-semantic.sql'),
      `set local lock_timeout = '5s';\n--!include queues/triggers.sql\n`,
    );
    writeFileSync(join(folder, 'current', '1-current.sql'), `-- Nothing here yet\n`);
    const migrations = await compiledMigrations(await settingsFor(db, folder));
    expect(migrations.map((m) => m.name)).toEqual([
      'current/1-current.sql',
      'current/110-semantic.sql',
      'current/310-ops.sql',
    ]);
    expect(migrations[1].sql).toContain('create or replace function queues.forbid_fact_update()');
    expect(migrations[1].sql).not.toContain('--!include');
    expect(migrations[2].sql).toContain(`to ${db.dbUsers.api};`);
  });
});
