import { join } from 'node:path';
import { Logger } from '@graphile/logger';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import JSON5 from 'json5';
import { migrate, watch, type Settings } from 'graphile-migrate';
// Not re-exported by the package index; see migrateDatabase.
import { clearAllPools } from 'graphile-migrate/dist/pgReal.js';
import { replaceLegacyHistory } from './legacy.js';
import { repoRoot } from './paths.js';
import { placeholders, type RoleNames } from './roles.js';

/**
 * graphile-migrate settings from the repository's .gmrc, with the connections and role
 * placeholders given here instead of read from the environment.
 */
export async function migrateSettings(options: {
  ownerUrl: string;
  /** A superuser connection to another database; graphile-migrate needs it only for reset and commit. */
  rootUrl?: string;
  shadowUrl?: string;
  roles: RoleNames;
  quiet?: boolean;
}): Promise<Settings> {
  const root = repoRoot();
  const file = JSON5.parse(readFileSync(join(root, '.gmrc'), 'utf8')) as Settings;
  const settings: Settings = {
    ...file,
    connectionString: options.ownerUrl,
    ...(options.rootUrl ? { rootConnectionString: options.rootUrl } : {}),
    migrationsFolder: join(root, 'migrations'),
    databaseOwner: options.roles.owner,
    placeholders: { ...file.placeholders, ...placeholders(options.roles) },
  };
  if (options.shadowUrl) settings.shadowConnectionString = options.shadowUrl;
  if (options.quiet) settings.logger = quietLogger();
  return settings;
}

function quietLogger(): Logger {
  return new Logger(() => (level, message) => {
    if (level === 'error') process.stderr.write(`${message}\n`);
  });
}

/**
 * Applies the committed migrations, then (unless `current` is false) the current
 * migration (migrations/current/) once. A database migrated with the history the
 * baseline replaced is moved onto the baseline first (see legacy.ts).
 */
export async function migrateDatabase(
  settings: Settings,
  options: { current?: boolean; log?: (line: string) => void } = {},
): Promise<void> {
  try {
    await replaceLegacyHistory(settings, options.log);
    await migrate(settings);
    if (options.current !== false) {
      // Without migrations/current/ (git keeps no empty folder) graphile-migrate would
      // write migrations/current.sql, which cannot coexist with current/ files added later.
      const folder = settings.migrationsFolder ?? 'migrations';
      if (!existsSync(join(folder, 'current')) && !existsSync(join(folder, 'current.sql'))) {
        mkdirSync(join(folder, 'current'));
      }
      await watch(settings, true);
    }
  } finally {
    // graphile-migrate keeps each pool 200 ms after use, and exits the process if one of
    // its idle connections errors (say, the server stops): release them now.
    clearAllPools();
  }
}
