import { join } from 'node:path';
import pg from 'pg';
import { destroyEmbedded, startEmbedded } from './embedded.js';
import { migrateDatabase, migrateSettings } from './migrate.js';
import { dataRoot } from './paths.js';
import {
  ensureDbUsers,
  generatePasswords,
  grantDatabaseAccess,
  hardenDatabase,
  dbUserNamesFromEnv,
  type DbUserNames,
  type DbUserPasswords,
} from './db-users.js';
import { withDatabase } from './urls.js';

/**
 * A PostgreSQL server we may create roles and databases on: the embedded one, or the
 * server behind an admin `DATABASE_URL`.
 */
export interface DatabaseServer {
  kind: 'embedded' | 'external';
  /** A superuser (or CREATEROLE + CREATEDB) connection to a maintenance database. */
  rootUrl: string;
  dbUsers: DbUserNames;
  dbUserPasswords: DbUserPasswords;
  /** Stops an embedded server (keeps its data unless `destroy`); no-op for external. */
  stop(options?: { destroy?: boolean }): Promise<void>;
}

/** Connection strings for one database, one per database user. */
export interface DatabaseUrls {
  database: string;
  root: string;
  owner: string;
  worker: string;
  app: string;
  api: string;
}

export async function openServer(options: {
  /** Name of the embedded data folder under `root` (ignored with adminUrl). */
  name: string;
  /** The folder that holds the embedded data folder: default .data/ in the checkout. */
  root?: string;
  /** Use this server instead of an embedded one. */
  adminUrl?: string;
  port?: number;
  log?: (line: string) => void;
}): Promise<DatabaseServer> {
  const dbUsers = dbUserNamesFromEnv();
  if (options.adminUrl) {
    // The database users' passwords are set on every provisioning: from the environment when
    // given, otherwise new random ones (printed by `npm start`).
    const generated = generatePasswords();
    return {
      kind: 'external',
      rootUrl: options.adminUrl,
      dbUsers,
      dbUserPasswords: {
        owner: process.env.DATABASE_OWNER_PASSWORD ?? generated.owner,
        worker: process.env.DATABASE_WORKER_PASSWORD ?? generated.worker,
        app: process.env.DATABASE_APP_PASSWORD ?? generated.app,
        api: process.env.DATABASE_API_PASSWORD ?? generated.api,
      },
      stop: async () => {},
    };
  }
  const embedded = await startEmbedded({
    dataDir: join(options.root ?? dataRoot(), options.name),
    port: options.port,
    log: options.log,
  });
  return {
    kind: 'embedded',
    rootUrl: embedded.rootUrl,
    dbUsers,
    dbUserPasswords: embedded.dbUserPasswords,
    stop: (stopOptions) => (stopOptions?.destroy ? destroyEmbedded(embedded) : embedded.stop()),
  };
}

export function databaseUrls(server: DatabaseServer, database: string): DatabaseUrls {
  const { dbUsers, dbUserPasswords: pw } = server;
  return {
    database,
    root: withDatabase(server.rootUrl, database),
    owner: withDatabase(server.rootUrl, database, dbUsers.owner, pw.owner),
    worker: withDatabase(server.rootUrl, database, dbUsers.worker, pw.worker),
    app: withDatabase(server.rootUrl, database, dbUsers.app, pw.app),
    api: withDatabase(server.rootUrl, database, dbUsers.api, pw.api),
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
 * Makes sure the database users exist and `database` exists and is migrated; a database
 * created here is hardened (PUBLIC loses CONNECT and TEMP), an existing one only gets the
 * privileges our database users need (nothing of PUBLIC's or other roles' changes)
 * (committed migrations, then migrations/current/ unless `current: false`). With `fresh`, an
 * existing database of that name is dropped first.
 */
export async function provisionDatabase(
  server: DatabaseServer,
  database: string,
  options: { fresh?: boolean; current?: boolean; quiet?: boolean } = {},
): Promise<DatabaseUrls> {
  let existing = false;
  await withRootClient(server, async (root) => {
    await ensureDbUsers(root, server.dbUsers, server.dbUserPasswords);
    const db = root.escapeIdentifier(database);
    if (options.fresh) await root.query(`drop database if exists ${db} with (force)`);
    const { rowCount } = await root.query('select 1 from pg_database where datname = $1', [database]);
    if (rowCount === 0) {
      await root.query(`create database ${db} owner ${root.escapeIdentifier(server.dbUsers.owner)}`);
      // A database made here is hardened; one that was there is left as it is, but for
      // the privileges our database users need on it.
      await hardenDatabase(root, database, server.dbUsers);
    } else {
      await grantDatabaseAccess(root, database, server.dbUsers);
      existing = true;
    }
  });
  if (existing) {
    // The specification's unqualified names live in schema public (docs/database.md): the
    // owner must create there (it may when it owns the database, as a database made here).
    await withRootClient({ ...server, rootUrl: withDatabase(server.rootUrl, database) }, async (root) => {
      const owner = server.dbUsers.owner;
      const { rows } = await root.query<{ may: boolean }>(
        `select has_schema_privilege($1, 'public', 'CREATE') as may`,
        [owner],
      );
      if (!rows[0]?.may) await root.query(`grant create on schema public to ${root.escapeIdentifier(owner)}`);
    });
  }
  const urls = databaseUrls(server, database);
  const settings = await migrateSettings({
    ownerUrl: urls.owner,
    rootUrl: server.rootUrl,
    dbUsers: server.dbUsers,
    quiet: options.quiet,
  });
  await migrateDatabase(settings, { current: options.current });
  return urls;
}
