/**
 * The queue's public face: tasks, leases and completions, mapped from the generated
 * queries (./queries/*.queries.ts, never exported) to camelCase types.
 *
 * Terminology
 *   task       a unit of work (queues.task), immutable once enqueued
 *   lease      a claim of tasks by a worker until expiresAt (queues.claim_lease: one per claim)
 *   completed  the terminal fact: the task is never claimed again (queues.task_completed)
 *   error      an operational error reported against a task (queues.error)
 *
 * States, derived from the facts (docs/glossary.md, "Task states"; admin.task_states())
 *   scheduled  not completed, scheduledAt in the future
 *   ready      not completed, scheduledAt reached, no live lease      -> claimed by claimTasks
 *   running    not completed, a live lease                           -> completed, or ready
 *                                                                        again when it expires
 *   retrying   not completed, a failed attempt or an interruption    -> ready at its retry time
 *              waiting for its retry time
 *   waiting    not completed, enqueued with dependsOn, some dependency    -> ready when all succeeded,
 *              still pending                                                failed when one did not
 *   completed  outcome succeeded | failed | abandoned | cancelled | validation_failed   (terminal)
 */
import {
  functionRun,
  functionRunBeforeProviderCall,
  functionRunBeforeProviderCallTraced,
  functionRunBeforeProviderCalls,
  functionRunTraced,
} from './queries/function.queries.js';
import {
  taskClaim,
  taskNextClaimIn,
  taskComplete,
  taskCompleteMany,
  taskDequeueNextAvailable,
  taskEnqueue,
  taskEnqueueAndCommit,
  taskEnqueueMany,
  taskEnqueueManyTraced,
  taskEnqueueTraced,
  taskEnqueueUnique,
  taskEnqueueUniqueTraced,
  taskExtendLeases,
  taskFail,
  taskInterrupt,
  taskReleaseLeases,
  taskRunSteps,
  taskSettle,
  taskSettleWithHandler,
  taskSettleWithHandlerTraced,
  taskSettleWithHandlers,
  taskMarkStarted,
  taskTraceContextSet,
  taskTraces,
  type ITaskClaimResult,
} from './queries/task.queries.js';
import pg from 'pg';
import type { Queryable } from './connection.js';
import { mapErrors, QueueError, toQueueError } from './errors.js';
import { isNestedDeeperThan, MAX_PAYLOAD_DEPTH, serialisationError, toJsonText } from './json.js';
import { prepared } from './prepared.js';
import { activeTraceContext, tracingEnabled, withSendSpan, type TraceContext } from './tracing.js';

/** A bigint id, as a decimal string (PostgreSQL bigint exceeds JavaScript's safe integers). */
export type Id = string;

export type JsonObject = { [key: string]: unknown };

export interface NewTask {
  taskType: string;
  payload: JsonObject;
  /** Not claimed before this time (default: now). */
  scheduledAt?: Date;
  /** Higher runs first, -1000..1000 (default 0). */
  priority?: number;
  /** At most one task per resource key is leased at a time. */
  resourceKey?: string;
  /**
   * What flow limits count the task by within its type, 1..200 characters (a tenant, a
   * provider account): see `setTaskLimit` and docs/flow-control.md.
   */
  groupKey?: string;
  /**
   * Runs allowed, 1..100 (default 25: a failure is retried after a backoff of 5 s, 10 s,
   * 20 s, ... capped at an hour; `queues.default_max_attempts()`).
   */
  maxAttempts?: number;
  /**
   * This task's run timeout, 1..86400000 ms (24 hours), in place of its type's
   * (docs/flow-control.md "Run timeouts"). Default: the type's.
   */
  timeoutMs?: number;
  /** At most one pending task per key: see {@link UniqueOptions}. */
  unique?: UniqueOptions;
  /**
   * Tasks this one waits for (fan-in, sql/queues/dependencies.sql): it stays `waiting`,
   * never claimed, until every one has ended; it runs when all succeeded, and is completed
   * 'failed' (with an error naming the dependency) when one failed, was cancelled or was
   * abandoned. Each must be a task that exists already (not found otherwise, nothing
   * written), so dependencies never form a cycle; at most 100. The
   * processor reads their outcomes and results with `ctx.dependencies()`.
   */
  dependsOn?: Id[];
}

/** The states of a task (admin.task_states(); docs/glossary.md, "Task states"). */
export type TaskState =
  | 'waiting'
  | 'scheduled'
  | 'ready'
  | 'running'
  | 'retrying'
  | 'succeeded'
  | 'failed'
  | 'abandoned'
  | 'cancelled'
  | 'validation_failed';

