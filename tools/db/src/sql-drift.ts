// The sql/ drift check: every function and view in sql/ must be what the migrations
// applied. Each sql/**/*.sql file is re-applied, in a transaction that is rolled back, on
// a migrated database; if the schema dump changes, some file holds a definition the
// migrations never applied (edited, or new, and not included from migrations/current/).
// The files that did are then found by halving: a set of files is applied together and
// dumped once, and only a set that changes the dump (or fails) is split, so naming one
// file among a hundred takes about fourteen dumps, not a hundred. A set that changes the
// dump while neither half does alone (files that act on each other's objects) is named
// file by file, as before.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import pg from 'pg';
import type { DbUserNames } from './db-users.js';
import { dumpSchema, unifiedDiff } from './schema-dump.js';

/** A file with this line is not part of the migrations (an example its test loads). */
export const NOT_MIGRATED_MARKER = '-- schema-drift: not migrated';

export interface SqlFile {
  /** Path relative to the sql/ folder, e.g. `queues/claim.sql`. */
  name: string;
  text: string;
}

/** Every .sql file under `sqlDir` (recursively, sorted), except those marked not migrated. */
export function sqlFiles(sqlDir: string): SqlFile[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.name.startsWith('.') || entry.name === 'node_modules') continue;
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile() && entry.name.endsWith('.sql')) found.push(path);
    }
  };
  walk(sqlDir);
  return found
    .map((path) => ({ name: relative(sqlDir, path), text: readFileSync(path, 'utf8') }))
    .filter((file) => !file.text.split('\n').some((line) => line.startsWith(NOT_MIGRATED_MARKER)))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export interface Drift {
  file: string;
  /** How the dump changes when the file is applied. */
  diff?: string;
  /** The file failed to apply (e.g. it refers to something no migration created). */
  error?: string;
}

/**
 * Re-applies `files` on the migrated database at `url` (as its owner) and returns the
 * files that change its schema dump or fail; [] when sql/ matches the migrations.
 * `compile` replaces placeholders. Nothing is kept: every transaction is rolled back.
 */
export async function findSqlDrift(options: {
  url: string;
  dbUsers: DbUserNames;
  files: SqlFile[];
  compile: (file: SqlFile) => Promise<string>;
}): Promise<Drift[]> {
  const client = new pg.Client({ connectionString: options.url });
  client.on('error', () => {});
  await client.connect();
  const compiled = await Promise.all(options.files.map(async (file) => ({ file, sql: await options.compile(file) })));
  const apply = async (sql: string): Promise<string | undefined> => {
    await client.query('savepoint drift_file');
    try {
      await client.query(sql);
      await client.query('release savepoint drift_file');
      return undefined;
    } catch (error) {
      await client.query('rollback to savepoint drift_file');
      return error instanceof Error ? error.message : String(error);
    }
  };
  try {
    await client.query('begin');
    let before: string;
    let failed = false;
    let after: string;
    try {
      before = await dumpSchema(client, options.dbUsers);
      for (const { sql } of compiled) if ((await apply(sql)) !== undefined) failed = true;
      after = await dumpSchema(client, options.dbUsers);
    } finally {
      await client.query('rollback');
    }
    if (!failed && after === before) return [];

    // Whether applying `set` together changes the dump or fails.
    const changes = async (set: typeof compiled): Promise<boolean> => {
      await client.query('begin');
      try {
        let broke = false;
        for (const { sql } of set) if ((await apply(sql)) !== undefined) broke = true;
        return broke || (await dumpSchema(client, options.dbUsers)) !== before;
      } finally {
        await client.query('rollback');
      }
    };
    // One file's drift: its error, or its change to the dump.
    const driftOf = async ({ file, sql }: (typeof compiled)[number]): Promise<Drift | undefined> => {
      await client.query('begin');
      try {
        const error = await apply(sql);
        if (error !== undefined) return { file: file.name, error };
        const dump = await dumpSchema(client, options.dbUsers);
        const diff = unifiedDiff(before, dump, ['the migrated database', `after applying sql/${file.name}`]);
        return diff ? { file: file.name, diff } : undefined;
      } finally {
        await client.query('rollback');
      }
    };
    const drifts: Drift[] = [];
    // `set` changes the dump: name the files in it that do.
    const narrow = async (set: typeof compiled): Promise<void> => {
      const [only] = set;
      if (set.length === 1 && only) {
        const found = await driftOf(only);
        if (found) drifts.push(found);
        return;
      }
      const halves = [set.slice(0, set.length >> 1), set.slice(set.length >> 1)];
      const changing = [];
      for (const half of halves) if (await changes(half)) changing.push(half);
      if (changing.length === 0) {
        for (const one of set) {
          const found = await driftOf(one);
          if (found) drifts.push(found);
        }
        return;
      }
      for (const half of changing) await narrow(half);
    };
    await narrow(compiled);
    if (drifts.length === 0) {
      // Only together do the files change something (one redefines what another made).
      drifts.push({
        file: '(all files together)',
        diff: unifiedDiff(before, after, ['the migrated database', 'after every sql/ file']),
      });
    }
    return drifts;
  } finally {
    await client.end();
  }
}

/** A readable report of drifts, for test failures. */
export function formatDrift(drifts: Drift[]): string {
  return drifts
    .map((d) =>
      d.error
        ? `sql/${d.file} fails to apply on the migrated database: ${d.error}`
        : `sql/${d.file} differs from what the migrations applied (include it from a file of migrations/current/):\n${d.diff}`,
    )
    .join('\n\n');
}
