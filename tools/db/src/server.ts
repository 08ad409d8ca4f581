import { join } from 'node:path';
import pg from 'pg';
import { destroyEmbedded, startEmbedded } from './embedded.js';
import { migrateDatabase, migrateSettings } from './migrate.js';
import { dataRoot } from './paths.js';
import { ensureRoles, generatePasswords, hardenDatabase, roleNamesFromEnv, type RoleNames, type RolePasswords } from './roles.js';
import { withDatabase } from './urls.js';

/**
 * A PostgreSQL server we may create roles and databases on: the embedded one, or the
 * server behind an admin `DATABASE_URL`.
 */
export interface DatabaseServer {
  kind: 'embedded' | 'external';
  /** A superuser (or CREATEROLE + CREATEDB) connection to a maintenance database. */
  rootUrl: string;
  roles: RoleNames;
  rolePasswords: RolePasswords;
  /** Stops an embedded server (keeps its data unless `destroy`); no-op for external. */
  stop(options?: { destroy?: boolean }): Promise<void>;
}

/** Connection strings for one database, one per role. */
export interface DatabaseUrls {
  database: string;
  root: string;
  owner: string;
  worker: string;
  app: string;
  api: string;
}

export async function openServer(options: {
  /** Name of the embedded data folder under .data/ (ignored with adminUrl). */
  name: string;
  /** Use this server instead of an embedded one. */
  adminUrl?: string;
  port?: number;
  log?: (line: string) => void;
}): Promise<DatabaseServer> {
  const roles = roleNamesFromEnv();
  if (options.adminUrl) {
    // The roles' passwords are set on every provisioning: from the environment when
    // given, otherwise new random ones (printed by `npm start`).
    const generated = generatePasswords();
    return {
      kind: 'external',
      rootUrl: options.adminUrl,
      roles,
      rolePasswords: {
        owner: process.env.DATABASE_OWNER_PASSWORD ?? generated.owner,
        worker: process.env.DATABASE_WORKER_PASSWORD ?? generated.worker,
        app: process.env.DATABASE_APP_PASSWORD ?? generated.app,
        api: process.env.DATABASE_API_PASSWORD ?? generated.api,
      },
      stop: async () => {},
    };
  }
  const embedded = await startEmbedded({
    dataDir: join(dataRoot(), options.name),
    port: options.port,
    log: options.log,
  });
  return {
    kind: 'embedded',
    rootUrl: embedded.rootUrl,
    roles,
    rolePasswords: embedded.rolePasswords,
    stop: (stopOptions) => (stopOptions?.destroy ? destroyEmbedded(embedded) : embedded.stop()),
  };
}

export function databaseUrls(server: DatabaseServer, database: string): DatabaseUrls {
  const { roles, rolePasswords: pw } = server;
  return {
    database,
    root: withDatabase(server.rootUrl, database),
    owner: withDatabase(server.rootUrl, database, roles.owner, pw.owner),
    worker: withDatabase(server.rootUrl, database, roles.worker, pw.worker),
    app: withDatabase(server.rootUrl, database, roles.app, pw.app),
    api: withDatabase(server.rootUrl, database, roles.api, pw.api),
  };
}

export async function withRootClient<T>(server: DatabaseServer, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: server.rootUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * Makes sure the roles exist and `database` exists, is hardened and is migrated
 * (committed migrations, then migrations/current/ unless `current: false`). With `fresh`, an
 * existing database of that name is dropped first.
 */
export async function provisionDatabase(
  server: DatabaseServer,
  database: string,
  options: { fresh?: boolean; current?: boolean; quiet?: boolean } = {},
): Promise<DatabaseUrls> {
  await withRootClient(server, async (root) => {
    await ensureRoles(root, server.roles, server.rolePasswords);
    const db = root.escapeIdentifier(database);
    if (options.fresh) await root.query(`drop database if exists ${db} with (force)`);
    const { rowCount } = await root.query('select 1 from pg_database where datname = $1', [database]);
    if (rowCount === 0) {
      await root.query(`create database ${db} owner ${root.escapeIdentifier(server.roles.owner)}`);
    }
    await hardenDatabase(root, database, server.roles);
  });
  const urls = databaseUrls(server, database);
  const settings = await migrateSettings({
    ownerUrl: urls.owner,
    rootUrl: server.rootUrl,
    roles: server.roles,
    quiet: options.quiet,
  });
  await migrateDatabase(settings, { current: options.current });
  return urls;
}
