// 8. The privilege sweep, from the catalog, for the worker, app and API roles: what each
// may reach equals its allowlist; every security definer function pins search_path; a
// temp-schema shadowing attempt against every security definer function fails.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@org/db-tools';
import { Report, type ChaosDb, type DbUser, type Scenario } from '../harness.js';

const OURS = `n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast', 'graphile_migrate', 'chaos')
              and n.nspname not like 'pg\\_temp\\_%' and n.nspname not like 'pg\\_toast\\_temp\\_%'`;

async function sweep(
  db: ChaosDb,
  r: Report,
  dbUser: 'worker' | 'app' | 'api',
  allowlist: string[],
  views: string[] = [],
) {
  const name = db.dbUsers[dbUser];
  const fns = (
    await db.query<{ fn: string }>(
      `select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where ${OURS} and has_function_privilege($1, p.oid, 'execute') order by 1`,
      [name],
    )
  ).rows.map((x) => x.fn);
  const extra = fns.filter((f) => !allowlist.includes(f));
  const missing = allowlist.filter((f) => !fns.includes(f));
  r.equal(`${dbUser}: executable functions = allowlist`, { extra, missing }, { extra: [], missing: [] });
  const relations = (
    await db.query(
      `select format('%I.%I', n.nspname, c.relname) as rel from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where ${OURS} and c.relkind in ('r', 'v', 'm', 'p', 'f', 'S')
          and (case when c.relkind = 'S' then has_sequence_privilege($1, c.oid, 'usage, select, update')
                    else has_table_privilege($1, c.oid, 'select, insert, update, delete, truncate, references, trigger') end)
        order by 1`,
      [name],
    )
  ).rows.map((x) => x.rel);
  // The only relations any database user may touch: the api user's SELECT on the views of
  // the role-based specification (sql/database-user-grants.json, "api_views").
  r.equal(`${dbUser}: no table, view or sequence privilege but the allowed views`, relations, views);
  const schemasCreate = (
    await db.query(`select n.nspname from pg_namespace n where ${OURS} and has_schema_privilege($1, n.oid, 'create')`, [
      name,
    ])
  ).rows.map((x) => x.nspname);
  r.equal(`${dbUser}: may create in no schema`, schemasCreate, []);
  const temp = (await db.query(`select has_database_privilege($1, current_database(), 'temp') as t`, [name])).rows[0]!
    .t;
  r.equal(`${dbUser}: no TEMP on the database`, temp, false);
  return fns.length;
}

