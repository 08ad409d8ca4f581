import type pg from 'pg';
import type { TestDatabase } from './test-database.js';

/** The server process id of `client`'s session. */
export const backendPid = async (client: pg.Client): Promise<number> =>
  (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;

/**
 * Waits until the session `pid` waits for a lock or `done` has settled: a race's second
 * party is known to be either blocked or finished, with no sleep to guess at it.
 */
export async function untilBlockedOrDone(db: TestDatabase, pid: number, done: Promise<unknown>): Promise<void> {
  let settled = false;
  void done.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (;;) {
    if (settled) return;
    // As root: other roles' sessions show no wait events to the owner.
    const { rows } = await db
      .pool('root')
      .query(`select 1 from pg_stat_activity where pid = $1 and wait_event_type = 'Lock'`, [pid]);
    if (rows.length > 0) return;
    await new Promise((r) => setImmediate(r));
  }
}
