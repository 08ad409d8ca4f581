/**
 * @org/queue-schema: the queue's schema and the migrator that applies it to a database of
 * the app's own, for an app that installs the queue as packages rather than running this
 * repository (docs/installing.md, docs/design/migration-parts.md).
 *
 * The schema comes in parts: the core (schemas queues, internal, admin, schedules, api) and
 * the optional business domains (comms, files, accounts, menus, learning, and `public`, the
 * specification's unqualified names). `migrations/parts/` (written by the build, parts.ts)
 * holds the repository's committed history with each statement marked with its part; a
 * migration applies, for each committed migration in order, the statements of the parts
 * chosen, and records each (part, migration) in `queue_migrate.applied`, a bookkeeping
 * schema of the queue's own.
 *
 * What a migration does to the database, and nothing else:
 * - creates the chosen parts' schemas and `queue_migrate`, owned by the role it connects as
 *   (which needs CREATE on the database, and CREATE on `public` only for the part `public`);
 * - grants EXECUTE on the queue's functions to the three roles the app names (worker, app,
 *   api), which must exist;
 * - revokes EXECUTE from PUBLIC on the functions that role creates from then on, in this
 *   database (`alter default privileges`): hence a role of the queue's own.
 * The database's own privileges (PUBLIC's CONNECT and TEMP), other roles and the app's
 * tables are never touched.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

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
  /**
   * Business domains to add besides the core (DOMAINS); the ones they depend on come with
   * them. Domains installed before are kept up to date whether named again or not.
   */
  domains?: readonly string[];
  /** Progress lines; default none. */
  log?: (line: string) => void;
  /**
   * Parted migrations applied after the package's (name and text as in migrations/parts/):
   * the repository's tests use it to install what the next release will ship.
   */
  extraMigrations?: readonly { name: string; text: string }[];
}

/**
 * graphile-migrate's placeholders, filled in: the three roles as they are (checked to be
 * plain identifiers), the owner and the database quoted as identifiers (their names are
 * not checked: a database may be called `my-app`).
 */
export function fillPlaceholders(
  sql: string,
  names: { worker: string; app: string; api: string; owner: string; database: string },
): string {
  const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;
  const placeholders: Record<string, string> = {
    ':DATABASE_WORKER': names.worker,
    ':DATABASE_APP': names.app,
    ':DATABASE_API': names.api,
    ':DATABASE_OWNER': quoted(names.owner),
    ':DATABASE_NAME': quoted(names.database),
  };
  return sql.replace(/:DATABASE_(WORKER|APP|API|OWNER|NAME)\b/g, (word) => placeholders[word] ?? word);
}

/** The folder holding `parts/`, the migrations this package applies. */
export const migrationsFolder: string = fileURLToPath(new URL('../migrations', import.meta.url));

/** The bookkeeping schema: which migration of which part is applied. */
export const BOOKKEEPING_SCHEMA = 'queue_migrate';

/** The business domains a migration may add, in the order they are applied. */
export const DOMAINS = ['comms', 'files', 'accounts', 'menus', 'learning', 'public'] as const;

const ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
/** A session advisory lock key: one migration of the queue at a time per database. */
const LOCK_KEY = 7_302_513_921;

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

interface Manifest {
  parts: string[];
  dependencies: Record<string, string[]>;
  migrations: string[];
}

function readManifest(): Manifest {
  const path = `${migrationsFolder}/parts/parts.json`;
  if (!existsSync(path))
    throw new QueueSchemaError(`no migrations at ${migrationsFolder}/parts (a build of @org/queue-schema copies them)`);
  return JSON.parse(readFileSync(path, 'utf8')) as Manifest;
}

/**
 * The domains named plus the ones they depend on, in apply order; a name that is not a
 * domain is a QueueSchemaError.
 */
export function resolveDomains(domains: readonly string[], manifest: Manifest = readManifest()): string[] {
  const known = manifest.parts.filter((p) => p !== 'core');
  const unknown = domains.filter((d) => !known.includes(d));
  if (unknown.length > 0)
    throw new QueueSchemaError(
      `unknown domain${unknown.length > 1 ? 's' : ''} ${unknown.map((d) => JSON.stringify(d)).join(', ')}: the domains are ${known.join(', ')}`,
    );
  const chosen = new Set<string>();
  const add = (d: string) => {
    if (chosen.has(d)) return;
    chosen.add(d);
    for (const dep of manifest.dependencies[d] ?? []) add(dep);
  };
  domains.forEach(add);
  return known.filter((d) => chosen.has(d));
}

