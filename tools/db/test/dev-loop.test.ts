// `npm run dev`'s loop: saving current.sql re-applies it and rewrites the schema dump,
// and saving a query file regenerates its typed client; a broken save is reported and
// the loop carries on.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { startDevLoop, type DevLoop } from '../src/dev-loop.js';
import { migrateSettings } from '../src/migrate.js';
import { repoRoot } from '../src/paths.js';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
let loop: DevLoop | undefined;
const tmp = mkdtempSync(join(tmpdir(), 'dev-loop-'));
const cycles: (Error | undefined)[] = [];
const lines: string[] = [];

/** Resolves at the next finished cycle. */
function nextCycle(): Promise<Error | undefined> {
  const seen = cycles.length;
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const poll = setInterval(() => {
      if (cycles.length > seen) {
        clearInterval(poll);
        resolve(cycles[cycles.length - 1]);
      } else if (Date.now() - started > 30_000) {
        clearInterval(poll);
        reject(new Error(`no dev-loop cycle; log:\n${lines.join('\n')}`));
      }
    }, 50);
  });
}

beforeAll(async () => {
  db = await createTestDatabase();
  // A copy of the migrations folder and of the client package, so the test edits no
  // file of the checkout.
  const migrations = join(tmp, 'migrations');
  cpSync(join(repoRoot(), 'migrations', 'committed'), join(migrations, 'committed'), { recursive: true });
  cpSync(join(repoRoot(), 'migrations', 'afterReset.sql'), join(migrations, 'afterReset.sql'));
  symlinkSync(join(repoRoot(), 'sql'), join(migrations, 'fixtures'));
  writeFileSync(join(migrations, 'current.sql'), '-- empty\n');
  const pkg = join(tmp, 'client');
  mkdirSync(join(pkg, 'src', 'queries'), { recursive: true });
  cpSync(join(repoRoot(), 'packages', 'queue-client', 'pgtyped.json'), join(pkg, 'pgtyped.json'));

  const ctx = inject('queueTestServer');
  const settings = await migrateSettings({
    ownerUrl: db.url('owner'),
    rootUrl: ctx.rootUrl,
    dbUsers: db.dbUsers,
    quiet: true,
  });
  settings.migrationsFolder = migrations;
  loop = startDevLoop({
    settings,
    databaseUrl: db.url('owner'),
    sqlFolders: [],
    clientPackages: [pkg],
    schemaDump: { dbUsers: db.dbUsers, path: join(tmp, 'schema.sql') },
    log: (line) => lines.push(line),
    onCycle: (error) => cycles.push(error),
    debounceMs: 50,
  });
  const first = nextCycle();
  await loop.ready;
  expect(await first).toBeUndefined();
});

afterAll(async () => {
  await loop?.close();
  rmSync(tmp, { recursive: true, force: true });
  await db?.drop();
});

describe('dev loop', () => {
  it('applies current.sql on save and regenerates the client when a query file is saved', async () => {
    let done = nextCycle();
    writeFileSync(
      join(tmp, 'migrations', 'current.sql'),
      `create or replace function queues.dev_probe(_n integer) returns text
         language sql immutable set search_path = pg_catalog, pg_temp as $$ select repeat('x', _n) $$;\n`,
    );
    expect(await done).toBeUndefined();
    const { rows } = await db.query(`select queues.dev_probe(3) as probe`);
    expect(rows[0].probe).toBe('xxx');
    expect(readFileSync(join(tmp, 'schema.sql'), 'utf8')).toContain(
      'CREATE OR REPLACE FUNCTION queues.dev_probe(_n integer)',
    );

    done = nextCycle();
    writeFileSync(
      join(tmp, 'client', 'src', 'queries', 'probe.sql'),
      '/* @name ProbeRun */\nselect queues.dev_probe(:n!::integer) as "probe!";\n',
    );
    expect(await done).toBeUndefined();
    const generated = join(tmp, 'client', 'src', 'queries', 'probe.queries.ts');
    expect(existsSync(generated)).toBe(true);
    const source = readFileSync(generated, 'utf8');
    expect(source).toContain('export interface IProbeRunParams {\n  n: number;\n}');
    expect(source).toContain('export interface IProbeRunResult {\n  probe: string;\n}');
  });

  it('reports a broken save and recovers on the next one', async () => {
    let done = nextCycle();
    writeFileSync(join(tmp, 'migrations', 'current.sql'), 'create function oops(;\n');
    const failure = await done;
    expect(failure?.message).toMatch(/syntax error/);

    done = nextCycle();
    writeFileSync(join(tmp, 'migrations', 'current.sql'), '-- fixed\n');
    expect(await done).toBeUndefined();
  });
});
