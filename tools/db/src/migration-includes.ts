// The include check of migrations: a migration holds changes, not copies. Two rules:
//
// 1. Each sql/ file is inlined at most once per migration. graphile-migrate compiles an
//    include from the file as it stands at commit, so a second include of the same file
//    in one migration (two files of migrations/current/, or one file twice) runs the same
//    text again and changes nothing.
// 2. A migration includes a file only to change something it defines: at least one of the
//    functions, procedures and views the file creates must differ after the migration
//    (definition, comment, grants or runnable registration, read from the catalog) from
//    what it was before. An
//    include whose every object comes out as it went in is a copy.
//
// Rule 2 is read from the catalog, not from text: the migrations before the one checked
// are applied to a scratch database, each object the included files create is read
// (pg_get_functiondef, pg_get_viewdef, its comment and ACL, and whether
// internal.run_function may run it), the migration is applied and the objects are read
// again. Files that create nothing (the privileges files: grants and
// registrations, re-runnable by design) are checked by rule 1 only.
//
// Rule 2 lets an include re-create the objects of its file that the change did not touch;
// rule 3 bounds them: a sql/ file creates at most MAX_OBJECTS_PER_FILE functions,
// procedures and views (a family that grows past it is split by concern, which changes no
// SQL object), so a change to one function re-creates at most that many less one.
//
// Committed migrations up to FIRST_CHECKED_MIGRATION - 1 predate the rules (000005 inlines
// sql/queues/partitions.sql seven times) and stay as they are: they are applied, not
// checked.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Settings } from 'graphile-migrate';
import pg from 'pg';
import { committedMigrations, compileMigration, currentMigrationFiles } from './migration-files.js';

/** The first committed migration (its number) the rules apply to; every later one and migrations/current/ too. */
export const FIRST_CHECKED_MIGRATION = 14;

/** Rule 3: the most functions, procedures and views one sql/ file may create. */
export const MAX_OBJECTS_PER_FILE = 12;

/** Rule 3: a message for each of `files` (sql/ files, by name) that creates more than MAX_OBJECTS_PER_FILE objects. */
export function oversizedFiles(files: readonly { name: string; text: string }[]): string[] {
  return files.flatMap((file) => {
    const n = createdObjects(file.text).length;
    return n > MAX_OBJECTS_PER_FILE
      ? [
          `sql/${file.name} creates ${n} functions, procedures and views, more than ${MAX_OBJECTS_PER_FILE}: a change ` +
            `to one of them would re-create the rest; split it by concern (files with a common prefix, ` +
            `like queues/partitions*.sql)`,
        ]
      : [];
  });
}

export interface Include {
  /** The sql/ file, relative to sql/ (e.g. `queues/run_now.sql`). */
  file: string;
  /** Its text as the migration inlines it. */
  text: string;
}

const INCLUDE_LINE = /^--!include[ \t]+(\S+)[ \t]*$/gm;
const INCLUDED_BLOCK = /^--! Included[ \t]+(\S+)[ \t]*\n([\s\S]*?)^--! EndIncluded[ \t]+\1[ \t]*$/gm;

/**
 * The sql/ files a migration inlines, in order: the `--! Included <file>` blocks of a
 * committed migration, else the `--!include <file>` lines of a current file (its text read
 * with `readFixture`).
 */
export function includesOf(text: string, readFixture: (file: string) => string): Include[] {
  const included = [...text.matchAll(INCLUDED_BLOCK)].map((m) => ({ file: m[1]!, text: m[2]! }));
  if (included.length > 0) return included;
  return [...text.matchAll(INCLUDE_LINE)].map((m) => ({ file: m[1]!, text: readFixture(m[1]!) }));
}

/** Rule 1: a message for each file `includes` inlines more than once. */
export function repeatedIncludes(migration: string, includes: readonly Include[]): string[] {
  const counts = new Map<string, number>();
  for (const include of includes) counts.set(include.file, (counts.get(include.file) ?? 0) + 1);
  return [...counts]
    .filter(([, n]) => n > 1)
    .map(
      ([file, n]) =>
        `${migration} includes ${file} ${n} times: an include installs the file as it stands when the ` +
        `migration is committed, so include it once (in the current file of the first change that needs it, ` +
        `below any DDL it depends on)`,
    );
}

const CREATE =
  /^create[ \t]+(?:or[ \t]+replace[ \t]+)?(?:materialized[ \t]+)?(function|procedure|view)[ \t]+("?[A-Za-z_][A-Za-z0-9_]*"?)\.("?[A-Za-z_][A-Za-z0-9_]*"?)/gim;

/** The functions, procedures and views `sql` creates at the top level (a line that starts with `create`), as schema.name. */
export function createdObjects(sql: string): string[] {
  const names = new Set<string>();
  for (const m of sql.matchAll(CREATE)) {
    const part = (s: string) => (s.startsWith('"') ? s.slice(1, -1) : s.toLowerCase());
    names.add(`${part(m[2]!)}.${part(m[3]!)}`);
  }
  return [...names];
}

export interface MigrationToApply {
  name: string;
  /** The SQL it runs (includes compiled, placeholders replaced); several parts run in one transaction. */
  sql: string | string[];
  noTransaction?: boolean;
}

export interface MigrationIncludesToCheck extends MigrationToApply {
  includes: Include[];
}

export interface IncludeReport {
  name: string;
  /** Per included file that creates objects: the objects it changed, and those it re-created unchanged. */
  files: { file: string; changed: string[]; unchanged: string[] }[];
  problems: string[];
}