/**
 * What an enqueue with a unique key does when a task with that key is pending (not
 * completed), sql/queues/unique.sql:
 *   skip      write nothing, answer the pending task's id (default)
 *   replace   a new task with this payload and time; the pending one is cancelled
 *             ('replaced by task N') unless a worker is running it, which then runs on
 *   debounce  as replace, the new task due `periodMs` after `scheduledAt` (default now)
 * `timeoutMs`, `groupKey` and `dependsOn` belong to the task enqueued: skip keeps the
 * pending task's own; replace and debounce give the new task exactly what is given
 * (nothing carried over). A pending task other tasks depend on is not replaced (the
 * enqueue is refused, SQLSTATE 55000), and a replacement cannot depend on the task it replaces.
 */
export type UniquePolicy = 'skip' | 'replace' | 'debounce';

export interface UniqueOptions {
  /** 1..200 characters, shared by every task type: name it for what it guards (`sync:user:42`). */
  key: string;
  policy?: UniquePolicy;
  /** debounce only: the delay after the latest enqueue, in milliseconds (>= 0). */
  periodMs?: number;
}

/** What an enqueue with a unique key did: `taskId` is the new task's, or the pending one's when skipped. */
export type EnqueueOutcome = 'inserted' | 'skipped' | 'replaced';

export interface UniqueEnqueueResult {
  taskId: Id;
  outcome: EnqueueOutcome;
  /** The pending task this enqueue replaced ('replaced' only). */
  replacedTaskId: Id | null;
}

function periodInterval(unique: UniqueOptions | undefined): string | undefined {
  const ms = unique?.periodMs;
  if (ms === undefined || ms === null) return undefined;
  if (typeof ms !== 'number' || !Number.isFinite(ms)) {
    throw new QueueError(`unique.periodMs must be a finite number of milliseconds, got ${String(ms)}`, 'invalid_input');
  }
  return `${ms} milliseconds`;
}

export interface Task {
  taskId: Id;
  taskType: string;
  payload: JsonObject;
  priority: number;
  resourceKey: string | null;
  maxAttempts: number;
  enqueuedAt: Date;
  scheduledAt: Date;
}

/**
 * A task with its lease. In what claimTasks returns, the four times (enqueuedAt,
 * scheduledAt, leasedAt, expiresAt) are getters, each read a new Date: a spread
 * (`{ ...task }`) or structuredClone copies the other fields only, while JSON.stringify
 * (and so a logger) writes them all.
 */
export interface ClaimedTask extends Task {
  taskLeaseId: Id;
  leasedAt: Date;
  expiresAt: Date;
  /** How many leases this task has had, this one included. */
  leaseCount: number;
  /** The task's own run timeout (NewTask.timeoutMs), ms; null: its type's. */
  timeoutMs?: number | null;
}

export interface ClaimOptions {
  workerId: string;
  /** Up to this many tasks, 1..1000 (default 1). */
  limit?: number;
  /** Only these task types (default: any). */
  taskTypes?: string[];
  /** Lease length, 1..86400 seconds (default 300). */
  leaseSeconds?: number;
  /** A task whose leases expired this many times is abandoned instead (1..100, default 5). */
  maxLeases?: number;
  /**
   * Which suspects (tasks whose lease ended without an end) the claim may take:
   * 'any' (default); 'no_repeat', none whose death already counted (a process pool's
   * working process, beside its quarantine); 'repeat', only those (the quarantine).
   */
  suspects?: ClaimSuspects;
}

export type ClaimSuspects = 'any' | 'no_repeat' | 'repeat';

/**
 * How a task ended. validation_failed: its function or before handler returned a
 * validation_failure_message, a business outcome no retry can mend: final, and not a
 * dead letter (failed and abandoned tasks are).
 */
export type CompletionOutcome = 'succeeded' | 'failed' | 'abandoned' | 'cancelled' | 'validation_failed';

export interface Completion {
  taskId: Id;
  /** The lease the caller holds: completion is refused once a newer lease exists. */
  taskLeaseId?: Id;
  /**
   * Omitted: 'failed' when an error was recorded against the task during its current run
   * (failTask, the seeds' "record failure, then always complete"), else 'succeeded'.
   */
  outcome?: CompletionOutcome;
  /**
   * false: a 'failed' outcome is final even with attempts left (a failure no retry can
   * mend, such as a validation failure). Default true.
   */
  retry?: boolean;
  /** When the run that ends here started (kept with the completion); omitted: not known. */
  startedAt?: Date;
}

export type CompletionResult = 'completed' | 'retry_scheduled' | 'already_completed' | 'lease_lost' | 'unknown_task';

function asObject(value: unknown): JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as JsonObject) : {};
}

/**
 * Adds a task; returns its id.
 *
 * On a pool the call is its own transaction: `queues.enqueue_and_commit` commits the
 * task, then wakes the workers in a second transaction that writes nothing, so concurrent
 * callers do not commit one at a time behind PostgreSQL's notification lock (see
 * sql/queues/enqueue.sql). On a client (say inside `withTransaction`) it joins the
 * client's transaction and the wake-up goes out at its commit, one per transaction
 * however many tasks it enqueues.
 *
 * With an OpenTelemetry SDK registered, a PRODUCER span `send <task type>` (./tracing.ts)
 * whose context is stored with the task (queues.task_trace): the worker's span of the task
 * continues it. The enqueue is then one statement that sets the context for its own
 * transaction, on a pool too (its wake-up goes out at that commit: the two-transaction
 * queues.enqueue_and_commit cannot take the context).
 */
