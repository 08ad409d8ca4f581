// migrations/schema.sql is what the migrations build (committed + current), and the
// dump and its diff behave: deterministic, cluster-independent, stale dumps caught.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dumpDatabase, schemaDumpPath, writeSchemaDump } from '../src/schema-dump-file.js';
import { SCHEMA_DUMP_HEADER, unifiedDiff } from '../src/schema-dump.js';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
const tmp = mkdtempSync(join(tmpdir(), 'schema-dump-'));
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  rmSync(tmp, { recursive: true, force: true });
  await db?.drop();
});

describe('migrations/schema.sql', () => {
  it('is what the migrated template holds (run `npm run schema-dump` when this fails)', async () => {
    const { diff } = await writeSchemaDump(db.url('owner'), db.dbUsers, { check: true });
    expect(diff, `migrations/schema.sql is stale; run npm run schema-dump (or codegen). Diff:\n${diff}`).toBe('');
  });
});

describe('the schema dump', () => {
  it('is deterministic, names roles by placeholder, and covers every kind of object', async () => {
    const first = await dumpDatabase(db.url('owner'), db.dbUsers);
    const second = await dumpDatabase(db.url('root'), db.dbUsers);
    expect(second).toBe(first);
    expect(first.startsWith(SCHEMA_DUMP_HEADER)).toBe(true);
    for (const name of Object.values(db.dbUsers)) expect(first).not.toMatch(new RegExp(`\\b${name}\\b`));
    expect(first).toContain('grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)');
    expect(first).toContain('default privileges for :DATABASE_OWNER on routines');
    expect(first).toMatch(
      /create table queues\.task_pending \([\s\S]*?\) with \(autovacuum_vacuum_cost_delay=0, autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=1000, fillfactor=80\);/,
    );
    expect(first).toContain(
      'CREATE INDEX task_pending_ready_idx ON queues.task_pending USING btree (task_type, priority DESC, scheduled_at, task_id) WHERE (current_lease_id IS NULL);',
    );
    expect(first).toContain(
      'CREATE TRIGGER guard_task_type_in_use BEFORE DELETE OR UPDATE OF task_type ON queues.task_type FOR EACH ROW EXECUTE FUNCTION queues.guard_task_type_in_use();',
    );
    expect(first).toContain('  task_id bigint generated always as identity not null');
    expect(first).toContain('create view queues.task_lease_effective as');
    expect(first).toMatch(
      /create sequence queues\.task_task_id_seq as bigint [^\n]*\n {2}identity of queues\.task\.task_id/,
    );
    expect(first).toContain('CREATE OR REPLACE FUNCTION queues.claim_tasks(');
    expect(first).toContain("comment on table queues.task_pending is 'Derived claim index");
  });

  it('shows partitioning, generated columns, column grants and comments, enums and domains', async () => {
    const client = await db.client('owner');
    try {
      await client.query('begin');
      await client.query(`create type queues.dump_probe_mood as enum ('calm', 'busy')`);
      await client.query(`create domain queues.dump_probe_small as integer check (value < 10)`);
      await client.query(`create table queues.dump_probe (id bigint not null, at date not null, doubled bigint generated always as (id * 2) stored,
                            mood queues.dump_probe_mood, n queues.dump_probe_small) partition by range (at)`);
      await client.query(
        `create table queues.dump_probe_2026 partition of queues.dump_probe for values from ('2026-01-01') to ('2027-01-01')`,
      );
      await client.query(`comment on column queues.dump_probe.id is 'probe id'`);
      await client.query(`grant select (id) on queues.dump_probe to ${client.escapeIdentifier(db.dbUsers.api)}`);
      const dump = await (await import('../src/schema-dump.js')).dumpSchema(client, db.dbUsers);
      await client.query('rollback');
      expect(dump).toContain(`create type queues.dump_probe_mood as enum ('calm', 'busy');`);
      expect(dump).toContain(
        'create type queues.dump_probe_small as domain integer constraint dump_probe_small_check CHECK ((VALUE < 10));',
      );
      expect(dump).toContain(') partition by RANGE (at)');
      expect(dump).toContain('create table queues.dump_probe_2026 partition of queues.dump_probe (');
      expect(dump).toContain("FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')");
      expect(dump).toContain('  doubled bigint generated always as ((id * 2)) stored');
      expect(dump).toContain("comment on column queues.dump_probe.id is 'probe id';");
      expect(dump).toContain('grant SELECT to :DATABASE_API (by :DATABASE_OWNER) (column id)');
    } finally {
      await client.end();
    }
  });

  it('a stale committed dump is caught, with a diff that names what changed', async () => {
    const committed = readFileSync(schemaDumpPath(), 'utf8');
    const start = committed.indexOf('CREATE OR REPLACE FUNCTION queues.fail_task(');
    const end = committed.indexOf('\n\n', start);
    expect(start).toBeGreaterThan(0);
    const stale = join(tmp, 'stale.sql');
    writeFileSync(stale, committed.slice(0, start) + committed.slice(end + 2));
    const { diff, changed } = await writeSchemaDump(db.url('owner'), db.dbUsers, { check: true, path: stale });
    expect(changed).toBe(true);
    expect(diff).toMatch(/^\+CREATE OR REPLACE FUNCTION queues\.fail_task\(/m);
    expect(
      diff
        .split('\n')
        .slice(2)
        .filter((line) => line.startsWith('-')),
    ).toEqual([]);
    // Without `check` the file is rewritten, and then it is up to date.
    expect((await writeSchemaDump(db.url('owner'), db.dbUsers, { path: stale })).changed).toBe(true);
    expect((await writeSchemaDump(db.url('owner'), db.dbUsers, { path: stale, check: true })).diff).toBe('');
  });

  it('a database changed outside the migrations differs from the committed dump', async () => {
    const client = await db.client('owner');
    try {
      await client.query('begin');
      await client.query(`alter table queues.worker add column dump_probe text`);
      const dump = await (await import('../src/schema-dump.js')).dumpSchema(client, db.dbUsers);
      await client.query('rollback');
      const diff = unifiedDiff(readFileSync(schemaDumpPath(), 'utf8'), dump);
      expect(diff).toMatch(/^\+ {2}dump_probe text,$/m);
    } finally {
      await client.end();
    }
  });
});

describe('unifiedDiff', () => {
  it('is empty for equal texts and shows hunks with context and line numbers', () => {
    expect(unifiedDiff('a\nb\n', 'a\nb\n')).toBe('');
    const a = ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12'].join('\n');
    const b = ['1', '2', '3', '4', 'five', '6', '7', '8', '9', '10', '11', '12', '13'].join('\n');
    expect(unifiedDiff(a, b, ['old', 'new'], 2)).toBe(
      [
        '--- old',
        '+++ new',
        '@@ -3,5 +3,5 @@',
        ' 3',
        ' 4',
        '-5',
        '+five',
        ' 6',
        ' 7',
        '@@ -11,2 +11,3 @@',
        ' 11',
        ' 12',
        '+13',
        '',
      ].join('\n'),
    );
  });

  it('handles insertions at the start and deletions at the end', () => {
    expect(unifiedDiff('b\nc', 'a\nb\nc', ['x', 'y'])).toBe(
      ['--- x', '+++ y', '@@ -1,2 +1,3 @@', '+a', ' b', ' c', ''].join('\n'),
    );
    expect(unifiedDiff('a\nb\nc', 'a\nb', ['x', 'y'])).toBe(
      ['--- x', '+++ y', '@@ -1,3 +1,2 @@', ' a', ' b', '-c', ''].join('\n'),
    );
  });

  it('diffs a whole dump against an empty file, and reports a difference in the final newline alone', () => {
    // A dump of tens of thousands of lines against a file that does not exist yet (the
    // first `npm run dev` cycle): every line is an insertion.
    const dump = Array.from({ length: 40_000 }, (_, i) => `line ${i}`).join('\n') + '\n';
    const diff = unifiedDiff('', dump, ['x', 'y']).split('\n');
    expect(diff.slice(0, 4)).toEqual(['--- x', '+++ y', '@@ -0,0 +1,40000 @@', '+line 0']);
    expect(diff.filter((line) => line.startsWith('+line'))).toHaveLength(40_000);

    const changed = dump.replace('line 20000\n', 'line twenty thousand\n');
    expect(unifiedDiff(dump, changed, ['x', 'y'], 1)).toBe(
      [
        '--- x',
        '+++ y',
        '@@ -20000,3 +20000,3 @@',
        ' line 19999',
        '-line 20000',
        '+line twenty thousand',
        ' line 20001',
        '',
      ].join('\n'),
    );
    expect(unifiedDiff('a\nb', 'a\nb\n', ['x', 'y'])).toBe(
      ['--- x', '+++ y', '\\ the texts differ only in the newline at the end', ''].join('\n'),
    );
  });
});