/** One committed migration cut into its parts' statements, in order. */
export function readPartedMigration(text: string): { part: string; sql: string }[] {
  const chunks: { part: string; sql: string }[] = [];
  const marker = /^--! part: ([a-z_]+)\n/gm;
  let match: RegExpExecArray | null;
  let last: { part: string; start: number } | undefined;
  while ((match = marker.exec(text)) !== null) {
    if (last) chunks.push({ part: last.part, sql: text.slice(last.start, match.index) });
    last = { part: match[1]!, start: match.index + match[0].length };
  }
  if (last) chunks.push({ part: last.part, sql: text.slice(last.start) });
  return chunks;
}

function hashOf(sqls: string[]): string {
  const h = createHash('sha1');
  for (const sql of sqls) h.update(sql);
  return `sha1:${h.digest('hex')}`;
}

/**
 * Applies the migrations not yet applied to the core, the domains named (and those they
 * depend on) and the domains installed before; nothing when all are up to date.
 */
export async function migrateQueue(options: MigrateQueueOptions): Promise<void> {
  const roles = checkRoles(options.roles);
  const manifest = readManifest();
  const named = resolveDomains(options.domains ?? [], manifest);
  const log = options.log ?? (() => {});
  const client = new pg.Client({ connectionString: options.connectionString });
  await client.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [LOCK_KEY]);
    const { rows: foreign } = await client.query<{ foreign: boolean }>(
      `select to_regclass('queues.task') is not null and to_regclass('${BOOKKEEPING_SCHEMA}.applied') is null as foreign`,
    );
    if (foreign[0]!.foreign)
      throw new QueueSchemaError(
        `this database has the queue without ${BOOKKEEPING_SCHEMA}: it was migrated in one history (the repository's ` +
          '`npm run migrate`, graphile-migrate), which keeps migrating it; queue-schema migrate applies only to ' +
          'databases it installed',
      );
    await client.query(`create schema if not exists ${BOOKKEEPING_SCHEMA}`);
    await client.query(
      `create table if not exists ${BOOKKEEPING_SCHEMA}.applied (
         part text not null,
         migration text not null,
         hash text not null,
         applied_at timestamptz not null default now(),
         primary key (part, migration))`,
    );
    const { rows: applied } = await client.query<{ part: string; migration: string; hash: string }>(
      `select part, migration, hash from ${BOOKKEEPING_SCHEMA}.applied`,
    );
    const done = new Map(applied.map((r) => [`${r.part}/${r.migration}`, r.hash]));
    const installed = new Set(applied.map((r) => r.part));
    const extra = named.filter((d) => !installed.has(d) && !(options.domains ?? []).includes(d));
    if (extra.length > 0) log(`adding ${extra.join(', ')}: the domains named depend on them`);
    const parts = ['core', ...manifest.parts.filter((p) => p !== 'core' && (named.includes(p) || installed.has(p)))];
    const { rows: who } = await client.query<{ owner: string; db: string }>(
      'select current_user as owner, current_database() as db',
    );
    const fill = (sql: string) => fillPlaceholders(sql, { ...roles, owner: who[0]!.owner, database: who[0]!.db });
    let count = 0;
    const history = [
      ...manifest.migrations.map((name) => ({
        name,
        text: () => readFileSync(`${migrationsFolder}/parts/${name}`, 'utf8'),
      })),
      ...(options.extraMigrations ?? []).map((m) => ({ name: m.name, text: () => m.text })),
    ];
    for (const { name: migration, text } of history) {
      const chunks = readPartedMigration(text());
      const due: string[] = [];
      for (const part of parts) {
        const hash = hashOf(chunks.filter((c) => c.part === part).map((c) => c.sql));
        const had = done.get(`${part}/${migration}`);
        if (had === undefined) due.push(part);
        else if (had !== hash)
          throw new Error(`${part} ${migration} was applied with ${had}, but the package's is ${hash}`);
      }
      if (due.length === 0) continue;
      await client.query('begin');
      try {
        // As pg_restore does: a function's body is checked when it runs, not when it is
        // created, since a part's old definitions may name what only a later one creates.
        await client.query('set local check_function_bodies = off');
        for (const chunk of chunks) if (due.includes(chunk.part)) await client.query(fill(chunk.sql));
        for (const part of due) {
          const hash = hashOf(chunks.filter((c) => c.part === part).map((c) => c.sql));
          await client.query(`insert into ${BOOKKEEPING_SCHEMA}.applied (part, migration, hash) values ($1, $2, $3)`, [
            part,
            migration,
            hash,
          ]);
        }
        await client.query('commit');
      } catch (error) {
        await client.query('rollback').catch(() => {});
        const message = error instanceof Error ? error.message : String(error);
        throw new Error(`migration ${migration} (${due.join(', ')}): ${message}`, { cause: error });
      }
      count++;
      log(`applied ${migration} (${due.join(', ')})`);
    }
    log(count === 0 ? `up to date (${parts.join(', ')})` : `migrated ${parts.join(', ')}`);
  } finally {
    await client.end();
  }
}
