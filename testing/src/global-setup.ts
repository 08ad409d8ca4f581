// vitest globalSetup: one PostgreSQL server per test run (embedded in test-<pid>_<time>
// under /dev/shm or .data/, see serverRoot; or the admin DATABASE_URL), with a migrated
// template database that every test file clones (see createTestDatabase).
import { mkdirSync, readdirSync, rmSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { openServer, provisionDatabase, withRootClient } from '@org/db-tools/server';
import type { TestServerContext } from './context.js';

const TMPFS_MAGIC = 0x01021994;
const MEMORY_ROOT = '/dev/shm/pg-task-queue-tests';

/**
 * Where the embedded server keeps its data: in memory (a folder in /dev/shm) when that is
 * a tmpfs with 4 GiB free, else .data/ (undefined). The server lives for one run and is
 * deleted after it. On a disk, every file PostgreSQL creates goes through the file
 * system's inode allocation, and a run creates tens of thousands: each test file's clone
 * of the template is some 200 files (on an ext4 disk busy with a run's deletions a clone
 * took 0.2 to 1.2 s of the server's CPU, 0.1 s in memory), and every partition a test
 * makes is more.
 */
function serverRoot(): string | undefined {
  try {
    const fs = statfsSync('/dev/shm');
    if (fs.type !== TMPFS_MAGIC || fs.bavail * fs.bsize < 4 * 2 ** 30) return undefined;
    mkdirSync(MEMORY_ROOT, { recursive: true });
    removeOrphans(MEMORY_ROOT);
    return MEMORY_ROOT;
  } catch {
    return undefined;
  }
}

/**
 * Removes what runs whose process is gone left in memory (a run killed before its
 * teardown): the folder test-<pid>_<time> and its credentials file beside it. The runs of
 * other checkouts that are still alive are left alone.
 */
function removeOrphans(root: string): void {
  for (const name of readdirSync(root)) {
    const pid = Number(/^test-(\d+)_/.exec(name)?.[1]);
    if (!pid || isAlive(pid)) continue;
    rmSync(join(root, name), { recursive: true, force: true });
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const runId = `${process.pid}_${Date.now().toString(36)}`;
  const server = await openServer({
    name: `test-${runId}`,
    root: process.env.DATABASE_URL ? undefined : serverRoot(),
    adminUrl: process.env.DATABASE_URL,
  });
  const template = `queue_template_${runId}`;
  try {
    if (server.kind === 'embedded') {
      // A server that lives for one run and is deleted after it: nothing it writes needs to
      // survive a crash of the machine, so it does not wait for the disk (each test file's
      // copy of the template, 18 MB of WAL, took a second or more; every commit waited on
      // an fsync). A crashed backend still recovers (the files are in the OS's cache); the
      // tests of durability itself (tools/db/test/standby.test.ts, tools/chaos) run on
      // servers of their own, with the defaults.
      await withRootClient(server, async (root) => {
        for (const [name, value] of [
          ['fsync', 'off'],
          ['synchronous_commit', 'off'],
          ['full_page_writes', 'off'],
        ])
          await root.query(`alter system set ${name} = '${value}'`);
        await root.query('select pg_reload_conf()');
      });
    }
    const urls = await provisionDatabase(server, template, { fresh: true, quiet: true });
    // Test databases start quiet: the history maintenance schedule the migration installs
    // (every 10 minutes, forever) would keep a schedules supervisor alive in every test
    // that drives schedules to the end. Tests of that schedule enable it.
    const owner = new pg.Client({ connectionString: urls.owner });
    await owner.connect();
    try {
      await owner.query(
        `select schedules.append_schedule_version(now(), v.schedule_id, v.cron, v.task_type, v.payload,
                                                  v.priority, v.missed_run_policy, false)
           from schedules.schedule s, schedules.current_version(s.schedule_id) v
          where s.name = 'queue_history_maintenance'`,
      );
    } finally {
      await owner.end();
    }
  } catch (error) {
    await server.stop({ destroy: true });
    throw error;
  }
  const context: TestServerContext = {
    rootUrl: server.rootUrl,
    dbUsers: server.dbUsers,
    dbUserPasswords: server.dbUserPasswords,
    template,
    prefix: `queue_test_${runId}_`,
  };
  project.provide('queueTestServer', context);

  return async () => {
    if (server.kind === 'external') {
      await withRootClient(server, async (root) => {
        const { rows } = await root.query<{ datname: string }>(
          `select datname from pg_database where datname = $1 or starts_with(datname, $2)`,
          [template, context.prefix],
        );
        for (const { datname } of rows) {
          await root.query(`drop database if exists ${root.escapeIdentifier(datname)} with (force)`);
        }
      });
    }
    await server.stop({ destroy: true });
  };
}
