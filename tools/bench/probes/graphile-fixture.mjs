// graphile-worker's side of the probes that set it beside ours: a database of its own on
// a statements server (statements-server.mjs), with pg_stat_statements and graphile-worker's
// schema.
import { runMigrations, Logger } from 'graphile-worker';
import pg from 'pg';

/** graphile-worker's log, silenced. */
export const quietLogger = new Logger(() => () => {});

/**
 * Creates the database `name` afresh on `server`, with pg_stat_statements and
 * graphile-worker's migrations; returns its URL (as the superuser) and a one-connection pool.
 */
export async function graphileDatabase(server, name) {
  const admin = new pg.Pool({ connectionString: server.rootUrl, max: 1 });
  admin.on('error', () => {});
  await admin.query(`drop database if exists ${name}`);
  await admin.query(`create database ${name}`);
  await admin.end();
  const u = new URL(server.rootUrl);
  u.pathname = `/${name}`;
  const url = u.toString();
  const root = new pg.Pool({ connectionString: url, max: 1 });
  root.on('error', () => {}); // the server's stop at the end
  await root.query('create extension if not exists pg_stat_statements');
  await runMigrations({ connectionString: url, logger: quietLogger });
  return { url, root };
}
