// The committed history cut into parts (docs/design/migration-parts.md): the queue's core
// and each business domain. The package's build (scripts/write-parts.mjs) writes
// ./migrations/parts/<NNNNNN>.sql from the repository's migrations/committed/, one per
// committed migration: the same statements in the same order, each under a
// `--! part: <name>` line naming the part it belongs to. The migrator (index.ts) applies,
// for each migration, the statements of the parts an app chose. Build output, never
// committed; tools/db/test/parts.test.ts checks that no statement is lost.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root, seen from this module in the package's dist/ (or src/). */
const repoRoot = () => fileURLToPath(new URL('../../../', import.meta.url));

/**
 * The optional parts. A part may use the core and other parts (parts.json lists what each
 * uses; a migration adds those with it: files and accounts use each other), never the
 * reverse: the core uses no part.
 */
export const DOMAIN_PARTS = ['comms', 'files', 'accounts', 'menus', 'learning', 'public'] as const;
export type PartName = 'core' | (typeof DOMAIN_PARTS)[number];

/** Splits SQL into statements (each with the comments before it), quotes and dollar quotes respected. */
export function splitStatements(sql: string): string[] {
  const out: string[] = [];
  let start = 0;
  let i = 0;
  const n = sql.length;
  while (i < n) {
    const c = sql[i];
    if (c === '-' && sql[i + 1] === '-') {
      const end = sql.indexOf('\n', i);
      i = end === -1 ? n : end + 1;
    } else if (c === '/' && sql[i + 1] === '*') {
      let depth = 1;
      i += 2;
      while (i < n && depth > 0) {
        if (sql[i] === '/' && sql[i + 1] === '*') {
          depth++;
          i += 2;
        } else if (sql[i] === '*' && sql[i + 1] === '/') {
          depth--;
          i += 2;
        } else i++;
      }
    } else if (c === "'") {
      const escapes = /[eE]/.test(sql[i - 1] ?? '') && !/[A-Za-z0-9_]/.test(sql[i - 2] ?? '');
      i++;
      while (i < n) {
        if (escapes && sql[i] === '\\') i += 2;
        else if (sql[i] === "'" && sql[i + 1] === "'") i += 2;
        else if (sql[i] === "'") {
          i++;
          break;
        } else i++;
      }
    } else if (c === '"') {
      const end = sql.indexOf('"', i + 1);
      i = end === -1 ? n : end + 1;
    } else if (c === '$' && !/[A-Za-z0-9_]/.test(sql[i - 1] ?? '')) {
      const tag = /^\$([A-Za-z_][A-Za-z0-9_]*)?\$/.exec(sql.slice(i, i + 64));
      if (tag) {
        const end = sql.indexOf(tag[0], i + tag[0].length);
        i = end === -1 ? n : end + tag[0].length;
      } else i++;
    } else if (c === ';') {
      i++;
      // The rest of the line (a trailing comment) stays with its statement.
      const eol = sql.indexOf('\n', i);
      const rest = eol === -1 ? sql.slice(i) : sql.slice(i, eol);
      if (/^\s*(--.*)?$/.test(rest)) i = eol === -1 ? n : eol + 1;
      out.push(sql.slice(start, i));
      start = i;
    } else i++;
  }
  if (sql.slice(start).trim() !== '') out.push(sql.slice(start));
  return out;
}