export async function enqueue(db: Queryable, task: NewTask): Promise<Id> {
  if (task.unique) return (await enqueueUnique(db, { ...task, unique: task.unique })).taskId;
  if (tracingEnabled())
    return withSendSpan(
      [task.taskType],
      (context) => enqueueOne(db, task, context),
      (id) => [id],
    );
  return enqueueOne(db, task);
}

async function enqueueOne(db: Queryable, task: NewTask, trace?: TraceContext): Promise<Id> {
  const params = {
    taskType: task.taskType,
    payload: toJsonText(task.payload, 'payload', MAX_PAYLOAD_DEPTH),
    scheduledAt: task.scheduledAt,
    priority: task.priority,
    resourceKey: task.resourceKey,
    maxAttempts: task.maxAttempts,
    dependsOn: task.dependsOn?.length ? task.dependsOn : undefined,
    groupKey: task.groupKey,
    timeoutMs: task.timeoutMs,
  };
  if (trace) {
    const [row] = await mapErrors(taskEnqueueTraced.run({ ...trace, ...params }, db));
    if (!row) throw new Error('queues.enqueue returned no row');
    return row.taskId;
  }
  if (db instanceof pg.Pool) {
    const [row] = await mapErrors(
      taskEnqueueAndCommit.run(params, prepared('queue_client_task_enqueue_and_commit', db)),
    );
    if (!row?._task_id) throw new Error('queues.enqueue_and_commit returned no task id');
    return row._task_id;
  }
  const [row] = await mapErrors(taskEnqueue.run(params, prepared('queue_client_task_enqueue', db)));
  if (!row) throw new Error('queues.enqueue returned no row');
  return row.taskId;
}

/**
 * Adds a task with a unique key (`queues.enqueue_unique`) and says what happened:
 * inserted, skipped (a task with the key is pending; its id is answered) or replaced.
 * Concurrent callers with one key are serialised on the key, so they leave one pending
 * task. On a pool the call is a transaction of its own; on a client it joins the
 * client's transaction (and holds the key until it ends).
 */
export async function enqueueUnique(
  db: Queryable,
  task: NewTask & { unique: UniqueOptions },
): Promise<UniqueEnqueueResult> {
  if (tracingEnabled())
    return withSendSpan(
      [task.taskType],
      (context) => enqueueUniqueOne(db, task, context),
      (r) => (r.outcome === 'skipped' ? [] : [r.taskId]),
    );
  return enqueueUniqueOne(db, task);
}

async function enqueueUniqueOne(
  db: Queryable,
  task: NewTask & { unique: UniqueOptions },
  trace?: TraceContext,
): Promise<UniqueEnqueueResult> {
  const params = {
    taskType: task.taskType,
    payload: JSON.stringify(task.payload),
    uniqueKey: task.unique.key,
    uniquePolicy: task.unique.policy,
    uniquePeriod: periodInterval(task.unique),
    scheduledAt: task.scheduledAt,
    priority: task.priority,
    resourceKey: task.resourceKey,
    maxAttempts: task.maxAttempts,
    dependsOn: task.dependsOn?.length ? task.dependsOn : undefined,
    groupKey: task.groupKey,
    timeoutMs: task.timeoutMs,
  };
  const [row] = await mapErrors(
    trace
      ? taskEnqueueUniqueTraced.run({ ...trace, ...params }, db)
      : taskEnqueueUnique.run(params, prepared('queue_client_task_enqueue_unique', db)),
  );
  if (!row) throw new Error('queues.enqueue_unique returned no row');
  return { taskId: row.taskId, outcome: row.outcome as EnqueueOutcome, replacedTaskId: row.replacedTaskId };
}

/**
 * Adds up to 10,000 tasks in one statement, all or nothing; returns their ids in order.
 * A task with `unique` answers the pending task's id when its policy skips; a batch with
 * any unique task is enqueued one task after another (in order) inside the statement.
 */
export async function enqueueMany(db: Queryable, tasks: NewTask[]): Promise<Id[]> {
  if (tracingEnabled() && tasks.length > 0)
    return withSendSpan(
      tasks.map((t) => t.taskType),
      (context) => enqueueBatch(db, tasks, context),
      (ids) => ids,
    );
  return enqueueBatch(db, tasks);
}

