// migrations/current/ after the baseline: missing or empty (a .gitkeep) is fine for migrate and the
// current-migration run, files added later (with includes and placeholders) are applied,
// and `graphile-migrate commit` turns them into the next committed migration.
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { commit } from 'graphile-migrate';
import { clearAllPools } from 'graphile-migrate/dist/pgReal.js';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { compiledMigrations } from '../src/migration-files.js';
import { checkMigrationLocks } from '../src/migration-locks.js';
import { migrateDatabase, migrateSettings } from '../src/migrate.js';
import { repoRoot } from '../src/paths.js';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { withDatabase } from '../src/urls.js';
import { seedQueue } from './support/queue-fixture.js';

const folder = mkdtempSync(join(tmpdir(), 'current-folder-'));
let db: TestDatabase | undefined;
afterAll(async () => {
  clearAllPools();
  rmSync(folder, { recursive: true, force: true });
  await db?.drop();
});

describe('migrations/current/', () => {
  it('may be missing or empty, takes files added later, and commits them as the next migration', async () => {
    cpSync(join(repoRoot(), 'migrations', 'committed'), join(folder, 'committed'), { recursive: true });
    cpSync(join(repoRoot(), 'migrations', 'afterReset.sql'), join(folder, 'afterReset.sql'));
    symlinkSync(join(repoRoot(), 'sql'), join(folder, 'fixtures'));

    db = await createTestDatabase({ empty: true });
    const ctx = inject('queueTestServer');
    const settings = await migrateSettings({
      ownerUrl: db.url('owner'),
      rootUrl: ctx.rootUrl,
      shadowUrl: withDatabase(ctx.rootUrl, `${db.name}_shadow`, db.dbUsers.owner, ctx.dbUserPasswords.owner),
      dbUsers: db.dbUsers,
      quiet: true,
    });
    settings.migrationsFolder = folder;

    // Missing: the folder is made, and no current.sql (which would clash with current/).
    await migrateDatabase(settings);
    expect(readdirSync(join(folder, 'current'))).toEqual([]);
    expect(existsSync(join(folder, 'current.sql'))).toBe(false);

    // Empty: migrate and the current run work, and write nothing.
    writeFileSync(join(folder, 'current', '.gitkeep'), '');
    await migrateDatabase(settings);
    expect(readdirSync(join(folder, 'current'))).toEqual(['.gitkeep']);
    expect(existsSync(join(folder, 'current.sql'))).toBe(false);

    // Two engineers' files, one with an include and a placeholder.
    writeFileSync(
      join(folder, 'current', '110-semantic.sql'),
      `set local lock_timeout = '5s';
create table if not exists queues.current_probe (id bigint primary key);
--!include queues/triggers.sql
`,
    );
    writeFileSync(
      join(folder, 'current', '310-dashboard.sql'),
      `set local lock_timeout = '5s';
create or replace function admin.current_probe() returns int language sql immutable set search_path = pg_catalog, pg_temp as $$ select 310 $$;
revoke execute on function admin.current_probe() from public;
grant execute on function admin.current_probe() to :DATABASE_API;
`,
    );
    await migrateDatabase(settings);
    const { rows } = await db.pool('api').query('select admin.current_probe() as n');
    expect(rows[0]).toEqual({ n: 310 });

    await commit(settings, 'Current probe');
    const committed = readdirSync(join(folder, 'committed')).sort();
    expect(committed.slice(-1)).toEqual([`${String(committed.length).padStart(6, '0')}-current-probe.sql`]);
    const text = readFileSync(join(folder, 'committed', committed.at(-1)!), 'utf8');
    expect(text).toContain('--! split: 110-semantic.sql');
    expect(text).toContain('--! Included queues/triggers.sql');
    expect(text).toContain('grant execute on function admin.current_probe() to :DATABASE_API;');
    // After a commit graphile-migrate leaves one file with the blank content of .gmrc.
    expect(readdirSync(join(folder, 'current')).sort()).toEqual(['.gitkeep', '1-current.sql']);

    // The new history passes the lock check, the blank current file included.
    const fresh = await createTestDatabase({ empty: true });
    try {
      const freshSettings = { ...settings, connectionString: fresh.url('owner') };
      const migrations = await compiledMigrations(freshSettings);
      expect(migrations.map((m) => m.name).slice(-2)).toEqual([committed.at(-1), 'current/1-current.sql']);
      const reports = await checkMigrationLocks({
        url: fresh.url('owner'),
        migrations,
        seed: async (c) => void (await seedQueue(c)),
      });
      expect(reports.flatMap((r) => r.problems)).toEqual([]);
    } finally {
      await fresh.drop();
    }
  });
});
