// The history cut into parts (docs/design/migration-parts.md): the build of
// @org/queue-schema cuts migrations/committed/ into parts, losing no statement; the core installs alone into a database
// where its owner may only create schemas, a domain is added later, every domain installed
// through the parts builds the same schema as the committed history, and a name that is
// not a domain is refused.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { fillPlaceholders, migrateQueue, QueueSchemaError, readPartedMigration } from '@org/queue-schema';
import { createTestDatabase } from '@org/testing';
import { committedFolder, partFiles, splitStatements } from '@org/queue-schema/parts';
import { partedCurrent } from '../src/parts-current.js';
import { dumpSchema, unifiedDiff } from '../src/schema-dump.js';
import { withDatabase } from '../src/urls.js';

const ctx = inject('queueTestServer');
const suffix = randomBytes(4).toString('hex');
const queueOwner = `queue_parts_${suffix}`;
const password = randomBytes(12).toString('hex');
const DOMAIN_SCHEMAS = ['comms', 'files', 'accounts', 'menus', 'learning'];
const admin = new pg.Client({ connectionString: ctx.rootUrl });
const databases: string[] = [];
const tmp = mkdtempSync(join(tmpdir(), 'queue-parts-'));

/** A new database owned by root; the queue's owner may create schemas in it, nothing more. */
async function newDatabase(): Promise<{ name: string; url: string; root: string }> {
  const name = `${ctx.prefix}parts_${randomBytes(4).toString('hex')}`;
  await admin.query(`create database ${name}`);
  databases.push(name);
  await admin.query(`grant create, connect on database ${name} to ${queueOwner}`);
  return { name, url: withDatabase(ctx.rootUrl, name, queueOwner, password), root: withDatabase(ctx.rootUrl, name) };
}

async function query<R extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<R[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<R>(sql, params)).rows;
  } finally {
    await c.end();
  }
}

const roles = { worker: ctx.dbUsers.worker, app: ctx.dbUsers.app, api: ctx.dbUsers.api };
// What the next release ships: the package's parts and migrations/current/ parted the same way.
const next = partedCurrent();
const extraMigrations = next ? [next] : [];
const migrateNext = (options: Omit<Parameters<typeof migrateQueue>[0], 'roles'>) =>
  migrateQueue({ roles, extraMigrations, ...options });
const dbUsers = { ...ctx.dbUsers, owner: queueOwner };

/** Every table of the queue's schemas with its row count (the seed rows the migrations insert). */
const rowCounts = (url: string) =>
  query<{ name: string; count: string }>(
    url,
    `select format('%I.%I', n.nspname, c.relname) as name,
            (xpath('/row/c/text()', query_to_xml(format('select count(*) as c from %I.%I', n.nspname, c.relname), false, true, '')))[1]::text as count
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind in ('r', 'p') and not c.relispartition
        and n.nspname not in ('pg_catalog', 'information_schema', 'graphile_migrate', 'queue_migrate')
        and n.nspname not like 'pg\\_%'
      order by 1`,
  );

beforeAll(async () => {
  await admin.connect();
  await admin.query(`create role ${queueOwner} login password '${password}'`);
});

afterAll(async () => {
  for (const name of databases) await admin.query(`drop database if exists ${name} with (force)`);
  await admin.query(`drop role if exists ${queueOwner}`);
  await admin.end();
  rmSync(tmp, { recursive: true, force: true });
});

describe('the parted history', () => {
  it('holds every statement of the history, in order, each once', () => {
    const files = partFiles();
    const manifest = JSON.parse(files.get('parts.json')!) as { migrations: string[] };
    // The package's build wrote the same files.
    const built = fileURLToPath(new URL('../../../packages/queue-schema/migrations/parts/', import.meta.url));
    for (const [name, text] of files) expect(readFileSync(join(built, name), 'utf8'), name).toBe(text);
    for (const name of manifest.migrations) {
      const source = readFileSync(
        join(
          committedFolder(),
          files
            .get(name)!
            .split('\n')[0]
            .match(/committed\/(\S+\.sql)/)![1],
        ),
        'utf8',
      );
      const body = source.replace(/^(--! (Previous|Hash|Message|AllowInvalidHash):.*\n)*/, '');
      const chunks = readPartedMigration(files.get(name)!.replace(/^-- Generated[^\n]*\n/, ''));
      expect(chunks.map((c) => c.sql).join(''), name).toBe(body.endsWith('\n') ? body : `${body}\n`);
    }
  });

  it('fills the placeholders: the owner and the database quoted as identifiers, whatever their names', () => {
    const names = {
      worker: 'shop_worker',
      app: 'shop_app',
      api: 'shop_ops',
      owner: 'Queue Owner',
      database: 'my-app"; drop table x; --',
    };
    expect(
      fillPlaceholders(
        'grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP, :DATABASE_API; alter database :DATABASE_NAME owner to :DATABASE_OWNER;',
        names,
      ),
    ).toBe(
      'grant usage on schema queues to shop_worker, shop_app, shop_ops; alter database "my-app""; drop table x; --" owner to "Queue Owner";',
    );
  });

  it('splits statements at top-level semicolons only', () => {
    expect(
      splitStatements(
        "select 1; -- a; b\ncreate function f() returns text language sql as $x$ select 'a;b' $x$;\nselect E'\\';'; select \"a;\";",
      ),
    ).toEqual([
      'select 1; -- a; b\n',
      "create function f() returns text language sql as $x$ select 'a;b' $x$;\n",
      "select E'\\';';",
      ' select "a;";',
    ]);
  });
});