async function enqueueBatch(db: Queryable, tasks: NewTask[], trace?: TraceContext): Promise<Id[]> {
  const json = tasks.map((t) => ({
    task_type: t.taskType,
    payload: t.payload,
    scheduled_at: t.scheduledAt?.toISOString(),
    priority: t.priority,
    resource_key: t.resourceKey,
    max_attempts: t.maxAttempts,
    group_key: t.groupKey,
    timeout_ms: t.timeoutMs,
    unique_key: t.unique?.key,
    unique_policy: t.unique?.policy,
    unique_period: periodInterval(t.unique),
    depends_on: t.dependsOn?.length ? t.dependsOn : undefined,
  }));
  // The ids come back as one array in input order: one row to send and parse, not one per task.
  let text: string;
  try {
    text = JSON.stringify(json);
  } catch (err) {
    // Name the task whose payload is too deep, in the database's words (queues.enqueue_many).
    const i = tasks.findIndex((t) => isNestedDeeperThan(t.payload, MAX_PAYLOAD_DEPTH));
    throw i >= 0
      ? serialisationError(err, tasks[i]!.payload, `tasks[${i}]: payload`, MAX_PAYLOAD_DEPTH)
      : serialisationError(err, json, 'tasks');
  }
  const [row] = await mapErrors(
    trace ? taskEnqueueManyTraced.run({ ...trace, tasks: text }, db) : taskEnqueueMany.run({ tasks: text }, db),
  );
  if (!row) throw new Error('queues.enqueue_many returned no row');
  return row.taskIds;
}

/** Claims up to `limit` ready tasks, each with a new lease. */
export async function claimTasks(db: Queryable, options: ClaimOptions): Promise<ClaimedTask[]> {
  const rows = await mapErrors(
    taskClaim.run(
      {
        workerId: options.workerId,
        limit: options.limit,
        taskTypes: options.taskTypes,
        leaseSeconds: options.leaseSeconds,
        maxLeases: options.maxLeases,
        suspects: options.suspects,
      },
      prepared('queue_client_task_claim', db),
    ),
  );
  // The tasks of one claim share its lease id, and mostly their task type: one string
  // each, kept by every task of the claim, rather than a copy per task.
  let leaseId: Id | undefined;
  let taskType: string | undefined;
  return rows.map((r) => {
    leaseId = r.taskLeaseId === leaseId ? leaseId : r.taskLeaseId;
    taskType = r.taskType === taskType ? taskType : r.taskType;
    return new CompactClaimedTask(r, leaseId, taskType);
  });
}

/**
 * A claimed task as a worker holds it: its four times kept as milliseconds since the
 * epoch (the claim's statement returns them so, truncated to the millisecond as a parsed
 * timestamptz would be), each made into a Date when read. A worker holds hundreds of
 * claimed tasks at once, long enough for many of them to outlive a young-generation
 * collection, and what outlives one counts in the worker's resident memory: a Date is
 * about a hundred bytes of heap, a number in a field sixteen. JSON (toJSON) and the
 * property names are those of ClaimedTask.
 */
class CompactClaimedTask implements ClaimedTask {
  readonly taskId: Id;
  readonly taskType: string;
  readonly payload: JsonObject;
  readonly priority: number;
  readonly resourceKey: string | null;
  readonly maxAttempts: number;
  readonly taskLeaseId: Id;
  readonly leaseCount: number;
  readonly timeoutMs: number | null;
  readonly #enqueuedAt: number;
  readonly #scheduledAt: number;
  readonly #leasedAt: number;
  readonly #expiresAt: number;

  constructor(row: ITaskClaimResult, taskLeaseId: Id, taskType: string) {
    this.taskId = row.taskId;
    this.taskType = taskType;
    this.payload = asObject(row.payload);
    this.priority = row.priority;
    this.resourceKey = row.resourceKey;
    this.maxAttempts = row.maxAttempts;
    this.taskLeaseId = taskLeaseId;
    this.leaseCount = row.leaseCount;
    this.timeoutMs = row.timeoutMs;
    this.#enqueuedAt = row.enqueuedAtMs;
    this.#scheduledAt = row.scheduledAtMs;
    this.#leasedAt = row.leasedAtMs;
    this.#expiresAt = row.expiresAtMs;
  }

