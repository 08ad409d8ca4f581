/**
 * @org/queue-schema: the queue's schema (the repository's committed migrations) and the
 * migrator that applies it to a database of the app's own, for an app that installs the
 * queue as packages rather than running this repository (docs/installing.md).
 *
 * What a migration does to the database, and nothing else:
 * - creates its own schemas (queues, internal, admin, schedules, api, comms, files,
 *   accounts, menus, learning), owned by the role it connects as, and graphile-migrate's
 *   bookkeeping schema `graphile_migrate`;
 * - creates the specification's unqualified names in schema `public`
 *   (`v_worker_capacity`, `worker_tasks`, `recover_stale_tasks`, `generate_resync_tasks`),
 *   so that role needs CREATE on `public`;
 * - grants EXECUTE on the queue's functions to the three roles the app names (worker, app,
 *   api), which must exist;
 * - revokes EXECUTE from PUBLIC on the functions that role creates from then on, in this
 *   database (`alter default privileges`): hence a role of the queue's own.
 * The database's own privileges (PUBLIC's CONNECT and TEMP), other roles and the app's
 * tables are never touched.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Logger, migrate, type Settings } from 'graphile-migrate';
// Not re-exported by the package index: graphile-migrate keeps each pool 200 ms after use,
// and exits the process if one of its idle connections errors.
import { clearAllPools } from 'graphile-migrate/dist/pgReal.js';

/** The roles the queue's grants go to: roles of the app's own, named by the app. */
export interface QueueRoles {
  /** Runs tasks: EXECUTE on claim, complete, fail and the function runner; no table privileges. */
  worker: string;
  /** Enqueues: EXECUTE on queues.enqueue, enqueue_many, enqueue_and_commit and the kickoffs. */
  app: string;
  /** Operates (the REST API, the `queue` command line): EXECUTE on the admin functions. */
  api: string;
}

export interface MigrateQueueOptions {
  /** A postgres:// URL of the role that owns the queue's objects (a role of its own). */
  connectionString: string;
  roles: QueueRoles;
  /** Progress lines (graphile-migrate's); default none. */
  log?: (line: string) => void;
}

/** The folder holding `committed/`, the migrations this package applies. */
export const migrationsFolder: string = fileURLToPath(new URL('../migrations', import.meta.url));

const ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export class QueueSchemaError extends Error {
  override name = 'QueueSchemaError';
}

/** The role names, checked: placeholders are put into the SQL as they are. */
export function checkRoles(roles: Partial<QueueRoles>): QueueRoles {
  const problems: string[] = [];
  for (const key of ['worker', 'app', 'api'] as const) {
    const name = roles[key];
    if (name === undefined || name === '') problems.push(`the ${key} role is not named`);
    else if (!ROLE_NAME.test(name))
      problems.push(`the ${key} role must match ${String(ROLE_NAME)}, got ${JSON.stringify(name)}`);
  }
  if (problems.length > 0) throw new QueueSchemaError(problems.join('; '));
  return roles as QueueRoles;
}

/** Applies the migrations not yet applied (none when the database is up to date). */
export async function migrateQueue(options: MigrateQueueOptions): Promise<void> {
  const roles = checkRoles(options.roles);
  if (!existsSync(`${migrationsFolder}/committed`)) {
    throw new QueueSchemaError(
      `no migrations at ${migrationsFolder}/committed (a build of @org/queue-schema copies them)`,
    );
  }
  const owner = decodeURIComponent(new URL(options.connectionString).username);
  const log = options.log;
  const settings: Settings = {
    connectionString: options.connectionString,
    migrationsFolder,
    databaseOwner: owner,
    placeholders: { ':DATABASE_WORKER': roles.worker, ':DATABASE_APP': roles.app, ':DATABASE_API': roles.api },
    logger: quietLogger(log),
  };
  try {
    await migrate(settings);
  } finally {
    clearAllPools();
  }
}

function quietLogger(log: ((line: string) => void) | undefined): Logger {
  return new Logger(() => (_level, message) => log?.(message));
}
