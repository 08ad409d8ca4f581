// The schema dump: the whole catalog of our schemas as text, built from catalog queries
// (there is no pg_dump for PostgreSQL 18 here). Deterministic: every list is ordered by
// name (collation "C"), ACL items are sorted, OIDs never appear, and our roles are
// printed as their placeholder names (:DATABASE_OWNER, ...) so the dump does not depend
// on the cluster. It is meant to be read and diffed, not executed.
import { structuredPatch } from 'diff';
import type pg from 'pg';
import type { DbUserNames } from './db-users.js';

/** Schemas that are not ours: PostgreSQL's own and graphile-migrate's bookkeeping. */
const NOT_OURS = `nspname in ('pg_catalog', 'information_schema', 'graphile_migrate', 'queue_migrate')
  or nspname like 'pg\\_toast%' or nspname like 'pg\\_temp\\_%'`;

export const SCHEMA_DUMP_HEADER =
  '-- The schema the migrations build (committed + current), generated from the catalog by\n' +
  '-- tools/db/src/schema-dump.ts (`npm run schema-dump`, also run by `npm run codegen` and\n' +
  '-- `npm run dev`). Never edit it by hand; a test fails when it is stale.\n';

/** Prints our database users' names as their placeholders. */
function dbUserNamer(dbUsers: DbUserNames): (name: string) => string {
  const byName = new Map<string, string>([
    [dbUsers.owner, ':DATABASE_OWNER'],
    [dbUsers.worker, ':DATABASE_WORKER'],
    [dbUsers.app, ':DATABASE_APP'],
    [dbUsers.api, ':DATABASE_API'],
  ]);
  return (name) => (name === '' || name === '-' ? 'PUBLIC' : (byName.get(name) ?? name));
}

interface AclRow {
  grantee: string;
  grantor: string;
  privilege: string;
  grantable: boolean;
}

/** An ACL as sorted lines `grantee: PRIV, PRIV (by grantor)`; `(default)` when NULL. */
function formatAcl(acl: AclRow[] | null, role: (name: string) => string, indent = '  '): string[] {
  if (acl === null) return [`${indent}acl: (default)`];
  if (acl.length === 0) return [`${indent}acl: (none)`];
  const byGrantee = new Map<string, string[]>();
  for (const item of acl) {
    const key = `${role(item.grantee)} (by ${role(item.grantor)})`;
    const list = byGrantee.get(key) ?? [];
    list.push(item.privilege + (item.grantable ? ' with grant option' : ''));
    byGrantee.set(key, list);
  }
  return [...byGrantee].map(([key, privileges]) => `${indent}grant ${privileges.sort().join(', ')} to ${key}`).sort();
}

/**
 * SQL that turns an aclitem[] column into a JSON array of AclRow. With `kind` and `owner`,
 * a NULL ACL (the object's defaults) is printed as the privileges it stands for
 * (acldefault), so an object whose ACL was touched by a no-op revoke and one whose ACL
 * was never touched read the same; without them a NULL ACL stays null.
 */
function aclJson(column: string, kind?: string, owner?: string): string {
  if (kind && owner) column = `coalesce(${column}, acldefault('${kind}', ${owner}))`;
  return `case when ${column} is null then null else coalesce((
      select json_agg(json_build_object(
               'grantee', case when a.grantee = 0 then '' else pg_get_userbyid(a.grantee)::text end,
               'grantor', pg_get_userbyid(a.grantor)::text,
               'privilege', a.privilege_type,
               'grantable', a.is_grantable))
        from aclexplode(${column}) a), '[]'::json) end`;
}

function comment(kind: string, name: string, text: string | null): string[] {
  return text === null ? [] : [`comment on ${kind} ${name} is ${quoteLiteral(text)};`];
}

