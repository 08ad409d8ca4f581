// Reading migrations the way graphile-migrate does: committed files with their headers,
// the files of migrations/current/ in order, includes compiled from migrations/fixtures
// (-> ../sql) and placeholders replaced. Used by the legacy-history upgrade and by the
// tests that apply migrations one at a time.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Settings } from 'graphile-migrate';
// Not re-exported by the package index.
import { compileIncludes, generatePlaceholderReplacement, parseMigrationText } from 'graphile-migrate/dist/migration.js';
import { parseSettings } from 'graphile-migrate/dist/settings.js';

export interface MigrationFile {
  /** e.g. `000001-baseline.sql`, or `current/110-retries.sql` */
  name: string;
  path: string;
  /** The file as written (committed files: with their includes already compiled). */
  text: string;
  /** The `--! Hash:` header of a committed migration. */
  hash?: string;
}

/** The committed migrations of `migrationsFolder`, in order. */
export function committedMigrations(migrationsFolder: string): MigrationFile[] {
  const dir = join(migrationsFolder, 'committed');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => /^\d{6}(-[-_a-zA-Z0-9]+)?\.sql$/.test(f))
    .sort()
    .map((name) => {
      const path = join(dir, name);
      const text = readFileSync(path, 'utf8');
      const hash = /^--! Hash: (\S+)$/m.exec(text)?.[1];
      return { name, path, text, hash };
    });
}

/**
 * The current migration as separate files: each `.sql` file of migrations/current/ in
 * the order graphile-migrate joins them (numeric prefix), or migrations/current.sql.
 * Dotfiles and other files are skipped, as graphile-migrate skips them.
 */
export function currentMigrationFiles(migrationsFolder: string): MigrationFile[] {
  const dir = join(migrationsFolder, 'current');
  if (existsSync(dir)) {
    return readdirSync(dir)
      .filter((f) => !f.startsWith('.') && f.endsWith('.sql'))
      .sort((a, b) => parseInt(a, 10) - parseInt(b, 10) || a.localeCompare(b))
      .map((f) => ({ name: `current/${f}`, path: join(dir, f), text: readFileSync(join(dir, f), 'utf8') }));
  }
  const file = join(migrationsFolder, 'current.sql');
  return existsSync(file) ? [{ name: 'current.sql', path: file, text: readFileSync(file, 'utf8') }] : [];
}

/**
 * The SQL a migration file runs: headers stripped, `--!include` lines replaced by the
 * files they name, placeholders (:DATABASE_OWNER, :DATABASE_WORKER, ...) replaced.
 */
export async function compileMigration(settings: Settings, file: Pick<MigrationFile, 'path' | 'text' | 'hash'>): Promise<string> {
  const parsed = await parseSettings(settings);
  // A committed file has its includes compiled already (between `--! Included` lines).
  const withIncludes = file.hash ? file.text : await compileIncludes(parsed, file.text, new Set([file.path]));
  const { body } = parseMigrationText(file.path, withIncludes, false);
  const database = new URL(parsed.connectionString).pathname.slice(1);
  return generatePlaceholderReplacement(parsed, { database: decodeURIComponent(database) })(body);
}

/** True when `sql` holds no statement: only comments and whitespace. */
export function isBlankSql(sql: string): boolean {
  return (
    sql
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/--[^\n]*/g, '')
      .trim() === ''
  );
}

/** Every migration of `settings.migrationsFolder` in the order a dev database gets them: committed, then current. */
export async function compiledMigrations(settings: Settings): Promise<{ name: string; sql: string; noTransaction: boolean }[]> {
  const folder = settings.migrationsFolder ?? 'migrations';
  const files = [...committedMigrations(folder), ...currentMigrationFiles(folder)];
  return Promise.all(
    files.map(async (file) => ({
      name: file.name,
      sql: await compileMigration(settings, file),
      noTransaction: /^--! no-transaction\b/m.test(file.text),
    })),
  );
}
