/**
 * What every scenario gets: a migrated database (one pool per database user), the chaos fixtures,
 * a few waiting helpers, and the checks a scenario reports. The CLI builds the context on
 * its own embedded server (and can restart it); the vitest files build it on a
 * `createTestDatabase()` database.
 */
import { isDeepStrictEqual } from 'node:util';
import pg from 'pg';

export type DbUser = 'root' | 'owner' | 'worker' | 'app' | 'api';

/** The database a scenario runs against (a TestDatabase from @org/testing fits). */
export interface ChaosDb {
  dbUsers: { owner: string; worker: string; app: string; api: string };
  url(dbUser: DbUser): string;
  pool(dbUser: DbUser): pg.Pool;
  /** As the owner. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
}

export interface ChaosContext {
  db: ChaosDb;
  /** Shortened version (counts and durations cut down). */
  quick: boolean;
  log: (line: string) => void;
  /** Restarts PostgreSQL (pg_ctl restart -m fast); only when the harness owns the server. */
  restartServer?: () => Promise<void>;
  /**
   * The server is this run's alone: a scenario may crash it (SIGKILL a backend, which
   * makes the postmaster reset every connection). Not so on the shared test server.
   */
  ownsServer?: boolean;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export type Figure = string | number;

export interface Result {
  figures: Record<string, Figure>;
  checks: Check[];
  skipped?: string;
}

export interface Scenario {
  id: number;
  name: string;
  title: string;
  /** Part of `npm test` (a quick version lives in tools/chaos/test). */
  fast: boolean;
  run(ctx: ChaosContext): Promise<Result>;
}

/** Collects figures and invariant checks. */
export class Report {
  readonly figures: Record<string, Figure> = {};
  readonly checks: Check[] = [];

  figure(name: string, value: Figure): void {
    this.figures[name] = value;
  }

  check(name: string, ok: boolean, detail = ''): boolean {
    this.checks.push({ name, ok, detail });
    return ok;
  }

  /** A check that `actual` equals `expected` (deep; key order does not matter). */
  equal(name: string, actual: unknown, expected: unknown): boolean {
    const same = isDeepStrictEqual(actual, expected);
    const a = JSON.stringify(actual);
    const e = JSON.stringify(expected);
    return this.check(name, same, same ? a : `got ${a.slice(0, 600)}, expected ${e.slice(0, 600)}`);
  }

  result(): Result {
    return { figures: this.figures, checks: this.checks };
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Resolves true when `check` returns true, false after `timeoutMs` (errors count as false). */
export async function waitFor(check: () => Promise<boolean>, timeoutMs: number, stepMs = 100): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await check()) return true;
    } catch {
      // the database may be restarting
    }
    if (Date.now() > deadline) return false;
    await sleep(stepMs);
  }
}

export async function one<R extends pg.QueryResultRow = Record<string, unknown>>(
  db: ChaosDb,
  sql: string,
  params: unknown[] = [],
): Promise<R> {
  return (await db.query<R>(sql, params)).rows[0]!;
}

/** The newest task id, to tell this scenario's tasks from earlier ones. */
export async function lastTaskId(db: ChaosDb): Promise<number> {
  return Number((await one(db, 'select coalesce(max(task_id), 0) as id from queues.task')).id);
}

/** Tasks after `fromId`: total, completed, by outcome, not completed. */
export async function taskTally(db: ChaosDb, fromId: number, where = 'true') {
  const r = await one(
    db,
    `select count(*)::int as total,
            count(c.task_id)::int as completed,
            count(*) filter (where c.outcome = 'succeeded')::int as succeeded,
            count(*) filter (where c.outcome = 'failed')::int as failed,
            count(*) filter (where c.outcome = 'abandoned')::int as abandoned,
            count(*) filter (where c.task_id is null)::int as open
       from queues.task t left join queues.task_end c using (task_id)
      where t.task_id > $1 and ${where}`,
    [fromId],
  );
  return r as { total: number; completed: number; succeeded: number; failed: number; abandoned: number; open: number };
}

/** Tasks after `fromId` not completed yet whose scheduled time has come. */
export async function openDue(db: ChaosDb, fromId: number, where = 'true'): Promise<number> {
  return (
    await one<{ n: number }>(
      db,
      `select count(*)::int as n from queues.task t
        where t.task_id > $1 and t.scheduled_at <= now() and ${where}
          and not exists (select 1 from queues.task_end c where c.task_id = t.task_id)`,
      [fromId],
    )
  ).n;
}

/** Ends this scenario's leftover work (as the owner). */
export async function dropPending(db: ChaosDb, fromId: number): Promise<void> {
  // Ended as cancelled, 1,000 a call: deleting claim-index rows would leave the tasks a
  // claim took out of the claim index (the ready set), which the rescuer gives back.
  for (;;) {
    const { rows } = await db.query<{ ids: string[] }>(
      `select array(select t.task_id from queues.task t
                     where t.task_id > $1 and not exists (select 1 from queues.task_end_of(t.task_id) e)
                     order by t.task_id limit 1000) as ids`,
      [fromId],
    );
    const ids = rows[0]?.ids ?? [];
    if (ids.length === 0) return;
    await db.query(
      `select count(*) from queues.complete_tasks($1::bigint[], null, array_fill('cancelled'::text, array[$2::int]))`,
      [ids, ids.length],
    );
  }
}

/** A pool that survives server restarts and terminated connections. */
export function quietPool(connectionString: string, max = 5): pg.Pool {
  const pool = new pg.Pool({ connectionString, max, application_name: 'chaos' });
  pool.on('error', () => {});
  pool.on('connect', (c) => c.on('error', () => {}));
  return pool;
}

export const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}