function quoteLiteral(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

/** Dumps every object of our schemas through `client` (any role that can read the catalog). */
export async function dumpSchema(client: pg.ClientBase, dbUsers: DbUserNames): Promise<string> {
  const role = dbUserNamer(dbUsers);
  const out: string[] = [SCHEMA_DUMP_HEADER];
  const q = async <R extends pg.QueryResultRow>(sql: string): Promise<R[]> => (await client.query<R>(sql)).rows;

  // Schemas.
  const schemas = await q<{ name: string; owner: string; acl: AclRow[] | null; comment: string | null }>(
    `select n.nspname as name, pg_get_userbyid(n.nspowner) as owner, ${aclJson('n.nspacl', 'n', 'n.nspowner')} as acl,
            obj_description(n.oid, 'pg_namespace') as comment
       from pg_namespace n where not (${NOT_OURS}) order by n.nspname collate "C"`,
  );
  out.push('-- Schemas\n');
  for (const s of schemas) {
    out.push(
      [
        `create schema ${s.name};`,
        `  owner ${role(s.owner)}`,
        ...formatAcl(s.acl, role),
        ...comment('schema', s.name, s.comment),
      ].join('\n'),
    );
  }

  // Default privileges.
  const defaults = await q<{ owner: string; schema: string | null; objtype: string; acl: AclRow[] }>(
    `select pg_get_userbyid(d.defaclrole) as owner, n.nspname as schema,
            case d.defaclobjtype when 'r' then 'tables' when 'S' then 'sequences' when 'f' then 'routines'
                 when 'T' then 'types' when 'n' then 'schemas' when 'L' then 'large objects' else d.defaclobjtype::text end as objtype,
            ${aclJson('d.defaclacl')} as acl
       from pg_default_acl d left join pg_namespace n on n.oid = d.defaclnamespace`,
  );
  out.push('\n-- Default privileges\n');
  const defaultLines = defaults.map((d) =>
    [
      `default privileges for ${role(d.owner)}${d.schema ? ` in schema ${d.schema}` : ''} on ${d.objtype}`,
      ...formatAcl(d.acl, role),
    ].join('\n'),
  );
  out.push(...defaultLines.sort());

  // Extensions (plpgsql is always there).
  const extensions = await q<{ name: string; schema: string }>(
    `select e.extname as name, n.nspname as schema from pg_extension e join pg_namespace n on n.oid = e.extnamespace
      where e.extname <> 'plpgsql' order by e.extname collate "C"`,
  );
  if (extensions.length > 0) {
    out.push('\n-- Extensions\n');
    for (const e of extensions) out.push(`create extension ${e.name} schema ${e.schema};`);
  }

  // Types that are not a relation's row type: enums, domains, composite types, ranges.
  const types = await q<{ name: string; owner: string; def: string; acl: AclRow[] | null; comment: string | null }>(
    `select format('%I.%I', n.nspname, t.typname) as name, pg_get_userbyid(t.typowner) as owner,
            case t.typtype
              when 'e' then 'enum (' || (select string_agg(quote_literal(e.enumlabel), ', ' order by e.enumsortorder)
                                          from pg_enum e where e.enumtypid = t.oid) || ')'
              when 'd' then 'domain ' || format_type(t.typbasetype, t.typtypmod)
                            || case when t.typnotnull then ' not null' else '' end
                            || coalesce(' default ' || t.typdefault, '')
                            || coalesce((select string_agg(' constraint ' || quote_ident(c.conname) || ' ' || pg_get_constraintdef(c.oid), '' order by c.conname collate "C")
                                           from pg_constraint c where c.contypid = t.oid), '')
              when 'c' then 'composite (' || (select string_agg(quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod), ', ' order by a.attnum)
                                               from pg_attribute a where a.attrelid = t.typrelid and a.attnum > 0 and not a.attisdropped) || ')'
              else 'type ' || t.typtype::text
            end as def,
            ${aclJson('t.typacl', 'T', 't.typowner')} as acl, obj_description(t.oid, 'pg_type') as comment
       from pg_type t join pg_namespace n on n.oid = t.typnamespace
       left join pg_class c on c.oid = t.typrelid
      where not (${NOT_OURS})
        and (t.typtype in ('e', 'd', 'r', 'm') or (t.typtype = 'c' and c.relkind = 'c'))
      order by n.nspname collate "C", t.typname collate "C"`,
  );
  if (types.length > 0) {
    out.push('\n-- Types\n');
    for (const t of types) {
      out.push(
        [
          `create type ${t.name} as ${t.def};`,
          `  owner ${role(t.owner)}`,
          ...formatAcl(t.acl, role),
          ...comment('type', t.name, t.comment),
        ].join('\n'),
      );
    }
  }

  // Tables (plain and partitioned), with columns, constraints, indexes, triggers, policies.
  const tables = await q<{
    oid: number;
    name: string;
    kind: string;
    persistence: string;
    owner: string;
    options: string[] | null;
    partkey: string | null;
    partof: string | null;
    partbound: string | null;
    rls: boolean;
    forcerls: boolean;
    acl: AclRow[] | null;
    comment: string | null;
  }>(
    `select c.oid, format('%I.%I', n.nspname, c.relname) as name, c.relkind as kind, c.relpersistence as persistence,
            pg_get_userbyid(c.relowner) as owner, c.reloptions as options,
            case when c.relkind = 'p' then pg_get_partkeydef(c.oid) end as partkey,
            (select i.inhparent::regclass::text from pg_inherits i where i.inhrelid = c.oid and c.relispartition) as partof,
            case when c.relispartition then pg_get_expr(c.relpartbound, c.oid) end as partbound,
            c.relrowsecurity as rls, c.relforcerowsecurity as forcerls,
            ${aclJson('c.relacl', 'r', 'c.relowner')} as acl, obj_description(c.oid, 'pg_class') as comment
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where not (${NOT_OURS}) and c.relkind in ('r', 'p', 'f')
      order by n.nspname collate "C", c.relname collate "C"`,
  );
  const columns = await q<{
    table: number;
    name: string;
    type: string;
    collation: string | null;
    default: string | null;
    notnull: boolean;
    identity: string;
    generated: string;
    acl: AclRow[] | null;
    comment: string | null;
  }>(
    `select a.attrelid::int8 as table, quote_ident(a.attname) as name, format_type(a.atttypid, a.atttypmod) as type,
            case when a.attcollation <> 0 and a.attcollation <> t.typcollation then a.attcollation::regcollation::text end as collation,
            pg_get_expr(d.adbin, d.adrelid) as default, a.attnotnull as notnull, a.attidentity as identity,
            a.attgenerated as generated, ${aclJson('a.attacl')} as acl, col_description(a.attrelid, a.attnum) as comment
       from pg_attribute a join pg_type t on t.oid = a.atttypid
       join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
       left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
      where not (${NOT_OURS}) and c.relkind in ('r', 'p', 'f', 'v', 'm') and a.attnum > 0 and not a.attisdropped
      order by a.attrelid, a.attnum`,
  );
  const constraints = await q<{ table: number; name: string; def: string; comment: string | null }>(
    `select c.conrelid::int8 as table, quote_ident(c.conname) as name, pg_get_constraintdef(c.oid) as def,
            obj_description(c.oid, 'pg_constraint') as comment
       from pg_constraint c join pg_namespace n on n.oid = c.connamespace
      where not (${NOT_OURS}) and c.conrelid <> 0
      order by c.conrelid, c.conname collate "C"`,
  );
  const indexes = await q<{ table: number; name: string; def: string; comment: string | null }>(
    `select i.indrelid::int8 as table, format('%I.%I', n.nspname, c.relname) as name, pg_get_indexdef(i.indexrelid) as def,
            obj_description(c.oid, 'pg_class') as comment
       from pg_index i join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace
      where not (${NOT_OURS})
      order by i.indrelid, c.relname collate "C"`,
  );
  const triggers = await q<{ table: number; name: string; def: string; enabled: string; comment: string | null }>(
    `select t.tgrelid::int8 as table, quote_ident(t.tgname) as name, pg_get_triggerdef(t.oid) as def, t.tgenabled as enabled,
            obj_description(t.oid, 'pg_trigger') as comment
       from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
      where not (${NOT_OURS}) and not t.tgisinternal
      order by t.tgrelid, t.tgname collate "C"`,
  );
  const policies = await q<{ table: number; name: string; def: string }>(
    `select p.polrelid::int8 as table, quote_ident(p.polname) as name,
            format('%s for %s to %s using (%s) with check (%s)',
                   case when p.polpermissive then 'permissive' else 'restrictive' end,
                   case p.polcmd when 'r' then 'select' when 'a' then 'insert' when 'w' then 'update' when 'd' then 'delete' else 'all' end,
                   (select string_agg(case when r = 0 then 'public' else pg_get_userbyid(r)::text end, ', ' order by 1) from unnest(p.polroles) r),
                   coalesce(pg_get_expr(p.polqual, p.polrelid), ''), coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')) as def
       from pg_policy p order by p.polrelid, p.polname collate "C"`,
  );
  const group = <T extends { table: number }>(rows: T[]) => {
    const map = new Map<number, T[]>();
    for (const row of rows) {
      const key = Number(row.table);
      map.set(key, [...(map.get(key) ?? []), row]);
    }
    return map;
  };
  const columnsOf = group(columns);
  const constraintsOf = group(constraints);
  const indexesOf = group(indexes);
  const triggersOf = group(triggers);
  const policiesOf = group(policies);

  const columnLines = (oid: number, relation: string): { body: string[]; after: string[] } => {
    const body: string[] = [];
    const after: string[] = [];
    for (const c of columnsOf.get(Number(oid)) ?? []) {
      let line = `  ${c.name} ${c.type}`;
      if (c.collation) line += ` collate ${c.collation}`;
      if (c.generated === 's' || c.generated === 'v') {
        line += ` generated always as (${c.default}) ${c.generated === 's' ? 'stored' : 'virtual'}`;
      } else if (c.default !== null) line += ` default ${c.default}`;
      if (c.identity === 'a') line += ' generated always as identity';
      if (c.identity === 'd') line += ' generated by default as identity';
      if (c.notnull) line += ' not null';
      body.push(line);
      if (c.acl !== null) after.push(...formatAcl(c.acl, role).map((l) => `${l} (column ${c.name})`));
      after.push(...comment('column', `${relation}.${c.name}`, c.comment));
    }
    return { body, after };
  };

  out.push('\n-- Tables\n');
  for (const t of tables) {
    const { body, after } = columnLines(t.oid, t.name);
    for (const c of constraintsOf.get(Number(t.oid)) ?? []) body.push(`  constraint ${c.name} ${c.def}`);
    const lines = [
      `create ${t.persistence === 'u' ? 'unlogged ' : ''}${t.kind === 'f' ? 'foreign ' : ''}table ${t.name}${t.partof ? ` partition of ${t.partof}` : ''} (`,
      body.join(',\n'),
      `)${t.partbound ? ` ${t.partbound}` : ''}${t.partkey ? ` partition by ${t.partkey}` : ''}${
        t.options ? ` with (${[...t.options].sort().join(', ')})` : ''
      };`,
      `  owner ${role(t.owner)}`,
      ...formatAcl(t.acl, role),
      ...after,
    ];
    if (t.rls) lines.push(`  row level security enabled${t.forcerls ? ', forced' : ''}`);
    lines.push(...comment('table', t.name, t.comment));
    for (const c of constraintsOf.get(Number(t.oid)) ?? [])
      lines.push(...comment(`constraint ${c.name} on`, t.name, c.comment));
    for (const i of indexesOf.get(Number(t.oid)) ?? []) lines.push(`${i.def};`, ...comment('index', i.name, i.comment));
    for (const tr of triggersOf.get(Number(t.oid)) ?? []) {
      lines.push(
        `${tr.def};${tr.enabled === 'O' ? '' : ` -- enabled: ${tr.enabled}`}`,
        ...comment(`trigger ${tr.name} on`, t.name, tr.comment),
      );
    }
    for (const p of policiesOf.get(Number(t.oid)) ?? [])
      lines.push(`create policy ${p.name} on ${t.name} as ${p.def};`);
    out.push(lines.join('\n') + '\n');
  }

  // Views and materialized views.
  const views = await q<{
    oid: number;
    name: string;
    kind: string;
    owner: string;
    options: string[] | null;
    def: string;
    acl: AclRow[] | null;
    comment: string | null;
  }>(
    `select c.oid, format('%I.%I', n.nspname, c.relname) as name, c.relkind as kind, pg_get_userbyid(c.relowner) as owner,
            c.reloptions as options, pg_get_viewdef(c.oid, true) as def, ${aclJson('c.relacl', 'r', 'c.relowner')} as acl,
            obj_description(c.oid, 'pg_class') as comment
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where not (${NOT_OURS}) and c.relkind in ('v', 'm')
      order by n.nspname collate "C", c.relname collate "C"`,
  );
  if (views.length > 0) out.push('-- Views\n');
  for (const v of views) {
    const { body, after } = columnLines(v.oid, v.name);
    const lines = [
      `create ${v.kind === 'm' ? 'materialized ' : ''}view ${v.name}${v.options ? ` with (${[...v.options].sort().join(', ')})` : ''} as`,
      v.def.trimEnd(),
      `  -- columns:`,
      ...body.map((l) => `  --${l}`),
      `  owner ${role(v.owner)}`,
      ...formatAcl(v.acl, role),
      ...after,
      ...comment(v.kind === 'm' ? 'materialized view' : 'view', v.name, v.comment),
    ];
    for (const i of indexesOf.get(Number(v.oid)) ?? []) lines.push(`${i.def};`);
    for (const tr of triggersOf.get(Number(v.oid)) ?? []) lines.push(`${tr.def};`);
    out.push(lines.join('\n') + '\n');
  }

  // Sequences, with what owns them (identity columns and serials).
  const sequences = await q<{
    name: string;
    owner: string;
    type: string;
    start: string;
    increment: string;
    min: string;
    max: string;
    cache: string;
    cycle: boolean;
    ownedby: string | null;
    deptype: string | null;
    acl: AclRow[] | null;
    comment: string | null;
  }>(
    `select format('%I.%I', n.nspname, c.relname) as name, pg_get_userbyid(c.relowner) as owner,
            format_type(s.seqtypid, null) as type, s.seqstart::text as start, s.seqincrement::text as increment,
            s.seqmin::text as min, s.seqmax::text as max, s.seqcache::text as cache, s.seqcycle as cycle,
            (select format('%s.%I', d.refobjid::regclass::text, a.attname)
               from pg_depend d join pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
              where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.refclassid = 'pg_class'::regclass
                and d.deptype in ('a', 'i') limit 1) as ownedby,
            (select d.deptype::text from pg_depend d
              where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.refclassid = 'pg_class'::regclass
                and d.deptype in ('a', 'i') limit 1) as deptype,
            ${aclJson('c.relacl', 's', 'c.relowner')} as acl, obj_description(c.oid, 'pg_class') as comment
       from pg_class c join pg_namespace n on n.oid = c.relnamespace join pg_sequence s on s.seqrelid = c.oid
      where not (${NOT_OURS}) and c.relkind = 'S'
      order by n.nspname collate "C", c.relname collate "C"`,
  );
  if (sequences.length > 0) out.push('-- Sequences\n');
  for (const s of sequences) {
    out.push(
      [
        `create sequence ${s.name} as ${s.type} start ${s.start} increment ${s.increment} minvalue ${s.min} maxvalue ${s.max} cache ${s.cache}${s.cycle ? ' cycle' : ''};`,
        ...(s.ownedby ? [`  ${s.deptype === 'i' ? 'identity of' : 'owned by'} ${s.ownedby}`] : []),
        `  owner ${role(s.owner)}`,
        ...formatAcl(s.acl, role),
        ...comment('sequence', s.name, s.comment),
      ].join('\n'),
    );
  }

  // Functions and procedures (full definitions), aggregates by signature.
  const functions = await q<{
    signature: string;
    kind: string;
    def: string | null;
    owner: string;
    acl: AclRow[] | null;
    comment: string | null;
  }>(
    `select format('%I.%I(%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid)) as signature,
            p.prokind as kind, case when p.prokind in ('f', 'p', 'w') then pg_get_functiondef(p.oid) end as def,
            pg_get_userbyid(p.proowner) as owner, ${aclJson('p.proacl', 'f', 'p.proowner')} as acl, obj_description(p.oid, 'pg_proc') as comment
       from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where not (${NOT_OURS})
        and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
      order by n.nspname collate "C", p.proname collate "C", pg_get_function_identity_arguments(p.oid) collate "C"`,
  );
  out.push('\n-- Functions\n');
  for (const f of functions) {
    out.push(
      [
        f.def === null ? `-- aggregate ${f.signature}` : f.def.trimEnd() + ';',
        `  -- ${f.signature}: owner ${role(f.owner)}`,
        ...formatAcl(f.acl, role, '  -- '),
        ...comment(f.kind === 'p' ? 'procedure' : 'function', f.signature, f.comment),
      ].join('\n') + '\n',
    );
  }
  return (
    out
      .join('\n')
      .replace(/[ \t]+$/gm, '')
      .trimEnd() + '\n'
  );
}

/**
 * A unified diff of two texts, with `context` lines around changes; '' when equal.
 * The diff itself is jsdiff's (linear memory in the size of the texts, so a whole
 * schema dump against an empty file is cheap).
 */
export function unifiedDiff(
  a: string,
  b: string,
  labels: [string, string] = ['expected', 'actual'],
  context = 3,
): string {
  if (a === b) return '';
  const lines = [`--- ${labels[0]}`, `+++ ${labels[1]}`];
  // Both texts end in a newline for the comparison, so a missing final newline does not
  // turn the last line into a change; it gets a line of its own instead.
  const endLine = (text: string) => (text === '' || text.endsWith('\n') ? text : `${text}\n`);
  const patch = structuredPatch(labels[0], labels[1], endLine(a), endLine(b), undefined, undefined, { context });
  // An empty side of a hunk is numbered by the line before it, as diff -u does.
  const range = (start: number, count: number) => `${count === 0 ? start - 1 : start},${count}`;
  for (const hunk of patch.hunks) {
    lines.push(`@@ -${range(hunk.oldStart, hunk.oldLines)} +${range(hunk.newStart, hunk.newLines)} @@`, ...hunk.lines);
  }
  if (patch.hunks.length === 0) lines.push('\\ the texts differ only in the newline at the end');
  return lines.join('\n') + '\n';
}
