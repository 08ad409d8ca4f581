// Migrations hold changes, not copies: every migration after 000013 and migrations/current/
// inline each sql/ file once, and change something in every file they include; and the
// check itself catches the migrations it is there to catch.
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { commit } from 'graphile-migrate';
import { clearAllPools } from 'graphile-migrate/dist/pgReal.js';
import { afterAll, describe, expect, inject, it } from 'vitest';
import {
  checkMigrationIncludes,
  createdObjects,
  FIRST_CHECKED_MIGRATION,
  includesOf,
  MAX_OBJECTS_PER_FILE,
  migrationsToCheck,
  oversizedFiles,
  repeatedIncludes,
} from '../src/migration-includes.js';
import { sqlFiles } from '../src/sql-drift.js';
import { committedMigrations } from '../src/migration-files.js';
import { migrateDatabase, migrateSettings } from '../src/migrate.js';
import { repoRoot } from '../src/paths.js';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { withDatabase } from '../src/urls.js';

const dbs: TestDatabase[] = [];
const temps: string[] = [];
afterAll(async () => {
  clearAllPools();
  for (const dir of temps) rmSync(dir, { recursive: true, force: true });
  await Promise.all(dbs.map((db) => db.drop()));
});

async function database(options: { empty?: boolean } = {}): Promise<TestDatabase> {
  const db = await createTestDatabase(options);
  dbs.push(db);
  return db;
}

async function settingsFor(db: TestDatabase, migrationsFolder: string) {
  const settings = await migrateSettings({
    ownerUrl: db.url('owner'),
    rootUrl: inject('queueTestServer').rootUrl,
    dbUsers: db.dbUsers,
    quiet: true,
  });
  settings.migrationsFolder = migrationsFolder;
  return settings;
}

const pauseSql = readFileSync(join(repoRoot(), 'sql', 'queues', 'pause.sql'), 'utf8');
/** sql/queues/pause.sql with the body of one of its two functions changed. */
const pauseSqlChanged = pauseSql.replace(
  "select coalesce(array_agg(p.task_type order by p.task_type), '{}')",
  "select coalesce(array_agg(p.task_type order by p.task_type), '{}'::text[])",
);

/**
 * A migrations folder with no committed migrations and these files in current/; its
 * fixtures are sql/ itself, or (`changedPause`) a folder whose queues/pause.sql changes
 * one function. The test database it is checked on is migrated already, so the state
 * before current/ is the repository's.
 */
function folderWith(current: Record<string, string>, options: { changedPause?: boolean } = {}): string {
  const folder = mkdtempSync(join(tmpdir(), 'includes-'));
  temps.push(folder);
  mkdirSync(join(folder, 'current'));
  for (const [name, text] of Object.entries(current)) writeFileSync(join(folder, 'current', name), text);
  if (options.changedPause) {
    mkdirSync(join(folder, 'fixtures', 'queues'), { recursive: true });
    writeFileSync(join(folder, 'fixtures', 'queues', 'pause.sql'), pauseSqlChanged);
  } else {
    symlinkSync(join(repoRoot(), 'sql'), join(folder, 'fixtures'));
  }
  return folder;
}

async function checkFolder(folder: string, prepare?: (db: TestDatabase) => Promise<unknown>) {
  const db = await database();
  await prepare?.(db);
  const { before, checked } = await migrationsToCheck(await settingsFor(db, folder));
  expect(before).toEqual([]);
  return checkMigrationIncludes({ url: db.url('owner'), before, checked });
}

