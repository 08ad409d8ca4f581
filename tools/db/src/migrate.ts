import { join } from 'node:path';
import { Logger } from '@graphile/logger';
import { readFileSync } from 'node:fs';
import JSON5 from 'json5';
import { migrate, watch, type Settings } from 'graphile-migrate';
// Not re-exported by the package index; see migrateDatabase.
import { clearAllPools } from 'graphile-migrate/dist/pgReal.js';
import { repoRoot } from './paths.js';
import { placeholders, type RoleNames } from './roles.js';

/**
 * graphile-migrate settings from the repository's .gmrc, with the connections and role
 * placeholders given here instead of read from the environment.
 */
export async function migrateSettings(options: {
  ownerUrl: string;
  rootUrl: string;
  shadowUrl?: string;
  roles: RoleNames;
  quiet?: boolean;
}): Promise<Settings> {
  const root = repoRoot();
  const file = JSON5.parse(readFileSync(join(root, '.gmrc'), 'utf8')) as Settings;
  const settings: Settings = {
    ...file,
    connectionString: options.ownerUrl,
    rootConnectionString: options.rootUrl,
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

/** Applies the committed migrations, then (unless `current` is false) current.sql once. */
export async function migrateDatabase(settings: Settings, options: { current?: boolean } = {}): Promise<void> {
  try {
    await migrate(settings);
    if (options.current !== false) await watch(settings, true);
  } finally {
    // graphile-migrate keeps each pool 200 ms after use, and exits the process if one of
    // its idle connections errors (say, the server stops): release them now.
    clearAllPools();
  }
}
