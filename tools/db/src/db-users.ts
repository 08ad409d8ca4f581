import { randomBytes } from 'node:crypto';
import pg from 'pg';

/**
 * The database users (PostgreSQL roles with LOGIN). They are cluster-wide, so they are created here, outside
 * migrations, and migrations refer to them through graphile-migrate placeholders.
 *   owner   runs migrations and owns every object
 *   worker  worker_service_user: no table privileges, EXECUTE on what the worker calls
 *   app     applications: may enqueue and kick off business processes
 *   api     the admin REST API: read-only views plus the few admin functions it needs
 */
export interface DbUserNames {
  owner: string;
  worker: string;
  app: string;
  api: string;
}

export type DbUserPasswords = Record<keyof DbUserNames, string>;

const ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export function dbUserNamesFromEnv(env: NodeJS.ProcessEnv = process.env): DbUserNames {
  const names: DbUserNames = {
    owner: env.DATABASE_OWNER ?? 'queue_owner',
    worker: env.DATABASE_WORKER ?? 'worker_service_user',
    app: env.DATABASE_APP ?? 'queue_app_user',
    api: env.DATABASE_API ?? 'queue_api_user',
  };
  for (const key of Object.keys(names) as (keyof DbUserNames)[]) {
    const name = names[key];
    if (!ROLE_NAME.test(name)) {
      throw new Error(`database user name for ${key} must match ${ROLE_NAME}, got ${JSON.stringify(name)}`);
    }
  }
  return names;
}

export function generatePasswords(): DbUserPasswords {
  const make = () => randomBytes(18).toString('base64url');
  return { owner: make(), worker: make(), app: make(), api: make() };
}

/** The placeholders the migrations use, for graphile-migrate settings. */
export function placeholders(dbUsers: DbUserNames): Record<string, string> {
  return { ':DATABASE_WORKER': dbUsers.worker, ':DATABASE_APP': dbUsers.app, ':DATABASE_API': dbUsers.api };
}

/** Creates the database users if missing (login, no other attributes) and sets their passwords. */
export async function ensureDbUsers(root: pg.Client, dbUsers: DbUserNames, passwords: DbUserPasswords): Promise<void> {
  // Two callers may provision at once (test workers): serialise on an advisory lock.
  await root.query('select pg_advisory_lock(hashtext($1))', ['queue-roles']);
  try {
    for (const key of Object.keys(dbUsers) as (keyof DbUserNames)[]) {
      const name = root.escapeIdentifier(dbUsers[key]);
      const password = root.escapeLiteral(passwords[key]);
      const { rowCount } = await root.query('select 1 from pg_roles where rolname = $1', [dbUsers[key]]);
      if (rowCount === 0) {
        await root.query(`create role ${name} login password ${password}`);
      } else {
        await root.query(`alter role ${name} login password ${password}`);
      }
    }
    await allowAutovacuumCancel(root, dbUsers.owner);
  } finally {
    await root.query('select pg_advisory_unlock(hashtext($1))', ['queue-roles']);
  }
}

/**
 * Lets the owner cancel autovacuum workers (pg_signal_autovacuum_worker, PostgreSQL 18):
 * history maintenance cancels an autovacuum that holds a table it must lock
 * (queues.cancel_autovacuum), as PostgreSQL does for a lock that waited deadlock_timeout.
 * Only a superuser, or a role that may grant that role, can give it; otherwise (or before
 * PostgreSQL 18) the owner goes without, and maintenance waits for autovacuum to end.
 */
async function allowAutovacuumCancel(root: pg.Client, owner: string): Promise<void> {
  const { rows } = await root.query<{ may: boolean }>(
    // A CASE, so that pg_has_role is never asked about a role that does not exist.
    `select case when exists (select 1 from pg_roles where rolname = 'pg_signal_autovacuum_worker')
                 then (select rolsuper from pg_roles where rolname = current_user)
                      or pg_has_role(current_user, 'pg_signal_autovacuum_worker', 'usage with admin option')
                 else false end as may`,
  );
  if (rows[0]?.may) await root.query(`grant pg_signal_autovacuum_worker to ${root.escapeIdentifier(owner)}`);
}

/**
 * Database-level hardening, applied to every database we create (CREATE DATABASE does
 * not copy a template's ACL): PUBLIC loses CONNECT and TEMP, our database users get CONNECT.
 */
export async function hardenDatabase(root: pg.Client, database: string, dbUsers: DbUserNames): Promise<void> {
  await root.query(`revoke all on database ${root.escapeIdentifier(database)} from public`);
  await grantDatabaseAccess(root, database, dbUsers);
}

/**
 * What our database users need on a database, and nothing else: the owner may create
 * (schemas), connect and use temporary tables, the others may connect. PUBLIC's privileges
 * and other roles' are left as they are.
 */
export async function grantDatabaseAccess(root: pg.Client, database: string, dbUsers: DbUserNames): Promise<void> {
  const db = root.escapeIdentifier(database);
  const owner = root.escapeIdentifier(dbUsers.owner);
  await root.query(`grant all on database ${db} to ${owner}`);
  await root.query(
    `grant connect on database ${db} to ${owner}, ${[dbUsers.worker, dbUsers.app, dbUsers.api].map((r) => root.escapeIdentifier(r)).join(', ')}`,
  );
}