describe("the repository's migrations", () => {
  it(`from ${String(FIRST_CHECKED_MIGRATION).padStart(6, '0')} on, and migrations/current/, inline each file once and change something in each`, async () => {
    const db = await database({ empty: true });
    const { before, checked } = await migrationsToCheck(await settingsFor(db, join(repoRoot(), 'migrations')));
    expect(before.map((m) => m.name)).toEqual(
      committedMigrations(join(repoRoot(), 'migrations'))
        .map((m) => m.name)
        .filter((name) => parseInt(name, 10) < FIRST_CHECKED_MIGRATION),
    );
    const reports = await checkMigrationIncludes({ url: db.url('owner'), before, checked });
    expect(reports.map((r) => r.name)).toEqual(checked.map((m) => m.name));
    expect(reports.flatMap((r) => r.problems)).toEqual([]);
  });

  it(`sql/ files create at most ${MAX_OBJECTS_PER_FILE} functions, procedures and views each`, () => {
    const files = sqlFiles(join(repoRoot(), 'sql'));
    expect(files.map((f) => f.name)).toContain('queues/partitions_maintain.sql');
    expect(oversizedFiles(files)).toEqual([]);
    // The check counts what it should: a file of 13 fails.
    const thirteen = Array.from(
      { length: 13 },
      (_, i) => `create or replace function queues.f${i}() returns int language sql immutable as $$ select ${i} $$;`,
    ).join('\n');
    expect(oversizedFiles([{ name: 'queues/big.sql', text: thirteen }])).toEqual([
      expect.stringMatching(/^sql\/queues\/big\.sql creates 13 functions, procedures and views, more than 12/),
    ]);
    expect(oversizedFiles([{ name: 'queues/ok.sql', text: thirteen.split('\n').slice(1).join('\n') }])).toEqual([]);
  });

  it('before 000014 they did not: 000005 inlines sql/queues/partitions.sql seven times', () => {
    const m5 = committedMigrations(join(repoRoot(), 'migrations')).find((m) => m.name.startsWith('000005-'))!;
    const problems = repeatedIncludes(
      m5.name,
      includesOf(m5.text, () => ''),
    );
    expect(problems).toContainEqual(expect.stringMatching(/includes queues\/partitions\.sql 7 times/));
  });
});

describe('a migration committed after 000013', () => {
  it('is checked from the blocks graphile-migrate inlined when it committed migrations/current/', async () => {
    const folder = mkdtempSync(join(tmpdir(), 'includes-commit-'));
    temps.push(folder);
    cpSync(join(repoRoot(), 'migrations', 'committed'), join(folder, 'committed'), { recursive: true });
    cpSync(join(repoRoot(), 'migrations', 'afterReset.sql'), join(folder, 'afterReset.sql'));
    symlinkSync(join(repoRoot(), 'sql'), join(folder, 'fixtures'));
    mkdirSync(join(folder, 'current'));
    writeFileSync(
      join(folder, 'current', '110-pause.sql'),
      `set local lock_timeout = '5s';\n--!include queues/pause.sql\n`,
    );
    writeFileSync(
      join(folder, 'current', '120-pause-and-run-now.sql'),
      `set local lock_timeout = '5s';
comment on function queues.paused_task_types() is 'probe';
--!include queues/pause.sql
--!include queues/task_lease_effective.sql
`,
    );

    const db = await database({ empty: true });
    const ctx = inject('queueTestServer');
    const settings = await migrateSettings({
      ownerUrl: db.url('owner'),
      rootUrl: ctx.rootUrl,
      shadowUrl: withDatabase(ctx.rootUrl, `${db.name}_shadow`, db.dbUsers.owner, ctx.dbUserPasswords.owner),
      dbUsers: db.dbUsers,
      quiet: true,
    });
    settings.migrationsFolder = folder;
    await migrateDatabase(settings);
    const committedBefore = readdirSync(join(folder, 'committed')).sort();
    await commit(settings, 'Include probe');
    const name = readdirSync(join(folder, 'committed')).sort().at(-1)!;
    expect(name).toMatch(new RegExp(`^${String(committedBefore.length + 1).padStart(6, '0')}-include-probe`));
    // The repository's own migrations after 000013, then the probe.
    const after13 = committedBefore.filter((f) => Number.parseInt(f, 10) > 13);

    const fresh = await database({ empty: true });
    const { before, checked } = await migrationsToCheck({ ...settings, connectionString: fresh.url('owner') });
    expect(before).toHaveLength(13);
    expect(checked.map((m) => m.name)).toEqual([...after13, name, 'migrations/current/']);
    const probe = checked.length - 2;
    expect(checked[probe].includes.map((i) => i.file)).toEqual([
      'queues/pause.sql',
      'queues/pause.sql',
      'queues/task_lease_effective.sql',
    ]);
    const reports = await checkMigrationIncludes({ url: fresh.url('owner'), before, checked });
    expect(reports[probe].problems).toEqual([
      expect.stringMatching(new RegExp(`^${name} includes queues/pause\\.sql 2 times`)),
      expect.stringMatching(
        new RegExp(`^${name} includes queues/task_lease_effective\\.sql but changes none of what it creates`),
      ),
    ]);
    // What graphile-migrate leaves in current/ after a commit is blank.
    expect(reports[probe + 1]).toEqual({ name: 'migrations/current/', files: [], problems: [] });
  });
});