/** The statement without its comments (string contents kept). */
function withoutComments(statement: string): string {
  return statement.replace(/--[^\n]*/g, ' ').replace(/\/\*[\s\S]*?\*\//g, ' ');
}

/** Where in a statement each domain part is first named: qualified, as a schema, or as a string. */
export function partsNamedAt(statement: string): Map<PartName, number> {
  const text = withoutComments(statement);
  const at = new Map<PartName, number>();
  const note = (part: PartName, index: number | undefined) => {
    if (index !== undefined && index >= 0 && (at.get(part) ?? Infinity) > index) at.set(part, index);
  };
  for (const part of DOMAIN_PARTS) {
    const patterns = [
      new RegExp(`(?<![A-Za-z0-9_."])"?${part}"?\\s*\\.\\s*["'%]?[A-Za-z_%]`, 'i'),
      new RegExp(`\\bschema\\s+(if\\s+(not\\s+)?exists\\s+)?"?${part}"?\\b`, 'i'),
      ...(part === 'public' ? [] : [new RegExp(`'${part}'`, 'i')]),
    ];
    for (const pattern of patterns) note(part, pattern.exec(text)?.index);
  }
  for (const [object, part] of Object.entries(DOMAIN_OBJECTS_IN_CORE_SCHEMAS))
    note(part, new RegExp(`\\b${object.replace('.', '\\.')}\\b`, 'i').exec(text)?.index);
  return at;
}

/** The parts a statement names. */
export function partsNamed(statement: string): Set<PartName> {
  return new Set(partsNamedAt(statement).keys());
}

/** The core's schemas: a domain may use them, they never use a domain. */
export const CORE_SCHEMAS = ['queues', 'internal', 'admin', 'schedules', 'api'];

/**
 * Objects of the core's schemas whose definitions name a domain only where a database
 * without that domain never goes: they are the core's. queues.assert_may_enqueue names
 * the kickoff functions in a hint's text; admin.processes lists the domains' processes
 * (those of installed domains only, from migration 200 on); admin.process_timeline and
 * admin.process_children read the account deletion's children from accounts and files
 * tables up to migration 200, and from the domain's own S.X_children function after it.
 */
export const CORE_OBJECTS_NAMING_DOMAINS = [
  'queues.assert_may_enqueue',
  'admin.processes',
  'admin.process_timeline',
  'admin.process_children',
];

/** Objects in the core's schemas that belong to a domain: its face in the api schema. */
export const DOMAIN_OBJECTS_IN_CORE_SCHEMAS: Record<string, PartName> = {
  'api.request_account_deletion': 'accounts',
};

/** The schema-qualified name of what a statement creates (create [or replace] function, view, ...). */
export function createdObject(statement: string): string | undefined {
  const m =
    /^\s*create\s+(?:or\s+replace\s+)?(?:function|procedure|view|materialized\s+view|table|type)\s+(?:if\s+not\s+exists\s+)?([a-z_]+)\.([a-z_0-9]+)/i.exec(
      withoutComments(statement),
    );
  return m ? `${m[1]!.toLowerCase()}.${m[2]!.toLowerCase()}` : undefined;
}

/**
 * The part a statement belongs to: the last of the parts it names, or the core. A
 * statement that creates an object in a core schema yet names a domain must be listed
 * (CORE_OBJECTS_NAMING_DOMAINS or DOMAIN_OBJECTS_IN_CORE_SCHEMAS): the core may not
 * depend on a domain, so such an object is either the core's (and names the domain only
 * where a core-only database never goes) or the domain's.
 */
export function partOf(statement: string): PartName {
  const at = partsNamedAt(statement);
  const named = new Set(at.keys());
  // The part named first: what a statement acts on comes before what it uses
  // (create table files.file (... references accounts.account), grant ... on comms.x ...).
  let part: PartName = 'core';
  let first = Infinity;
  for (const [p, index] of at)
    if (index < first) {
      part = p;
      first = index;
    }
  const object = createdObject(statement);
  if (object && (DOMAIN_PARTS as readonly string[]).includes(object.split('.')[0]!))
    return object.split('.')[0] as PartName;
  if (part !== 'core' && object && CORE_SCHEMAS.includes(object.split('.')[0]!)) {
    if (CORE_OBJECTS_NAMING_DOMAINS.includes(object)) return 'core';
    const owner = DOMAIN_OBJECTS_IN_CORE_SCHEMAS[object];
    if (owner) return owner;
    throw new Error(
      `${object} is created in a core schema but names ${[...named].join(', ')}: list it in ` +
        'CORE_OBJECTS_NAMING_DOMAINS or DOMAIN_OBJECTS_IN_CORE_SCHEMAS (packages/queue-schema/src/parts.ts)',
    );
  }
  return part;
}

export interface PartedMigration {
  /** The committed file's name, e.g. 000005-steps-in-batches-....sql */
  source: string;
  /** parts/<NNNNNN>.sql */
  name: string;
  text: string;
  /** For each part, the parts its statements in this migration name. */
  references: Map<PartName, Set<PartName>>;
}

/** One committed migration, its statements under `--! part:` lines. */
export function partMigration(source: string, body: string): PartedMigration {
  const number = /^(\d{6})-/.exec(source)?.[1];
  if (!number) throw new Error(`not a committed migration's name: ${source}`);
  // graphile-migrate's header lines (Previous, Hash, Message) are its bookkeeping, not SQL.
  const lines = body.split('\n');
  let first = 0;
  while (first < lines.length && /^--! (Previous|Hash|Message|AllowInvalidHash):/.test(lines[first] ?? '')) first++;
  const sql = lines.slice(first).join('\n');
  if (/^--! no-transaction/m.test(sql)) throw new Error(`${source}: --! no-transaction is not supported by the parts`);
  const references = new Map<PartName, Set<PartName>>();
  let current: PartName | undefined;
  let text = `-- Generated by the build of @org/queue-schema from migrations/committed/${source}.\n`;
  for (const statement of splitStatements(sql)) {
    if (withoutComments(statement).trim() === '') {
      text += statement;
      continue;
    }
    const part = partOf(statement);
    const named = references.get(part) ?? new Set<PartName>();
    if (part !== 'core') for (const p of partsNamed(statement)) if (p !== part) named.add(p);
    references.set(part, named);
    if (part !== current) {
      text += `${text.endsWith('\n') ? '' : '\n'}--! part: ${part}\n`;
      current = part;
    }
    text += statement;
  }
  if (!text.endsWith('\n')) text += '\n';
  return { source, name: `${number}.sql`, text, references };
}

export function committedFolder(root = repoRoot()): string {
  return join(root, 'migrations', 'committed');
}

/** Every committed migration, parted. */
export function partHistory(root = repoRoot()): PartedMigration[] {
  const folder = committedFolder(root);
  const sources = readdirSync(folder)
    .filter((name) => /^\d{6}-.*\.sql$/.test(name))
    .sort();
  const out = sources.map((source) => partMigration(source, readFileSync(join(folder, source), 'utf8')));
  return out;
}

/** The parts each part depends on (the parts its statements name), over the whole history. */
export function partDependencies(history: PartedMigration[]): Record<string, string[]> {
  const deps: Record<string, Set<string>> = {};
  for (const part of DOMAIN_PARTS) deps[part] = new Set();
  for (const migration of history)
    for (const [part, named] of migration.references)
      if (part !== 'core') for (const other of named) if (other !== 'core') deps[part]?.add(other);
  return Object.fromEntries(Object.entries(deps).map(([k, v]) => [k, [...v].sort()]));
}

/** The files the build writes: the migrations and parts.json (names and dependencies). */
export function partFiles(root = repoRoot()): Map<string, string> {
  const history = partHistory(root);
  const files = new Map<string, string>();
  for (const migration of history) files.set(migration.name, migration.text);
  const manifest = {
    comment: 'Generated by the build of @org/queue-schema (src/parts.ts).',
    parts: ['core', ...DOMAIN_PARTS],
    dependencies: partDependencies(history),
    migrations: history.map((m) => m.name),
  };
  files.set('parts.json', `${JSON.stringify(manifest, null, 2)}\n`);
  return files;
}

/** Writes the parted history into `folder` (emptied first); answers the files written. */
export function writeParts(folder: string, root = repoRoot()): string[] {
  const files = partFiles(root);
  rmSync(folder, { recursive: true, force: true });
  mkdirSync(folder, { recursive: true });
  for (const [name, text] of files) writeFileSync(join(folder, name), text);
  return [...files.keys()];
}