describe('queue-schema migrate, by parts', () => {
  it('installs the core alone, adds a domain later, and does nothing the second time', async () => {
    const db = await newDatabase();
    const lines: string[] = [];
    // This version's parts, then the next release's (migrations/current/): an upgrade of a
    // core-only database applies the core's statements of the new migration only.
    await migrateQueue({ connectionString: db.url, roles });
    await migrateNext({ connectionString: db.url, log: (l) => lines.push(l) });
    if (next) expect(lines).toEqual([`applied ${next.name} (core)`, 'migrated core']);
    const schemas = (url: string) =>
      query<{ nspname: string }>(
        url,
        `select nspname from pg_namespace where nspname not like 'pg\\_%' and nspname <> 'information_schema' order by 1`,
      ).then((r) => r.map((x) => x.nspname));
    expect(await schemas(db.root)).toEqual([
      'admin',
      'api',
      'internal',
      'public',
      'queue_migrate',
      'queues',
      'schedules',
    ]);
    // Nothing in public: no relation, function, type or operator.
    const inPublic = `select (select count(*) from pg_class where relnamespace = 'public'::regnamespace)
                           + (select count(*) from pg_proc where pronamespace = 'public'::regnamespace)
                           + (select count(*) from pg_type where typnamespace = 'public'::regnamespace) as n`;
    expect(await query(db.root, inPublic)).toEqual([{ n: '0' }]);
    // The core's rows name no domain: no runnable function or channel process of one.
    expect(
      await query(
        db.root,
        `select (select count(*) from internal.runnable_function where function_schema = any($1))
              + (select count(*) from internal.channel_process where process_schema = any($1)) as n`,
        [DOMAIN_SCHEMAS],
      ),
    ).toEqual([{ n: '0' }]);

    // Every SQL function of the core resolves with the core alone (made again with its body
    // checked, then rolled back); views were checked when made.
    const root = new pg.Client({ connectionString: db.root });
    await root.connect();
    const unresolved: string[] = [];
    try {
      const { rows: functions } = await root.query<{ name: string; def: string }>(
        `select p.oid::regprocedure::text as name, pg_get_functiondef(p.oid) as def
           from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname in ('queues', 'internal', 'admin', 'schedules', 'api')
            and p.prolang = (select oid from pg_language where lanname = 'sql') and p.prokind = 'f'
          order by 1`,
      );
      expect(functions.length).toBeGreaterThan(50);
      for (const f of functions) {
        await root.query('begin');
        try {
          await root.query('set local check_function_bodies = on');
          await root.query(f.def);
        } catch (error) {
          unresolved.push(`${f.name}: ${(error as Error).message}`);
        } finally {
          await root.query('rollback');
        }
      }
    } finally {
      await root.end();
    }
    expect(unresolved).toEqual([]);

    // The process view knows no process of a domain not installed.
    expect(await query(db.root, 'select process from admin.list_processes()')).toEqual([]);
    expect(
      await query(db.root, `select admin.list_process_roots('send_email')`).catch((e: { code: string }) => e.code),
    ).toBe('22023');

    // Again: nothing to apply.
    const applied = await query(db.root, 'select part, migration, hash from queue_migrate.applied order by 1, 2');
    lines.length = 0;
    await migrateNext({ connectionString: db.url, log: (l) => lines.push(l) });
    expect(lines).toEqual(['up to date (core)']);
    expect(await query(db.root, 'select part, migration, hash from queue_migrate.applied order by 1, 2')).toEqual(
      applied,
    );

    // A domain later: comms, with its grants.
    await migrateNext({ connectionString: db.url, domains: ['comms'] });
    expect(await schemas(db.root)).toContain('comms');
    expect(await schemas(db.root)).not.toContain('files');
    const sendEmail = 'comms.send_email(text, text, text, text, text, text, timestamptz, text)';
    expect(
      await query(
        db.root,
        `select has_function_privilege($1, $3::regprocedure, 'execute') as app,
                has_function_privilege('public', $3::regprocedure, 'execute') as public,
                has_schema_privilege($2, 'comms', 'usage') as worker_usage`,
        [roles.app, roles.worker, sendEmail],
      ),
    ).toEqual([{ app: true, public: false, worker_usage: true }]);
    expect(await query(db.root, 'select process from admin.list_processes()')).toEqual([
      { process: 'send_email' },
      { process: 'send_sms' },
    ]);
    // Still nothing in public; and comms is kept up to date without being named again.
    expect(await query(db.root, inPublic)).toEqual([{ n: '0' }]);
    lines.length = 0;
    await migrateNext({ connectionString: db.url, log: (l) => lines.push(l) });
    expect(lines).toEqual(['up to date (core, comms)']);
  });

  it("installs every domain at the first migration with this version's parts alone", async () => {
    const db = await newDatabase();
    await query(db.root, `grant create on schema public to ${queueOwner}`);
    await migrateQueue({ connectionString: db.url, roles, domains: ['comms', 'accounts', 'menus', 'public'] });
    expect(
      await query(db.root, `select array_agg(distinct part order by part) as parts from queue_migrate.applied`),
    ).toEqual([{ parts: ['accounts', 'comms', 'core', 'files', 'learning', 'menus', 'public'] }]);
    expect(
      await query(db.root, `select count(*)::int as n from pg_namespace where nspname = any($1)`, [
        [...DOMAIN_SCHEMAS],
      ]),
    ).toEqual([{ n: DOMAIN_SCHEMAS.length }]);
  });

  it('refuses a name that is not a domain, before touching the database', async () => {
    const err = await migrateQueue({
      connectionString: 'postgres://nobody@127.0.0.1:1/none',
      roles,
      domains: ['comms', 'billing'],
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QueueSchemaError);
    expect((err as Error).message).toBe(
      'unknown domain "billing": the domains are comms, files, accounts, menus, learning, public',
    );
  });

  it('refuses a database migrated in one history (graphile-migrate), changing nothing', async () => {
    const history = await createTestDatabase();
    try {
      const err = await migrateQueue({ connectionString: history.url('owner'), roles }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(QueueSchemaError);
      expect((err as Error).message).toMatch(
        /^this database has the queue without queue_migrate: it was migrated in one history/,
      );
      expect(await query(history.url('root'), `select to_regnamespace('queue_migrate') as bookkeeping`)).toEqual([
        { bookkeeping: null },
      ]);
    } finally {
      await history.drop();
    }
  });

  it('with every domain, added one at a time, builds what the history builds', async () => {
    // The history through graphile-migrate, as this repository migrates: the test template.
    const history = await createTestDatabase();
    try {
      const other = await newDatabase();
      await query(other.root, `grant create on schema public to ${queueOwner}`);
      // The parts: the core, then the domains one at a time as an app adds them.
      await migrateNext({ connectionString: other.url });
      await migrateNext({ connectionString: other.url, domains: ['menus'] });
      await migrateNext({ connectionString: other.url, domains: ['learning', 'comms'] });
      await migrateNext({ connectionString: other.url, domains: ['public'] });
      await query(other.root, `revoke create on schema public from ${queueOwner}`);
      const dump = async (url: string, users: typeof dbUsers) => {
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        try {
          return await dumpSchema(c, users);
        } finally {
          await c.end();
        }
      };
      const [ours, theirs] = [await dump(other.root, dbUsers), await dump(history.url('root'), ctx.dbUsers)];
      expect(unifiedDiff(theirs, ours, ['the history', 'the parts'])).toBe('');
      // As the test template (testing/src/global-setup.ts): the history maintenance schedule off.
      await query(
        other.url,
        `select schedules.append_schedule_version(now(), v.schedule_id, v.cron, v.task_type, v.payload,
                                                  v.priority, v.missed_run_policy, false)
           from schedules.schedule s, schedules.current_version(s.schedule_id) v
          where s.name = 'queue_history_maintenance'`,
      );
      expect(await rowCounts(other.root)).toEqual(await rowCounts(history.url('root')));
      const schedules = (url: string) =>
        query(
          url,
          `select distinct on (s.name) s.name, v.cron, v.task_type, v.payload, v.priority, v.missed_run_policy, v.enabled, v.time_zone
             from schedules.schedule s join schedules.schedule_version v using (schedule_id)
            order by s.name, v.schedule_version_id desc`,
        );
      expect(await schedules(other.root)).toEqual(await schedules(history.url('root')));
    } finally {
      await history.drop();
    }
  });
});