describe('the include check', () => {
  it('fails a migration that includes a file twice, from two current files', async () => {
    const include = `set local lock_timeout = '5s';\n--!include queues/pause.sql\n`;
    const [report] = await checkFolder(
      folderWith({ '110-pause.sql': include, '310-pause-again.sql': include }, { changedPause: true }),
    );
    expect(report.name).toBe('migrations/current/');
    // The file changes something, so only the repeat is wrong.
    expect(report.problems).toEqual([
      expect.stringMatching(/^migrations\/current\/ includes queues\/pause\.sql 2 times/),
    ]);
  });

  it('fails a migration that includes a file and changes none of what it creates, naming them', async () => {
    const [report] = await checkFolder(
      folderWith({ '110-pause.sql': `set local lock_timeout = '5s';\n--!include queues/pause.sql\n` }),
    );
    expect(report.files).toEqual([
      { file: 'queues/pause.sql', changed: [], unchanged: ['queues.paused_task_types', 'queues.claimable_task_types'] },
    ]);
    expect(report.problems).toEqual([
      expect.stringMatching(
        /includes queues\/pause\.sql but changes none of what it creates \(queues\.paused_task_types, queues\.claimable_task_types come out as they were\)/,
      ),
    ]);
  });

  it('accepts an include that changes one of the objects its file creates', async () => {
    const [report] = await checkFolder(
      folderWith(
        { '110-pause.sql': `set local lock_timeout = '5s';\n--!include queues/pause.sql\n` },
        { changedPause: true },
      ),
    );
    expect(report.files).toEqual([
      { file: 'queues/pause.sql', changed: ['queues.paused_task_types'], unchanged: ['queues.claimable_task_types'] },
    ]);
    expect(report.problems).toEqual([]);
  });

  it('counts a changed comment or grant as a change, and a file that creates nothing is not held to it', async () => {
    const [report] = await checkFolder(
      folderWith({
        '110-comment.sql': `set local lock_timeout = '5s';
comment on function queues.paused_task_types() is 'probe';
--!include queues/pause.sql
--!include queues/privileges.sql
`,
      }),
    );
    expect(report.files).toEqual([
      { file: 'queues/pause.sql', changed: ['queues.paused_task_types'], unchanged: ['queues.claimable_task_types'] },
    ]);
    expect(report.problems).toEqual([]);
  });

  it('counts a runnable registration as a change', async () => {
    const [report] = await checkFolder(
      folderWith({ '110-maintain.sql': `set local lock_timeout = '5s';\n--!include queues/partitions_maintain.sql\n` }),
      (db) =>
        db.query(
          `delete from internal.runnable_function where function_schema = 'queues' and function_name = 'maintain_history'`,
        ),
    );
    expect(report.files).toEqual([
      {
        file: 'queues/partitions_maintain.sql',
        changed: ['queues.maintain_history'],
        unchanged: ['queues.maintain_history_step_at', 'queues.maintain_history_at', 'queues.maintain_history_step'],
      },
    ]);
    expect(report.problems).toEqual([]);
  });

  it('reads the blocks a committed migration inlined, and the objects a file creates at the top level', () => {
    const committed = `--! Previous: sha1:0\n--! Hash: sha1:1\n\nset local lock_timeout = '5s';
--! Included queues/a.sql
create or replace function queues.a() returns int language sql immutable as $$ select 1 $$;
--! EndIncluded queues/a.sql
--! Included queues/b.sql
CREATE VIEW queues.b_view as select 1;
create procedure "Queues"."P"() language sql as $$ select 1 $$;
--! EndIncluded queues/b.sql
--! Included queues/a.sql
create or replace function queues.a() returns int language sql immutable as $$ select 1 $$;
--! EndIncluded queues/a.sql
`;
    const includes = includesOf(committed, () => {
      throw new Error('a committed migration reads no file');
    });
    expect(includes.map((i) => i.file)).toEqual(['queues/a.sql', 'queues/b.sql', 'queues/a.sql']);
    expect(createdObjects(includes[1].text)).toEqual(['queues.b_view', 'Queues.P']);
    expect(repeatedIncludes('000014-x.sql', includes)).toEqual([
      expect.stringMatching(/^000014-x\.sql includes queues\/a\.sql 2 times/),
    ]);
    // Statements a body builds (indented, or in a string) are not the file's own.
    expect(
      createdObjects(`create function internal.make() returns void language plpgsql as $$
begin
  execute 'create or replace function internal.made() returns int language sql as ''select 1''';
  create temp table t (x int);
end $$;`),
    ).toEqual(['internal.make']);
  });
});
