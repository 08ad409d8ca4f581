// Migration tests: a database migrated up to just before a given committed migration,
// then to the repository's migrations, with the queue test server's users
// (databaseBefore).
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { hardenDatabase, migrateDatabase, migrateSettings, repoRoot, withDatabase } from '@org/db-tools';
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

/** A database of the queue test server migrated up to just before a committed migration. */
export interface DatabaseBefore {
  /** Connected as the owner, the worker and the app database users. */
  owner: pg.Client;
  worker: pg.Client;
  app: pg.Client;
  /** Migrates it on with the repository's migrations (committed, then current). */
  migrateOn(): Promise<void>;
  /** Closes the connections, drops the database and removes the scratch folder. */
  drop(): Promise<void>;
}

/**
 * Creates the database `name` (hardened as every database of the server), migrates it with
 * the committed migrations numbered below `migration`, and connects to it.
 */
export async function databaseBefore(
  ctx: TestServerContext,
  name: string,
  migration: number,
  options: { afterReset?: boolean } = {},
): Promise<DatabaseBefore> {
  const url = (dbUser: 'owner' | 'worker' | 'app') =>
    withDatabase(ctx.rootUrl, name, ctx.dbUsers[dbUser], ctx.dbUserPasswords[dbUser]);
  const root = new pg.Client({ connectionString: ctx.rootUrl });
  await root.connect();
  try {
    await root.query(
      `create database ${root.escapeIdentifier(name)} owner ${root.escapeIdentifier(ctx.dbUsers.owner)}`,
    );
    await hardenDatabase(root, name, ctx.dbUsers);
  } finally {
    await root.end();
  }
  const scratch = migrationsBefore(migration, options);
  await migrateFolder(ctx, url('owner'), scratch.folder);
  const owner = new pg.Client({ connectionString: url('owner') });
  const worker = new pg.Client({ connectionString: url('worker') });
  const app = new pg.Client({ connectionString: url('app') });
  await Promise.all([owner.connect(), worker.connect(), app.connect()]);
  return {
    owner,
    worker,
    app,
    migrateOn: () => migrateFolder(ctx, url('owner'), repositoryMigrations()),
    drop: async () => {
      await Promise.all([owner.end(), worker.end(), app.end()]);
      const dropper = new pg.Client({ connectionString: ctx.rootUrl });
      await dropper.connect();
      await dropper.query(`drop database if exists ${dropper.escapeIdentifier(name)} with (force)`);
      await dropper.end();
      scratch.remove();
    },
  };
}
