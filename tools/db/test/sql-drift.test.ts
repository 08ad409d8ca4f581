// Every function and view in sql/ is what the migrations applied: re-applying the files
// on a migrated database changes nothing. And the check names the file that differs.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { compileMigration } from '../src/migration-files.js';
import { migrateSettings } from '../src/migrate.js';
import { repoRoot } from '../src/paths.js';
import { findSqlDrift, formatDrift, sqlFiles, type SqlFile } from '../src/sql-drift.js';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
let compile: (file: SqlFile) => Promise<string>;
const sqlDir = join(repoRoot(), 'sql');
beforeAll(async () => {
  db = await createTestDatabase();
  const settings = await migrateSettings({
    ownerUrl: db.url('owner'),
    rootUrl: inject('queueTestServer').rootUrl,
    dbUsers: db.dbUsers,
    quiet: true,
  });
  compile = (file) => compileMigration(settings, { path: join(sqlDir, file.name), text: file.text });
});
afterAll(async () => {
  await db?.drop();
});

const drift = (files: SqlFile[]) => findSqlDrift({ url: db.url('owner'), dbUsers: db.dbUsers, files, compile });

describe('sql/', () => {
  it('holds exactly what the migrations applied (include a changed file from migrations/current/ when this fails)', async () => {
    const files = sqlFiles(sqlDir);
    expect(files.map((f) => f.name)).toContain('queues/claim.sql');
    const found = await drift(files);
    expect(found, formatDrift(found)).toEqual([]);
  });

  it('skips only the files marked as not migrated', () => {
    const names = sqlFiles(sqlDir).map((f) => f.name);
    expect(names).not.toContain('schedules/chain_example.sql');
    expect(names).toContain('schedules/cron.sql');
  });
});

describe('the drift check', () => {
  let files: SqlFile[];
  beforeAll(() => {
    files = sqlFiles(sqlDir);
  });
  const replaceFile = (name: string, edit: (text: string) => string): SqlFile[] =>
    files.map((f) => (f.name === name ? { name, text: edit(f.text) } : f));

  it('names an edited function file that no migration included, with the change', async () => {
    const edited = replaceFile('queues/fail.sql', (text) => {
      const changed = text.replace("'error_message must not be empty'", "'error_message is required'");
      expect(changed).not.toBe(text);
      return changed;
    });
    const found = await drift(edited);
    expect(found.map((d) => d.file)).toEqual(['queues/fail.sql']);
    expect(found[0].diff).toMatch(/^- {4}raise exception 'error_message must not be empty'/m);
    expect(found[0].diff).toMatch(/^\+ {4}raise exception 'error_message is required'/m);
    expect(formatDrift(found)).toContain('sql/queues/fail.sql differs from what the migrations applied');
  });

  it('names a new file whose function no migration created', async () => {
    const found = await drift([
      ...files,
      {
        name: 'queues/new_thing.sql',
        text: `create or replace function queues.drift_probe() returns int language sql immutable
                 set search_path = pg_catalog, pg_temp as $$ select 1 $$;`,
      },
    ]);
    expect(found.map((d) => d.file)).toEqual(['queues/new_thing.sql']);
    expect(found[0].diff).toContain('+CREATE OR REPLACE FUNCTION queues.drift_probe()');
  });

  it('names a file that no longer applies, and a changed grant in a privileges file', async () => {
    const found = await drift([
      ...replaceFile(
        'queues/privileges.sql',
        (text) => `${text}\ngrant execute on function queues.rebuild_task_pending() to :DATABASE_WORKER;\n`,
      ),
      {
        name: 'queues/broken.sql',
        text: 'create or replace view queues.drift_view as select nope from queues.nothing;',
      },
    ]);
    expect(found.map((d) => d.file).sort()).toEqual(['queues/broken.sql', 'queues/privileges.sql']);
    expect(found.find((d) => d.file === 'queues/broken.sql')!.error).toMatch(
      /relation "queues.nothing" does not exist/,
    );
    expect(found.find((d) => d.file === 'queues/privileges.sql')!.diff).toContain(
      '+  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)',
    );
  });

  it('names the files together when only together do they change the schema', async () => {
    // The first leaves a flag in pg_temp (which the dump leaves out); the second, seeing it,
    // comments a function. Alone, neither changes the dump; applied together, in order,
    // they do. Halving splits them, each half clean, so each file is checked alone, and the
    // check names the whole set with its diff.
    const found = await drift([
      ...files,
      {
        name: 'queues/zz_pair_a.sql',
        text: 'create function pg_temp.drift_pair_flag() returns boolean language sql as $$ select true $$;',
      },
      {
        name: 'queues/zz_pair_b.sql',
        text: `do $$ begin
                 if to_regprocedure('pg_temp.drift_pair_flag()') is not null then
                   comment on function queues.max_payload_depth() is 'drift pair';
                 end if;
               end $$;`,
      },
    ]);
    expect(found.map((d) => d.file)).toEqual(['(all files together)']);
    expect(found[0].diff).toContain('drift pair');
  });

  it('leaves the database as it was', async () => {
    const { rows } = await db.query(
      `select to_regprocedure('queues.drift_probe()') as probe, to_regclass('queues.drift_view') as view`,
    );
    expect(rows[0]).toEqual({ probe: null, view: null });
    const { rows: described } = await db.query(
      `select obj_description('queues.max_payload_depth()'::regprocedure, 'pg_proc') as comment`,
    );
    expect(described[0].comment).not.toBe('drift pair');
  });
});
