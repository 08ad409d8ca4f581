// Plays the worker by hand, so SQL business processes can be tested without the
// TypeScript worker: claims due tasks with the owner-only queues.claim_tasks_at (the
// clock is an argument, so tests move time instead of sleeping) and processes each one
// exactly as the worker does, calling every business function AS THE WORKER ROLE through
// internal.run_function:
//   db_function          run_function(payload.db_function, payload), then complete
//   email|sms|file_delete run_function(before_handler, payload); the test decides the
//                         provider's outcome; then success_handler({original_payload,
//                         worker_payload}) or error_handler({original_payload, error});
//                         then complete.
import type { TestDatabase } from '@org/testing';

export type Payload = Record<string, unknown>;

export interface ClaimedTask {
  task_id: string;
  task_type: string;
  payload: Payload;
  task_lease_id: string;
}

/** What the provider did with a channel task's before_handler payload. */
export type ProviderOutcome = { ok: true; worker_payload?: unknown } | { ok: false; error: string };

export interface ProcessedTask {
  task: ClaimedTask;
  /** db_function: the function's result. Channel tasks: the before_handler's result. */
  result: Payload;
  /** Channel tasks: what the provider did (absent when the before_handler refused). */
  provider?: ProviderOutcome;
  /** Channel tasks: the success or error handler's result. */
  handlerResult?: Payload;
}

export interface DriveOptions {
  /** Decides each provider call; the default succeeds with {id: 'fake-<task_id>'}. */
  provider?: (task: ClaimedTask, providerPayload: unknown) => ProviderOutcome;
  /** The clock of the first round (default: now + 1 s). */
  start?: Date;
  /** How far the clock moves after each round (default: 2 hours, past any backoff). */
  stepMs?: number;
  /** Stop after this many rounds (default 100). */
  maxRounds?: number;
  /** Only claim these task types (default: all). */
  taskTypes?: string[];
  /**
   * Focus on one root: `provider` decides only for tasks whose payload[rootKey] is rootId
   * (other tasks' providers succeed) and `processed` lists only those tasks. Every due
   * task is still processed, so no task is left leased and unfinished.
   */
  rootKey?: string;
  rootId?: number | string;
}

export interface DriveResult {
  processed: ProcessedTask[];
  rounds: number;
  /** The clock after the last round. */
  clock: Date;
}

/** Runs a function as the worker database user through internal.run_function and returns its result. */
export async function runAsWorker(db: TestDatabase, name: string, payload: unknown): Promise<Payload> {
  const { rows } = await db
    .pool('worker')
    .query<{ result: Payload }>('select internal.run_function($1, $2::jsonb) as result', [
      name,
      JSON.stringify(payload),
    ]);
  return rows[0].result;
}

const succeeded = (envelope: Payload): boolean => envelope.success === true || envelope.status === 'succeeded';

/**
 * Claims every task due at `now` (owner-only claim with a clock). Named arguments, and
 * _max_leases only when the queue has it, so the helper follows the queue's signature.
 */
export async function claimDue(
  db: TestDatabase,
  now: Date,
  taskTypes?: string[],
  workerId = 'test-driver',
): Promise<ClaimedTask[]> {
  const { rows: shape } = await db.query<{ has_max_leases: boolean }>(
    `select exists (select 1 from pg_proc p
                     where p.oid = any(array(select oid from pg_proc where proname = 'claim_tasks_at'
                                               and pronamespace = 'queues'::regnamespace))
                       and '_max_leases' = any(p.proargnames)) as has_max_leases`,
  );
  const { rows } = await db.query<ClaimedTask>(
    `select task_id::text, task_type, payload, task_lease_id::text
       from queues.claim_tasks_at(_now => $1, _worker_id => $3, _limit => 1000,
                                  _task_types => $2, _lease_seconds => 300
                                  ${shape[0].has_max_leases ? ', _max_leases => 5' : ''})`,
    [now, taskTypes ?? null, workerId],
  );
  return rows;
}

/**
 * Claims at `now` until the task with id `taskId` comes back (a task whose lease expired
 * is a suspect, a claim takes one suspect at a time, and a worker holds one named suspect
 * at a time: each claim is a worker of its own); the other tasks claimed on the way are
 * left to their leases. Throws when it does not come back.
 */
export async function claimUntil(db: TestDatabase, now: Date, taskId: string): Promise<ClaimedTask> {
  for (let i = 0; i < 100; i++) {
    const claimed = await claimDue(db, now, undefined, `test-driver-until-${i}`);
    const task = claimed.find((t) => t.task_id === taskId);
    if (task) return task;
    if (claimed.length === 0) break;
  }
  throw new Error(`task ${taskId} was not claimable at ${now.toISOString()}`);
}