/** schema.name -> what the catalog holds for every function, procedure or view of that name. */
async function readObjects(client: pg.Client, names: string[]): Promise<Map<string, string>> {
  // Whether internal.run_function may run it (a registration is part of what a file sets).
  const { rows: registry } = await client.query<{ exists: boolean }>(
    `select to_regclass('internal.runnable_function') is not null as exists`,
  );
  const runnable = registry[0]!.exists
    ? `'runnable: ' || exists (select 1 from internal.runnable_function r
                                where r.function_schema = n.nspname and r.function_name = p.proname)`
    : 'null';
  const { rows } = await client.query<{ name: string; state: string }>(
    `select o.name, string_agg(o.state, E'\\n' order by o.state) as state
       from (select n.nspname || '.' || p.proname as name,
                    concat_ws(E'\\n', p.oid::regprocedure::text, pg_get_functiondef(p.oid),
                              'comment: ' || obj_description(p.oid, 'pg_proc'), 'acl: ' || p.proacl::text,
                              ${runnable}) as state
               from pg_proc p join pg_namespace n on n.oid = p.pronamespace
              where n.nspname || '.' || p.proname = any($1::text[])
             union all
             select n.nspname || '.' || c.relname,
                    concat_ws(E'\\n', c.relkind::text, pg_get_viewdef(c.oid),
                              'comment: ' || obj_description(c.oid, 'pg_class'), 'acl: ' || c.relacl::text)
               from pg_class c join pg_namespace n on n.oid = c.relnamespace
              where c.relkind in ('v', 'm') and n.nspname || '.' || c.relname = any($1::text[])) o
      group by o.name`,
    [names],
  );
  return new Map(rows.map((r) => [r.name, r.state]));
}

async function apply(client: pg.Client, migration: MigrationToApply): Promise<void> {
  const parts = Array.isArray(migration.sql) ? migration.sql : [migration.sql];
  try {
    if (migration.noTransaction) {
      for (const part of parts) await client.query(part);
      return;
    }
    await client.query('begin');
    for (const part of parts) await client.query(part);
    await client.query('commit');
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw new Error(`${migration.name} failed: ${error instanceof Error ? error.message : String(error)}`, {
      cause: error,
    });
  }
}

/**
 * Applies `before` to the database at `url` (as its owner), then each of `checked` in
 * order, and reports, for each of those, what its included files changed and what is
 * wrong with it (rules 1 and 2 above). Every migration is committed, as a deploy would.
 */
export async function checkMigrationIncludes(options: {
  url: string;
  before: MigrationToApply[];
  checked: MigrationIncludesToCheck[];
}): Promise<IncludeReport[]> {
  const client = new pg.Client({ connectionString: options.url });
  client.on('error', () => {});
  await client.connect();
  const reports: IncludeReport[] = [];
  try {
    for (const migration of options.before) await apply(client, migration);
    for (const migration of options.checked) {
      const problems = repeatedIncludes(migration.name, migration.includes);
      const created = migration.includes.map((include) => ({
        file: include.file,
        names: createdObjects(include.text),
      }));
      const names = [...new Set(created.flatMap((c) => c.names))];
      const before = await readObjects(client, names);
      await apply(client, migration);
      const after = await readObjects(client, names);
      const files: IncludeReport['files'] = [];
      const seen = new Set<string>();
      for (const { file, names: fileNames } of created) {
        if (fileNames.length === 0 || seen.has(file)) continue;
        seen.add(file);
        const changed = fileNames.filter((n) => before.get(n) !== after.get(n));
        const unchanged = fileNames.filter((n) => before.get(n) === after.get(n));
        files.push({ file, changed, unchanged });
        if (changed.length === 0) {
          problems.push(
            `${migration.name} includes ${file} but changes none of what it creates ` +
              `(${unchanged.join(', ')} come out as they were): the include is a copy; remove it`,
          );
        }
      }
      reports.push({ name: migration.name, files, problems });
    }
  } finally {
    await client.end();
  }
  return reports;
}

/**
 * The migrations of `settings.migrationsFolder` split for checkMigrationIncludes: the
 * committed ones before FIRST_CHECKED_MIGRATION to apply, then the later committed ones
 * and the files of migrations/current/ (one migration, as graphile-migrate joins them) to
 * check. Includes of current files are read from the folder's `fixtures` (-> ../sql).
 */
export async function migrationsToCheck(
  settings: Settings,
): Promise<{ before: MigrationToApply[]; checked: MigrationIncludesToCheck[] }> {
  const folder = settings.migrationsFolder ?? 'migrations';
  const readFixture = (file: string) => readFileSync(join(folder, 'fixtures', file), 'utf8');
  const before: MigrationToApply[] = [];
  const checked: MigrationIncludesToCheck[] = [];
  for (const file of committedMigrations(folder)) {
    const migration = {
      name: file.name,
      sql: await compileMigration(settings, file),
      noTransaction: /^--! no-transaction\b/m.test(file.text),
    };
    if (parseInt(file.name, 10) < FIRST_CHECKED_MIGRATION) before.push(migration);
    else checked.push({ ...migration, includes: includesOf(file.text, readFixture) });
  }
  const current = currentMigrationFiles(folder);
  if (current.length > 0) {
    checked.push({
      name: 'migrations/current/',
      sql: await Promise.all(current.map((file) => compileMigration(settings, file))),
      noTransaction: current.some((file) => /^--! no-transaction\b/m.test(file.text)),
      includes: current.flatMap((file) => includesOf(file.text, readFixture)),
    });
  }
  return { before, checked };
}
