// The committed schema dump, migrations/schema.sql: written by `npm run schema-dump`,
// `npm run codegen` and every cycle of `npm run dev`; checked by tools/db/test.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { repoRoot } from './paths.js';
import type { RoleNames } from './roles.js';
import { dumpSchema, unifiedDiff } from './schema-dump.js';

export function schemaDumpPath(): string {
  return join(repoRoot(), 'migrations', 'schema.sql');
}

/** Dumps the database at `url` (a migrated database) with its own client. */
export async function dumpDatabase(url: string, roles: RoleNames): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await dumpSchema(client, roles);
  } finally {
    await client.end();
  }
}

/**
 * Writes the dump of `url` to migrations/schema.sql (or, with `check`, only compares).
 * Returns the diff from the committed file to the database ('' when equal).
 */
export async function writeSchemaDump(
  url: string,
  roles: RoleNames,
  options: { check?: boolean; path?: string } = {},
): Promise<{ path: string; changed: boolean; diff: string }> {
  const path = options.path ?? schemaDumpPath();
  const dump = await dumpDatabase(url, roles);
  const committed = existsSync(path) ? readFileSync(path, 'utf8') : '';
  const diff = unifiedDiff(committed, dump, ['migrations/schema.sql (committed)', 'the migrated database']);
  if (!options.check && diff) writeFileSync(path, dump);
  return { path, changed: diff !== '', diff: options.check ? diff : '' };
}