/** Processes one claimed task as the worker would, then completes it. */
export async function processTask(
  db: TestDatabase,
  task: ClaimedTask,
  provider: DriveOptions['provider'] = (t) => ({ ok: true, worker_payload: { id: `fake-${t.task_id}` } }),
): Promise<ProcessedTask> {
  let processed: ProcessedTask;
  if (task.task_type === 'db_function') {
    const result = await runAsWorker(db, String(task.payload.db_function), task.payload);
    processed = { task, result };
  } else {
    const result = await runAsWorker(db, String(task.payload.before_handler), task.payload);
    if (!succeeded(result)) {
      const error = String(result.validation_failure_message ?? result.error ?? result.status);
      const handlerResult = await runAsWorker(db, String(task.payload.error_handler), {
        original_payload: task.payload,
        error,
      });
      processed = { task, result, handlerResult };
    } else {
      const outcome = provider(task, result.payload);
      const handlerResult = outcome.ok
        ? await runAsWorker(db, String(task.payload.success_handler), {
            original_payload: task.payload,
            worker_payload: outcome.worker_payload ?? null,
          })
        : await runAsWorker(db, String(task.payload.error_handler), {
            original_payload: task.payload,
            error: outcome.error,
          });
      processed = { task, result, provider: outcome, handlerResult };
    }
  }
  await db
    .pool('worker')
    .query('select queues.complete_task($1, $2, $3)', [
      task.task_id,
      task.task_lease_id,
      succeeded(processed.handlerResult ?? processed.result) && (processed.provider?.ok ?? true)
        ? 'succeeded'
        : 'failed',
    ]);
  return processed;
}

/**
 * Rounds of: claim everything due at the clock, process channel tasks first and then
 * supervisors (so a supervisor sees the outcome of an attempt claimed with it), move the
 * clock. Stops when a round claims nothing, or after maxRounds.
 */
export async function drive(db: TestDatabase, options: DriveOptions = {}): Promise<DriveResult> {
  let clock = options.start ?? new Date(Date.now() + 1000);
  const step = options.stepMs ?? 2 * 60 * 60 * 1000;
  const processed: ProcessedTask[] = [];
  let rounds = 0;
  while (rounds < (options.maxRounds ?? 100)) {
    const tasks = await claimDue(db, clock, options.taskTypes);
    if (tasks.length === 0) break;
    rounds++;
    tasks.sort((a, b) => Number(a.task_type === 'db_function') - Number(b.task_type === 'db_function'));
    for (const task of tasks) {
      const mine = options.rootKey === undefined || String(task.payload[options.rootKey]) === String(options.rootId);
      const done = await processTask(db, task, mine ? options.provider : undefined);
      if (mine) processed.push(done);
    }
    clock = new Date(clock.getTime() + step);
  }
  return { processed, rounds, clock };
}

/** Tasks not yet completed whose payload[key] is id, in queue order. */
export async function pendingFor(
  db: TestDatabase,
  key: string,
  id: number | string,
): Promise<{ task_id: string; task_type: string; scheduled_at: Date; payload: Payload }[]> {
  const { rows } = await db.query<{ task_id: string; task_type: string; scheduled_at: Date; payload: Payload }>(
    `select t.task_id::text, t.task_type, t.scheduled_at, t.payload
       from queues.task t
      where t.payload ->> $1 = $2
        -- unfinished: no end (a task its claim holds has no claim-index row)
        and not exists (select 1 from queues.task_end_of(t.task_id) e)
      order by t.scheduled_at, t.task_id`,
    [key, String(id)],
  );
  return rows;
}

/** Row counts of every table in the given schemas, for "nothing was written" checks. */
export async function rowCounts(db: TestDatabase, schemas: string[]): Promise<Record<string, number>> {
  const { rows } = await db.query<{ relation: string }>(
    `select format('%I.%I', n.nspname, c.relname) as relation
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind in ('r', 'p') and n.nspname = any($1) order by 1`,
    [schemas],
  );
  const counts: Record<string, number> = {};
  for (const { relation } of rows) {
    const { rows: n } = await db.query<{ n: number }>(`select count(*)::int as n from ${relation}`);
    counts[relation] = n[0].n;
  }
  return counts;
}

/** Every row of the given tables, for "exactly the same facts" comparisons. */
export async function snapshot(db: TestDatabase, tables: string[]): Promise<Record<string, unknown[]>> {
  const out: Record<string, unknown[]> = {};
  for (const table of tables) {
    const { rows } = await db.query(`select to_jsonb(t) as row from ${table} t order by 1`);
    out[table] = rows.map((r) => r.row);
  }
  return out;
}
