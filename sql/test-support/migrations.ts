// Migration tests: a database migrated up to just before a given committed migration,
// then to the repository's migrations, with the queue test server's users.
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrateDatabase, migrateSettings, repoRoot } from '@org/db-tools';
import type { TestServerContext } from '@org/testing';

/** Migrates the database at ownerUrl with the migrations of folder. */
export async function migrateFolder(ctx: TestServerContext, ownerUrl: string, folder: string): Promise<void> {
  const settings = await migrateSettings({ ownerUrl, rootUrl: ctx.rootUrl, dbUsers: ctx.dbUsers, quiet: true });
  settings.migrationsFolder = folder;
  await migrateDatabase(settings);
}

/** The repository's migrations folder. */
export const repositoryMigrations = (): string => join(repoRoot(), 'migrations');

/**
 * A scratch migrations folder holding the committed migrations numbered below migration,
 * no current ones, and sql/ as fixtures (with migrations/afterReset.sql unless told not
 * to). remove() deletes it.
 */
export function migrationsBefore(
  migration: number,
  options: { afterReset?: boolean } = {},
): { folder: string; remove: () => void } {
  const root = repoRoot();
  const scratch = mkdtempSync(join(tmpdir(), `migrations-before-${migration}-`));
  const folder = join(scratch, 'migrations');
  mkdirSync(join(folder, 'committed'), { recursive: true });
  mkdirSync(join(folder, 'current'));
  symlinkSync(join(root, 'sql'), join(folder, 'fixtures'));
  if (options.afterReset ?? true) cpSync(join(root, 'migrations', 'afterReset.sql'), join(folder, 'afterReset.sql'));
  for (const file of readdirSync(join(root, 'migrations', 'committed'))) {
    if (Number.parseInt(file, 10) < migration) {
      cpSync(join(root, 'migrations', 'committed', file), join(folder, 'committed', file));
    }
  }
  return { folder, remove: () => rmSync(scratch, { recursive: true, force: true }) };
}
