// The committed generated clients match what pgtyped makes from the current SQL, and
// the pgtyped wrapper fails on errors that pgtyped itself reports with exit code 0.
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { clientPackages, runPgtyped } from '../src/codegen.js';

let db: TestDatabase;
const temps: string[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  for (const dir of temps) rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

/** A copy of a client package's pgtyped config and .sql files, in the same layout. */
function copyQueries(pkg: string): string {
  const config = JSON.parse(readFileSync(join(pkg, 'pgtyped.json'), 'utf8')) as { srcDir: string };
  const tmp = mkdtempSync(join(tmpdir(), 'codegen-'));
  temps.push(tmp);
  cpSync(join(pkg, 'pgtyped.json'), join(tmp, 'pgtyped.json'));
  mkdirSync(join(tmp, config.srcDir), { recursive: true });
  for (const file of readdirSync(join(pkg, config.srcDir)).filter((f) => f.endsWith('.sql'))) {
    cpSync(join(pkg, config.srcDir, file), join(tmp, config.srcDir, file));
  }
  return join(tmp, config.srcDir);
}

describe('generated clients', () => {
  const packages = clientPackages();

  it('there is at least one client package', () => {
    expect(packages.map((p) => basename(p))).toContain('queue-client');
  });

  it.each(packages.map((p) => [basename(p), p]))('%s: regenerating changes nothing', async (_name, pkg) => {
    const queries = copyQueries(pkg);
    await runPgtyped({ cwd: join(queries, '..', '..'), config: 'pgtyped.json', databaseUrl: db.url('owner') });
    const config = JSON.parse(readFileSync(join(pkg, 'pgtyped.json'), 'utf8')) as { srcDir: string };
    const committedDir = join(pkg, config.srcDir);
    const generated = readdirSync(queries)
      .filter((f) => f.endsWith('.queries.ts'))
      .sort();
    const committed = readdirSync(committedDir)
      .filter((f) => f.endsWith('.queries.ts'))
      .sort();
    expect(committed, 'a committed generated file has no .sql source, or one is missing').toEqual(generated);
    for (const file of generated) {
      expect(readFileSync(join(committedDir, file), 'utf8'), `${file} differs: run npm run codegen`).toBe(
        readFileSync(join(queries, file), 'utf8'),
      );
    }
  });

  it('a query that does not type fails the run, although pgtyped exits 0', async () => {
    const queries = copyQueries(packages[0]);
    writeFileSync(join(queries, 'broken.sql'), '/* @name Broken */\nselect nope from queues.nothing;\n');
    await expect(
      runPgtyped({ cwd: join(queries, '..', '..'), config: 'pgtyped.json', databaseUrl: db.url('owner') }),
    ).rejects.toThrow(/pgtyped failed[\s\S]*relation "queues.nothing" does not exist/);
    expect(existsSync(join(queries, 'broken.queries.ts'))).toBe(false);
  });
});