/** Unqualified relation names in a function body that a temp table of that name would shadow. */
function unqualifiedRelations(source: string, names: Set<string>): string[] {
  const found = new Set<string>();
  const re = /\b(?:from|join|into|update|table)\s+(?:only\s+)?([a-z_][a-z0-9_]*)\b(?!\s*\.)(?!\s*\()/gi;
  for (const m of source.replace(/--[^\n]*/g, '').matchAll(re)) {
    const word = m[1]!.toLowerCase();
    if (names.has(word)) found.add(word);
  }
  return [...found];
}

export const scenario: Scenario = {
  id: 8,
  name: 'privileges',
  title: 'privilege sweep from the catalog',
  fast: true,
  async run({ db }) {
    const r = new Report();
    const allowlist = JSON.parse(readFileSync(join(repoRoot(), 'sql', 'database-user-grants.json'), 'utf8')) as Record<
      string,
      string[]
    >;
    for (const dbUser of ['worker', 'app', 'api'] as const)
      r.figure(
        `${dbUser}: executable functions`,
        await sweep(db, r, dbUser, allowlist[dbUser] ?? [], dbUser === 'api' ? (allowlist.api_views ?? []) : []),
      );

    const definers = (
      await db.query<{ fn: string; oid: number; config: string[] | null; src: string; nargs: number }>(
        `select p.oid::regprocedure::text as fn, p.oid::int as oid, p.proconfig as config, p.prosrc as src, p.pronargs as nargs
           from pg_proc p join pg_namespace n on n.oid = p.pronamespace where ${OURS} and p.prosecdef order by 1`,
      )
    ).rows;
    const unpinned = definers.filter((d) => {
      const s = (d.config ?? []).find((c) => c.startsWith('search_path='));
      return !s || !/(^|, *)pg_temp$/.test(s.slice('search_path='.length));
    });
    r.figure('security definer functions', definers.length);
    r.equal(
      'security definer functions without a pinned search_path (pg_temp last)',
      unpinned.map((d) => d.fn),
      [],
    );

    // Shadowing, static: a body that names one of our tables without its schema would
    // find a temp table of that name first (pg_temp is on every pinned path).
    const tableNames = new Set(
      (
        await db.query(
          `select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace where ${OURS} and c.relkind in ('r', 'v', 'p', 'm')`,
        )
      ).rows.map((x) => x.relname as string),
    );
    const exposed = definers
      .map((d) => ({ fn: d.fn, names: unqualifiedRelations(d.src, tableNames) }))
      .filter((d) => d.names.length > 0);
    r.equal('security definer bodies naming a table without its schema', exposed, []);

    // Shadowing, live: as each role, try to create temp shadows of every table, and a
    // pg_temp function shadowing every security definer function.
    let attempts = 0;
    let succeeded = 0;
    for (const dbUser of ['worker', 'app', 'api'] as DbUser[]) {
      const client = await db.pool(dbUser).connect();
      try {
        const tries = [
          ...[...tableNames].map((t) => `create temp table ${t} (x int)`),
          ...definers.map((d) => {
            const [, name, args] = /^(?:[a-z_]+\.)?([a-z_0-9]+)\((.*)\)$/.exec(d.fn.replace(/"/g, ''))!;
            return `create function pg_temp.${name}(${args}) returns int language sql as 'select 1'`;
          }),
          `set search_path = pg_temp, pg_catalog`,
        ];
        for (const sql of tries) {
          attempts++;
          try {
            await client.query(sql);
            if (!sql.startsWith('set ')) succeeded++;
          } catch (e) {
            if ((e as { code?: string }).code !== '42501')
              r.check(`${dbUser}: shadow attempt refused with 42501`, false, `${sql}: ${(e as Error).message}`);
          }
        }
        // With its search_path pointing at pg_temp first, the definer functions still run
        // with their own path: a call resolves to our function, not a shadow.
        const probe = await client.query(`select current_setting('search_path') as p`);
        r.check(
          `${dbUser}: temp shadows refused (TEMP revoked)`,
          succeeded === 0,
          `${succeeded} created; session search_path ${probe.rows[0].p}`,
        );
      } finally {
        client.release(true);
      }
    }
    r.figure('shadowing attempts (tables + functions, 3 database users)', attempts);
    r.figure('shadowing attempts that succeeded', succeeded);

    // Worker-only work: as the app and the API, every way to make the worker act for them
    // (a channel task with a payload of their own, a db_function step forging a handler
    // call, a schedule or a staggered batch of either) and direct calls of the handlers.
    const internalTypes = (
      await db.query<{ task_type: string }>('select task_type from queues.internal_task_type order by 1')
    ).rows.map((x) => x.task_type);
    r.equal('internal task types', internalTypes, ['db_function', 'email', 'file_delete', 'sms']);
    const forged: Record<string, Record<string, unknown>> = {
      db_function: {
        db_function: 'files.record_file_delete_success',
        original_payload: { file_deletion_attempt_id: 1 },
        worker_payload: {},
      },
      email: { to_address: 'victim@example.com', subject: 'x', html: 'x', from_address: 'a@example.com' },
      file_delete: { bucket: 'user-uploads', object_key: 'someone-else/passport.pdf' },
      sms: { to_number: '+14155550100', body: 'premium' },
    };
    let hostile = 0;
    let allowed = 0;
    const tasksBefore = (await db.query<{ n: number }>('select count(*)::int as n from queues.task')).rows[0]!.n;
    for (const dbUser of ['app', 'api'] as const) {
      const tries: [string, string, unknown[]][] = [];
      for (const t of internalTypes) {
        const payload = JSON.stringify(forged[t] ?? {});
        tries.push([`${dbUser}: queues.enqueue('${t}')`, 'select queues.enqueue($1, $2::jsonb)', [t, payload]]);
        tries.push([
          `${dbUser}: queues.enqueue_many with '${t}'`,
          'select * from queues.enqueue_many($1::jsonb)',
          [
            JSON.stringify([
              { task_type: 'product_resync', payload: {} },
              { task_type: t, payload: forged[t] ?? {} },
            ]),
          ],
        ]);
        tries.push([
          `${dbUser}: schedules.upsert_schedule('${t}')`,
          `select * from schedules.upsert_schedule('chaos-evil', '* * * * *', $1, $2::jsonb, null, null)`,
          [t, payload],
        ]);
        tries.push([
          `${dbUser}: schedules.generate_staggered_tasks('${t}')`,
          `select * from schedules.generate_staggered_tasks($1, $2::jsonb, now(), '1 day', 1)`,
          [t, JSON.stringify([forged[t] ?? {}])],
        ]);
      }
      for (const fn of [
        'files.record_file_delete_success',
        'comms.record_sms_success',
        'comms.get_email_payload',
        'files.file_deletion_supervisor',
      ]) {
        tries.push([
          `${dbUser}: ${fn}(forged) called directly`,
          `select ${fn}($1::jsonb)`,
          [JSON.stringify({ original_payload: { file_deletion_attempt_id: 1, send_sms_attempt_id: 1 } })],
        ]);
      }
      tries.push([
        `${dbUser}: internal.run_function('files.record_file_delete_success')`,
        'select internal.run_function($1, $2::jsonb)',
        ['files.record_file_delete_success', '{}'],
      ]);
      tries.push([
        `${dbUser}: queues.enqueue_internal`,
        `select queues.enqueue_internal('db_function', '{}'::jsonb)`,
        [],
      ]);
      for (const [label, sql, params] of tries) {
        hostile++;
        try {
          await db.pool(dbUser).query(sql, params);
          allowed++;
          r.check(`${label}: refused`, false, 'it succeeded');
        } catch (e) {
          if ((e as { code?: string }).code !== '42501')
            r.check(`${label}: refused with 42501`, false, (e as Error).message);
        }
      }
    }
    const tasksAfter = (await db.query<{ n: number }>('select count(*)::int as n from queues.task')).rows[0]!.n;
    r.figure('worker-only enqueue and forged handler attempts (app + API)', hostile);
    r.figure('worker-only enqueue and forged handler attempts that succeeded', allowed);
    r.equal('tasks written by the hostile attempts', tasksAfter - tasksBefore, 0);
    return r.result();
  },
};