  get enqueuedAt(): Date {
    return new Date(this.#enqueuedAt);
  }

  get scheduledAt(): Date {
    return new Date(this.#scheduledAt);
  }

  get leasedAt(): Date {
    return new Date(this.#leasedAt);
  }

  get expiresAt(): Date {
    return new Date(this.#expiresAt);
  }

  toJSON(): Record<keyof ClaimedTask, unknown> {
    return {
      taskId: this.taskId,
      taskType: this.taskType,
      payload: this.payload,
      priority: this.priority,
      resourceKey: this.resourceKey,
      maxAttempts: this.maxAttempts,
      enqueuedAt: this.enqueuedAt,
      scheduledAt: this.scheduledAt,
      taskLeaseId: this.taskLeaseId,
      leasedAt: this.leasedAt,
      expiresAt: this.expiresAt,
      leaseCount: this.leaseCount,
      timeoutMs: this.timeoutMs,
    };
  }
}

/**
 * Milliseconds until the earliest task of `taskTypes` (null: any) without a lease is
 * scheduled, by the database's clock; null when none is scheduled later than `missedMs`
 * milliseconds ago. A worker whose claim came back short sleeps until then (or its poll
 * interval), and passes as `missedMs` the time since it sent that claim: a task that fell
 * due after the claim took its clock answers 0.
 */
export async function nextClaimInMs(
  db: Queryable,
  taskTypes: string[] | null = null,
  missedMs = 0,
): Promise<number | null> {
  const [row] = await mapErrors(
    taskNextClaimIn.run({ taskTypes, missedMs }, prepared('queue_client_task_next_claim_in', db)),
  );
  return row?.ms ?? null;
}

/** The seeds' single claim: one ready task with a new lease, or null. */
export async function dequeueNextAvailableTask(
  db: Queryable,
  options: { workerId?: string; leaseSeconds?: number } = {},
): Promise<Task | null> {
  const [row] = await mapErrors(taskDequeueNextAvailable.run(options, db));
  return row ? { ...row, payload: asObject(row.payload) } : null;
}

/**
 * Completes a task. Idempotent: true when this call completed it, false when it was
 * completed before. Throws QueueError 'lease_lost' when `taskLeaseId` is no longer the
 * task's current lease, 'not_found' for an unknown task.
 */
export async function completeTask(db: Queryable, completion: Completion): Promise<boolean> {
  const [row] = await mapErrors(taskComplete.run(completion, db));
  return row?.completed ?? false;
}

/** Completes many tasks in one statement; one result per task, in input order. */
export async function completeTasks(
  db: Queryable,
  completions: Completion[],
): Promise<{ taskId: Id; result: CompletionResult }[]> {
  if (completions.length === 0) return [];
  const rows = await mapErrors(
    taskCompleteMany.run(
      {
        taskIds: completions.map((c) => c.taskId),
        taskLeaseIds: completions.map((c) => c.taskLeaseId ?? null) as string[],
        outcomes: completions.map((c) => c.outcome ?? null) as string[],
        retries: completions.map((c) => c.retry ?? null) as boolean[],
        startedAt: completions.map((c) => c.startedAt ?? null) as Date[],
      },
      prepared('queue_client_task_complete_many', db),
    ),
  );
  const byId = new Map(rows.map((r) => [r.taskId, r.result as CompletionResult]));
  return completions.map((c) => ({ taskId: c.taskId, result: byId.get(String(c.taskId)) ?? 'unknown_task' }));
}

/** A completion with the error messages recorded beside it (only if it is accepted). */
export interface Settlement extends Completion {
  errors?: string[];
}

/** Microseconds since the epoch (how start times travel to queues.settle_tasks). */
function epochMicros(date: Date | undefined): string | null {
  return date === undefined ? null : String(date.getTime() * 1000);
}

/**
 * The worker's completer, in one statement (queues.settle_tasks): completes
 * `completions`, each with its error rows and its run's start, fenced by its lease. One
 * result per completion, in input order.
 */
export async function settleTasks(
  db: Queryable,
  completions: Settlement[],
): Promise<{ taskId: Id; result: CompletionResult }[]> {
  if (completions.length === 0) return [];
  const errors = completions.flatMap((c) => (c.errors ?? []).map((message) => ({ taskId: c.taskId, message })));
  const rows = await mapErrors(
    taskSettle.run(
      {
        taskIds: completions.map((c) => c.taskId),
        taskLeaseIds: completions.map((c) => c.taskLeaseId ?? null) as string[],
        outcomes: completions.map((c) => c.outcome ?? null) as string[],
        retries: completions.map((c) => c.retry ?? null) as boolean[],
        errorTaskIds: errors.map((e) => e.taskId),
        errorMessages: errors.map((e) => e.message),
        startedUs: completions.map((c) => epochMicros(c.startedAt)) as string[],
      },
      prepared('queue_client_task_settle', db),
    ),
  );
  const byId = new Map(rows.map((r) => [r.taskId, r.result as CompletionResult]));
  return completions.map((c) => ({ taskId: c.taskId, result: byId.get(String(c.taskId)) ?? 'unknown_task' }));
}

/** A call of a success or error handler with its task's completion (see settleWithHandler). */
export interface HandlerCall {
  /** The runnable function (internal.run_function) and its argument. */
  functionName: string;
  body: JsonObject;
  /**
   * 'success': the task succeeded and the handler records it (a handler failure fails the
   * task); 'error': the task failed and the handler deals with it (a handler failure is
   * one more error row).
   */
  mode: 'success' | 'error';
  /** What precedes the message of a raise in the error recorded. */
  raisedPrefix: string;
}

/**
 * A completion and its handler in one statement (queues.settle_with_handler): the handler
 * runs in a subtransaction, its envelope decides the outcome and errors recorded, and the
 * completion is fenced by the lease; if it is refused, nothing commits. Returns the result
 * with the outcome and errors recorded (or refused). `traceparent` (the handler's span):
 * the trace context of the tasks the handler enqueues (sql/queues/trace.sql).
 */
export async function settleWithHandler(
  db: Queryable,
  completion: Settlement & { taskLeaseId: Id; outcome: 'succeeded' | 'failed' | 'validation_failed' },
  handler: HandlerCall,
  traceparent?: string,
): Promise<{ result: CompletionResult; outcome: CompletionOutcome; errors: string[] }> {
  const params = {
    taskId: completion.taskId,
    taskLeaseId: completion.taskLeaseId,
    outcome: completion.outcome,
    errors: completion.errors ?? [],
    retry: completion.retry ?? null,
    handler: handler.functionName,
    body: handler.body,
    mode: handler.mode,
    raisedPrefix: handler.raisedPrefix,
    startedAt: completion.startedAt ?? null,
  };
  const rows = await mapErrors(
    traceparent
      ? taskSettleWithHandlerTraced.run({ ...params, traceparent }, db)
      : taskSettleWithHandler.run(params, prepared('queue_client_task_settle_with_handler', db)),
  );
  const row = rows[0]!;
  return { result: row.result as CompletionResult, outcome: row.outcome as CompletionOutcome, errors: row.errors };
}

/** A completion with its handler, one of many (see settleWithHandlers). */
export interface HandlerSettlement {
  completion: Settlement & { taskLeaseId: Id; outcome: 'succeeded' | 'failed' | 'validation_failed' };
  handler: HandlerCall;
  /** The handler's span: the trace context of the tasks it enqueues. */
  traceparent?: string;
}

/**
 * Many completions with their handlers in one statement (queues.settle_with_handlers):
 * each as settleWithHandler, with one completion statement and one commit for all. A
 * refused completion commits nothing of its task (its handler's writes included) and the
 * others commit. Returns one answer per completion, in input order; the result
 * 'transient' (a serialization failure or deadlock in its handler) recorded nothing.
 */
export async function settleWithHandlers(
  db: Queryable,
  settlements: HandlerSettlement[],
): Promise<{ result: CompletionResult | 'transient'; outcome: CompletionOutcome | null; errors: string[] }[]> {
  if (settlements.length === 0) return [];
  const errors = settlements.flatMap(({ completion: c }) =>
    (c.errors ?? []).map((message) => ({ taskId: c.taskId, message })),
  );
  const rows = await mapErrors(
    taskSettleWithHandlers.run(
      {
        taskIds: settlements.map((s) => s.completion.taskId),
        taskLeaseIds: settlements.map((s) => s.completion.taskLeaseId),
        outcomes: settlements.map((s) => s.completion.outcome),
        retries: settlements.map((s) => s.completion.retry ?? null) as boolean[],
        errorTaskIds: errors.map((e) => e.taskId),
        errorMessages: errors.map((e) => e.message),
        handlers: settlements.map((s) => s.handler.functionName),
        bodies: settlements.map((s) => s.handler.body),
        modes: settlements.map((s) => s.handler.mode),
        raisedPrefixes: settlements.map((s) => s.handler.raisedPrefix),
        startedUs: settlements.map((s) => epochMicros(s.completion.startedAt)) as string[],
        // null when none is traced: the handlers then run without the setting.
        traceparents: settlements.some((s) => s.traceparent) ? settlements.map((s) => s.traceparent ?? '') : null,
      },
      prepared('queue_client_task_settle_with_handlers', db),
    ),
  );
  return rows.map((r) => ({
    result: r.result as CompletionResult | 'transient',
    outcome: r.outcome as CompletionOutcome | null,
    errors: r.errors,
  }));
}

/**
 * Marks runs still going as started (queues.mark_started), with the time each started:
 * the worker's heartbeat does it for runs that outlast it (a shorter run's start travels
 * with its completion). Returns the task ids whose lease was no longer current.
 */
export async function markStarted(db: Queryable, runs: (LeaseRef & { startedAt: Date })[]): Promise<Id[]> {
  if (runs.length === 0) return [];
  const rows = await mapErrors(
    taskMarkStarted.run(
      {
        taskIds: runs.map((l) => l.taskId),
        taskLeaseIds: runs.map((l) => l.taskLeaseId),
        startedUs: runs.map((l) => epochMicros(l.startedAt)) as string[],
      },
      prepared('queue_client_task_mark_started', db),
    ),
  );
  return rows.map((r) => r.taskId);
}

export interface Step extends LeaseRef {
  functionName: string;
  payload: JsonObject;
  /**
   * The W3C traceparent of the step's span: the trace context of the tasks the step
   * enqueues (a supervisor's child tasks). Omitted when nothing is traced.
   */
  traceparent?: string;
}

export interface StepResult {
  taskId: Id;
  /** As a completion's result, or 'transient': rolled back, nothing recorded; run it again. */
  result: CompletionResult | 'transient';
  outcome: CompletionOutcome | null;
  error: string | null;
  note: string | null;
}

/**
 * Runs db_function steps in the database in one call (queues.run_steps): each step's
 * writes commit with its completion, fenced by the lease; a step that raises is rolled
 * back alone. One result per step, in input order.
 */
export async function runSteps(db: Queryable, steps: Step[]): Promise<StepResult[]> {
  if (steps.length === 0) return [];
  const rows = await mapErrors(
    taskRunSteps.run(
      {
        taskIds: steps.map((s) => s.taskId),
        taskLeaseIds: steps.map((s) => s.taskLeaseId),
        functionNames: steps.map((s) => s.functionName),
        payloads: steps.map((s) => s.payload),
        // null when no step is traced: queues.run_steps then sets no setting.
        traceparents: steps.some((s) => s.traceparent) ? steps.map((s) => s.traceparent ?? '') : null,
      },
      prepared('queue_client_task_run_steps', db),
    ),
  );
  return rows.map((r) => ({
    taskId: r.taskId,
    result: r.result as StepResult['result'],
    outcome: r.outcome as CompletionOutcome | null,
    error: r.error,
    note: r.note,
  }));
}

/** A lease a worker holds: the pair that fences every call made on its behalf. */
export interface LeaseRef {
  taskId: Id;
  taskLeaseId: Id;
}

/**
 * Heartbeat: extends each lease that is still its task's current lease to now +
 * `leaseSeconds` (default 300). Returns the leases extended; one missing was lost.
 */
export async function extendLeases(
  db: Queryable,
  leases: LeaseRef[],
  leaseSeconds?: number,
): Promise<{ taskId: Id; taskLeaseId: Id; expiresAt: Date }[]> {
  if (leases.length === 0) return [];
  return mapErrors(
    taskExtendLeases.run(
      { taskIds: leases.map((l) => l.taskId), taskLeaseIds: leases.map((l) => l.taskLeaseId), leaseSeconds },
      prepared('queue_client_task_extend_leases', db),
    ),
  );
}

/**
 * Gives leases back (graceful shutdown): their tasks are claimable at once, and the
 * release does not count towards abandoning them. Returns the task ids released.
 */
export async function releaseLeases(db: Queryable, leases: LeaseRef[]): Promise<Id[]> {
  if (leases.length === 0) return [];
  const rows = await mapErrors(
    taskReleaseLeases.run({ taskIds: leases.map((l) => l.taskId), taskLeaseIds: leases.map((l) => l.taskLeaseId) }, db),
  );
  return rows.map((r) => r.taskId);
}

/** Records an operational error against a task (not terminal); returns the error id. */
export async function failTask(
  db: Queryable,
  failure: { taskId: Id; errorMessage: string; taskLeaseId?: Id },
): Promise<Id> {
  const [row] = await mapErrors(taskFail.run(failure, db));
  if (!row) throw new Error('queues.fail_task returned no row');
  return row.errorId;
}

export type InterruptResult = 'retry_scheduled' | 'abandoned' | 'lease_lost' | 'unknown_task';

/**
 * A run cut short by a transient error (deadlock, serialization failure, lost
 * connection): records the error, ends the lease and schedules the task again after a
 * backoff, or abandons it once it was interrupted `maxInterruptions` times (default 5).
 */
export async function interruptTask(
  db: Queryable,
  interruption: { taskId: Id; taskLeaseId: Id; errorMessage: string; maxInterruptions?: number },
): Promise<InterruptResult> {
  const [row] = await mapErrors(taskInterrupt.run(interruption, db));
  return (row?.result ?? 'unknown_task') as InterruptResult;
}

/**
 * Runs a registered function through internal.run_function; returns its jsonb result.
 * `traceparent` (the caller's span): the trace context of the tasks the function enqueues
 * (sql/queues/trace.sql).
 */
export async function runFunction(
  db: Queryable,
  functionName: string,
  payload: JsonObject,
  traceparent?: string,
): Promise<unknown> {
  const params = { functionName, payload: toJsonText(payload, 'payload') };
  const [row] = await mapErrors(
    traceparent ? functionRunTraced.run({ ...params, traceparent }, db) : functionRun.run(params, db),
  );
  return row?.result ?? null;
}

/** What runBeforeProviderCall returns (internal.run_before_provider_call). */
export interface BeforeProviderCall {
  /** What the before_handler returned. */
  beforeResult: unknown;
  /** The provider-call check's envelope; null when not made (see runBeforeProviderCall). */
  startResult: unknown;
  /** The message of a raise of the check; null when it did not raise. */
  startError: string | null;
}

/**
 * A channel task's before_handler and its provider-call check in one statement, one round
 * trip (internal.run_before_provider_call): runs `beforeHandler` through
 * internal.run_function and then, when it returned a success envelope, checks the task's
 * lease for an at-least-once provider call (internal.start_provider_call's answer, which
 * records nothing for it). `startResult` is null when no check was made (the handler did
 * not succeed, or the task is at-most-once): the caller then calls
 * internal.start_provider_call itself before the provider call. A raise of the handler is
 * thrown; a raise of the check is `startError`. `traceparent` as runFunction's.
 */
export async function runBeforeProviderCall(
  db: Queryable,
  call: { beforeHandler: string; payload: JsonObject; taskId: Id; taskLeaseId: Id },
  traceparent?: string,
): Promise<BeforeProviderCall> {
  const params = {
    beforeHandler: call.beforeHandler,
    payload: toJsonText(call.payload, 'payload'),
    taskId: call.taskId,
    taskLeaseId: call.taskLeaseId,
  };
  const [row] = await mapErrors(
    traceparent
      ? functionRunBeforeProviderCallTraced.run({ ...params, traceparent }, db)
      : functionRunBeforeProviderCall.run(params, prepared('queue_client_function_before_provider_call', db)),
  );
  return {
    beforeResult: row?.beforeResult ?? null,
    startResult: row?.startResult ?? null,
    startError: row?.startError ?? null,
  };
}

/** One call of runBeforeProviderCalls: a channel task's before_handler and its lease. */
export interface BeforeProviderCallRequest {
  beforeHandler: string;
  payload: JsonObject;
  taskId: Id;
  taskLeaseId: Id;
  /** The trace context of the tasks the handler enqueues, as runFunction's. */
  traceparent?: string;
}

/** What runBeforeProviderCalls returns per call: its answer, or the error its call raised. */
export type BeforeProviderCallAnswer = { ok: true; ran: BeforeProviderCall } | { ok: false; error: unknown };

/**
 * runBeforeProviderCall for a group of channel tasks in one statement, one round trip
 * (internal.run_before_provider_calls): an answer per call, in the calls' order. Each call
 * runs in a subtransaction of its own: a raise of one call (its handler's, or its check's
 * error other than the check's own, which is `startError` as in runBeforeProviderCall)
 * is that call's `error`, a QueueError with the raise's SQLSTATE and message, and rolls
 * back that call's writes only; a lease that is no longer live fails that call's check
 * only. A failure of the statement itself (the connection, say) is thrown. At most 50
 * calls.
 */
export async function runBeforeProviderCalls(
  db: Queryable,
  calls: readonly BeforeProviderCallRequest[],
): Promise<BeforeProviderCallAnswer[]> {
  if (calls.length === 0) return [];
  const body = calls.map((c) => ({
    before_handler: c.beforeHandler,
    payload: c.payload,
    task_id: String(c.taskId),
    task_lease_id: String(c.taskLeaseId),
    ...(c.traceparent ? { traceparent: c.traceparent } : {}),
  }));
  const rows = await mapErrors(
    functionRunBeforeProviderCalls.run(
      { calls: toJsonText(body, 'calls') },
      prepared('queue_client_function_before_provider_calls', db),
    ),
  );
  const answers: (BeforeProviderCallAnswer | undefined)[] = calls.map(() => undefined);
  for (const row of rows) {
    const i = row.ord - 1;
    if (i < 0 || i >= answers.length) continue;
    answers[i] =
      row.beforeSqlstate !== null || row.beforeError !== null
        ? {
            ok: false,
            error: toQueueError(
              Object.assign(new Error(row.beforeError ?? 'raised'), { code: row.beforeSqlstate ?? 'P0001' }),
            ),
          }
        : {
            ok: true,
            ran: {
              beforeResult: row.beforeResult ?? null,
              startResult: row.startResult ?? null,
              startError: row.startError ?? null,
            },
          };
  }
  // An error (and its stack trace) is made only for a call without an answer.
  return answers.map(
    (a) =>
      a ?? {
        ok: false,
        error: new QueueError('internal.run_before_provider_calls returned no row for this call', 'database'),
      },
  );
}

/**
 * Sets the trace context of the active span (an OpenTelemetry SDK's) for the rest of the
 * transaction on `client` (settings queue.traceparent and queue.tracestate, local to the
 * transaction): every task the transaction enqueues from then on in SQL, such as a
 * kickoff function's supervisor task (`comms.send_email(...)`), records it, and the
 * worker's span of that task continues it. Call it after BEGIN, inside the span. Returns
 * whether there was a context to set (false without an SDK or outside a span). `enqueue`,
 * `enqueueUnique` and `enqueueMany` need no call: they pass their own span's context.
 */
export async function setTraceContext(client: pg.PoolClient | pg.Client): Promise<boolean> {
  const context = activeTraceContext();
  if (!context) return false;
  await mapErrors(taskTraceContextSet.run(context, client));
  return true;
}

/** The stored trace contexts (queues.task_trace) of those of `taskIds` that have one. */
export async function readTaskTraces(db: Queryable, taskIds: Id[]): Promise<Map<Id, TraceContext>> {
  const traces = new Map<Id, TraceContext>();
  if (taskIds.length === 0) return traces;
  const rows = await mapErrors(taskTraces.run({ taskIds }, db));
  for (const r of rows) traces.set(r.taskId, { traceparent: r.traceparent, tracestate: r.tracestate });
  return traces;
}
