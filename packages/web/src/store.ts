/**
 * The API's typed access to the database: the generated admin queries (src/queries),
 * with rows mapped to the JSON the API returns (bigint counts and ids as numbers).
 */
import type pg from 'pg';
import { enqueue, enqueueUnique, listTaskResults, withTransaction } from '@org/queue-client';
import { apiChangeList, apiChangeRecord } from './queries/audit.queries.js';
import { capacityList } from './queries/capacity.queries.js';
import { replicaLag } from './queries/replica.queries.js';
import { deadLetterList } from './queries/dead_letter.queries.js';
import { leaseRecoverStale, leaseStaleList } from './queries/lease.queries.js';
import { historyStatus } from './queries/history.queries.js';
import { completionStatsList, throughputList } from './queries/metrics.queries.js';
import { processList, processRootRankedList, processTimeline, processTree } from './queries/process.queries.js';
import {
  limitClear,
  limitList,
  limitSet,
  queueList,
  queuePause,
  queueResume,
  queueSetTimeout,
  queueThrottleClear,
  queueThrottleList,
  workerList,
  workerRecover,
} from './queries/queue.queries.js';
import {
  scheduleDisable,
  scheduleEnable,
  scheduleList,
  scheduleUpsert,
  staggeredGenerate,
} from './queries/schedule.queries.js';
import {
  taskCancel,
  taskCancelMatching,
  taskCountList,
  taskDepthList,
  taskGet,
  taskList,
  taskRedrive,
  taskRedriveMany,
  taskRedriveMatching,
  taskRunNow,
  taskTypeList,
} from './queries/task.queries.js';

/** Every state a task can be in (admin.task_states()): the task list's `state` filter. */
export const TASK_STATES = [
  'waiting',
  'scheduled',
  'ready',
  'running',
  'retrying',
  'succeeded',
  'failed',
  'abandoned',
  'cancelled',
  'validation_failed',
] as const;

const num = (v: string | number): number => Number(v);
const numOrNull = (v: string | number | null): number | null => (v === null ? null : Number(v));

export interface TaskListFilter {
  taskType?: string;
  state?: string;
  limit?: number;
  before?: number;
  workerId?: string;
  resourceKey?: string;
  enqueuedFrom?: string;
  enqueuedTo?: string;
  /** A JSON path as keys (payload #> path) and the JSON value it must equal. */
  payloadPath?: string[];
  payloadValue?: unknown;
}

/** One task's answer to a bulk action. */
export interface ActionResult {
  task_id: number;
  result: string;
  new_task_id?: number | null;
}

export interface NewTaskInput {
  task_type: string;
  payload: Record<string, unknown>;
  scheduled_at?: string;
  priority?: number;
  resource_key?: string;
  max_attempts?: number;
  group_key?: string;
  timeout_ms?: number;
  unique_key?: string;
  unique_policy?: 'skip' | 'replace' | 'debounce';
  unique_period_seconds?: number;
  depends_on?: number[];
}

/** What a flow limit covers (sql/queues/limits.sql). */
export type LimitScope = 'type' | 'each_group' | 'group';

/** A flow limit to set (admin.set_task_limit): a concurrency limit, a rate limit, or both. */
export interface LimitInput {
  task_type: string;
  scope: LimitScope;
  group_key?: string | null;
  max_running?: number | null;
  max_starts?: number | null;
  interval_ms?: number | null;
}

/** A partition set's place relative to the last task id (admin.history_status). */
export type HistorySetState = 'ahead' | 'current' | 'next_drop' | 'retained' | 'default';

/** admin.history_status(): see docs/operations.md, "Retention and partitions". */
export interface HistoryStatus {
  now: string;
  retention_seconds: number;
  partition_size: number;
  partitions_ahead: number;
  lock_timeout_ms: number;
  last_task_id: number;
  oldest_task_id: number | null;
  oldest_enqueued_at: string | null;
  default_partition_tasks: number;
  next_drop: {
    lower_bound: number;
    upper_bound: number;
    pending_tasks: number;
    last_completed_at: string | null;
    drop_after: string | null;
  } | null;
  dropped_sets: number;
  last_dropped_at: string | null;
  /** Maintenance steps skipped in the last hour (no free moment for their locks). */
  skipped_steps_last_hour: number;
  last_skipped_step: { skipped_at: string; step: string; reason: string } | null;
  partitions: {
    lower_bound: number | null;
    upper_bound: number | null;
    name: string;
    is_default: boolean;
    state: HistorySetState;
    estimated_tasks: number;
    /** Task ids handed out from the set's oldest to its newest task (the default partition: its count). */
    tasks: number;
    first_task_id: number | null;
    first_enqueued_at: string | null;
    last_task_id: number | null;
    pending_tasks: number;
    /** Null for sets made before creations were recorded. */
    created_at: string | null;
    table_bytes: number;
    index_bytes: number;
    total_bytes: number;
  }[];
  totals: { sets: number; tasks: number; table_bytes: number; index_bytes: number; total_bytes: number };
  recent_drops: {
    lower_bound: number;
    upper_bound: number;
    tasks: number;
    last_completed_at: string | null;
    dropped_at: string;
  }[];
  maintenance: {
    schedule: string;
    cron: string;
    enabled: boolean;
    next_fire_at: string | null;
    last_fire_at: string | null;
    last_run: {
      fire_at: string;
      outcome: string;
      task_id: number | null;
      task_state: string | null;
      report: { created: [number, number][]; dropped: [number, number][]; skipped: unknown[]; kept: number } | null;
    } | null;
  } | null;
}

/** One change made through the API, as admin.record_api_change records it. */
export interface ApiChangeInput {
  userName: string;
  userLevel: string;
  requestId: string;
  method: string;
  route: string;
  action: string;
  taskIds?: number[];
  taskType?: string;
  scheduleName?: string;
  workerId?: string;
  input?: Record<string, unknown>;
  answer: unknown;
}

/** The queue client's task from the API's JSON shape of a new task. */
function newTask(input: NewTaskInput) {
  return {
    taskType: input.task_type,
    payload: input.payload,
    scheduledAt: input.scheduled_at ? new Date(input.scheduled_at) : undefined,
    priority: input.priority ?? undefined,
    resourceKey: input.resource_key ?? undefined,
    maxAttempts: input.max_attempts ?? undefined,
    groupKey: input.group_key ?? undefined,
    timeoutMs: input.timeout_ms ?? undefined,
    dependsOn: input.depends_on?.map(String),
  };
}

/** Who made a change, and through what request, for its fact (admin.api_change). */
export type ChangeActor = Pick<ApiChangeInput, 'userName' | 'userLevel' | 'requestId' | 'method' | 'route'>;

/** What a change made, recorded with its answer (admin.record_api_change). */
export interface ChangeMade<T> {
  /** The change's answer (the API's response body), recorded as the fact's answer. */
  answer: T;
  /** The tasks the change targeted or made. */
  taskIds?: number[];
  taskType?: string;
  scheduleName?: string;
  workerId?: string;
  /** The request's parameters worth keeping (no payloads). */
  input?: Record<string, unknown>;
}

/**
 * Runs a change on a Store and records its fact in the same transaction, so that no change
 * commits without its fact and no fact without its change; a change that throws (refused)
 * rolls back and leaves none. Returns the change's answer. The REST API's change routes and
 * the `queue` command line both go through it.
 */
export async function recordedChange<T>(
  pool: pg.Pool,
  actor: ChangeActor,
  action: string,
  run: (tx: Store) => Promise<ChangeMade<T>>,
): Promise<T> {
  return withTransaction(pool, async (client) => {
    const tx = new Store(client);
    const made = await run(tx);
    await tx.recordChange({
      ...actor,
      action,
      taskIds: made.taskIds,
      taskType: made.taskType,
      scheduleName: made.scheduleName,
      workerId: made.workerId,
      input: made.input,
      answer: made.answer,
    });
    return made.answer;
  });
}

export class Store {
  /** A pool, or a client inside a transaction (the changes: see `change` in app.ts). */
  constructor(readonly pool: pg.Pool | pg.PoolClient) {}

  /** Records a change made through the API (admin.record_api_change); returns the fact's id. */
  async recordChange(change: ApiChangeInput): Promise<number> {
    const [row] = await apiChangeRecord.run(
      {
        ...change,
        taskIds: change.taskIds,
        // pg would send a JS array as a PostgreSQL array: serialise the JSON ourselves.
        input: JSON.stringify(change.input ?? {}),
        answer: JSON.stringify(change.answer ?? null),
      },
      this.pool,
    );
    return num(row!.apiChangeId);
  }

  /** The changes made through the API, newest first; those that named taskId when given. */
  async apiChanges(filter: { taskId?: number; limit?: number; before?: number }) {
    const rows = await apiChangeList.run(
      { taskId: filter.taskId, limit: filter.limit, beforeId: filter.before },
      this.pool,
    );
    return rows.map((r) => ({
      api_change_id: num(r.apiChangeId),
      changed_at: r.changedAt,
      user_name: r.userName,
      user_level: r.userLevel,
      request_id: r.requestId,
      method: r.method,
      route: r.route,
      action: r.action,
      task_ids: r.taskIds.map(num),
      task_type: r.taskType,
      schedule_name: r.scheduleName,
      worker_id: r.workerId,
      input: r.input,
      answer: r.answer,
    }));
  }

  async listTasks(filter: TaskListFilter) {
    const rows = await taskList.run(
      {
        taskType: filter.taskType,
        state: filter.state,
        limit: filter.limit,
        beforeTaskId: filter.before,
        workerId: filter.workerId,
        resourceKey: filter.resourceKey,
        enqueuedFrom: filter.enqueuedFrom,
        enqueuedTo: filter.enqueuedTo,
        payloadPath: filter.payloadPath,
        // pg would send a JS string as text: serialise the JSON value ourselves.
        payloadValue: filter.payloadPath ? JSON.stringify(filter.payloadValue) : undefined,
      },
      this.pool,
    );
    return rows.map((r) => ({
      task_id: num(r.taskId),
      task_type: r.taskType,
      state: r.state,
      priority: r.priority,
      resource_key: r.resourceKey,
      max_attempts: r.maxAttempts,
      lease_count: r.leaseCount,
      enqueued_at: r.enqueuedAt,
      scheduled_at: r.scheduledAt,
      available_at: r.availableAt,
      completed_at: r.completedAt,
    }));
  }

  async getTask(taskId: number): Promise<unknown> {
    const [row] = await taskGet.run({ taskId }, this.pool);
    // Each run's result (queues.task_result), oldest first.
    const results = await listTaskResults(this.pool, taskId);
    return {
      ...(row?.task as object),
      results: results.map((r) => ({
        task_lease_id: Number(r.taskLeaseId),
        result: r.result,
        recorded_at: r.recordedAt,
      })),
    };
  }

  async createTask(input: NewTaskInput): Promise<number> {
    // The queue client's enqueue: one definition of the call for apps and the API.
    return num(await enqueue(this.pool, newTask(input)));
  }

  /** A unique task (queues.enqueue_unique): what happened, and the task it concerns. */
  async createUniqueTask(
    input: NewTaskInput & { unique_key: string },
  ): Promise<{ task_id: number; outcome: string; replaced_task_id: number | null }> {
    const answer = await enqueueUnique(this.pool, {
      ...newTask(input),
      unique: {
        key: input.unique_key,
        policy: input.unique_policy,
        periodMs: input.unique_period_seconds === undefined ? undefined : input.unique_period_seconds * 1000,
      },
    });
    return {
      task_id: num(answer.taskId),
      outcome: answer.outcome,
      replaced_task_id: answer.replacedTaskId === null ? null : num(answer.replacedTaskId),
    };
  }

  /** Seconds the database this store reads lags its primary; null when it is the primary. */
  async replicaLagSeconds(): Promise<number | null> {
    const [row] = await replicaLag.run(undefined, this.pool);
    return row?.lagSeconds ?? null;
  }

  async counts(windowSeconds?: number) {
    const rows = await taskCountList.run({ windowSeconds }, this.pool);
    return rows.map((r) => ({ task_type: r.taskType, state: r.state, count: num(r.count) }));
  }

  async taskTypes() {
    const rows = await taskTypeList.run(undefined, this.pool);
    return rows.map((r) => ({ task_type: r.taskType, description: r.description }));
  }

  async capacity(taskType?: string) {
    const rows = await capacityList.run({ taskType }, this.pool);
    return rows.map((r) => ({
      task_type: r.taskType,
      pending_tasks: num(r.pending),
      ready_tasks: num(r.ready),
      running_tasks: num(r.running),
      active_workers: num(r.activeWorkers),
      completed_in_window: num(r.completedInWindow),
      window_workers: num(r.windowWorkers),
      window_seconds: r.windowSeconds,
      tasks_per_worker_hour: r.tasksPerWorkerHour,
      estimated_hours_to_drain: r.estimatedHoursToDrain,
      workers_needed: {
        for_1_hour: numOrNull(r.workersNeeded1h),
        for_4_hours: numOrNull(r.workersNeeded4h),
        for_8_hours: numOrNull(r.workersNeeded8h),
      },
    }));
  }

  async throughput(windowSeconds?: number, bucketSeconds?: number) {
    const rows = await throughputList.run({ windowSeconds, bucketSeconds }, this.pool);
    return rows.map((r) => ({
      bucket_start: r.bucketStart,
      task_type: r.taskType,
      outcome: r.outcome,
      completed: num(r.completed),
    }));
  }

  async completionStats(windowSeconds?: number) {
    const rows = await completionStatsList.run({ windowSeconds }, this.pool);
    return rows.map((r) => ({
      task_type: r.taskType,
      outcome: r.outcome,
      completed: num(r.completed),
      timed: num(r.timed),
      duration_sum: r.durationSum,
      duration_buckets: r.durationBuckets.map(num),
    }));
  }

  async deadLetters(filter: { taskType?: string; limit?: number; before?: number }) {
    const rows = await deadLetterList.run(
      { taskType: filter.taskType, limit: filter.limit, beforeTaskId: filter.before },
      this.pool,
    );
    return rows.map((r) => ({
      task_id: num(r.taskId),
      task_type: r.taskType,
      payload: r.payload,
      outcome: r.outcome,
      completed_at: r.completedAt,
      last_error: r.lastError,
      attempts: r.attempts,
    }));
  }

  async redrive(taskId: number): Promise<number> {
    const [row] = await taskRedrive.run({ taskId }, this.pool);
    return num(row!.newTaskId);
  }

  async recoverStale(deadAfterSeconds?: number) {
    const rows = await leaseRecoverStale.run({ deadAfterSeconds }, this.pool);
    return rows.map((r) => ({ task_id: num(r.taskId), task_lease_id: num(r.taskLeaseId), worker_id: r.workerId }));
  }

  async staleLeases() {
    const rows = await leaseStaleList.run(undefined, this.pool);
    return rows.map((r) => ({
      task_id: num(r.taskId),
      task_lease_id: num(r.taskLeaseId),
      worker_id: r.workerId,
      last_seen_at: r.lastSeenAt,
      expires_at: r.expiresAt,
    }));
  }

  async generateStaggered(input: {
    taskType: string;
    payloads: Record<string, unknown>[];
    startAt: string;
    periodSeconds: number;
    batches: number;
    priority?: number;
  }) {
    const rows = await staggeredGenerate.run(
      {
        taskType: input.taskType,
        // pg sends a JS array as a PostgreSQL array: serialise the JSON array ourselves.
        payloads: JSON.stringify(input.payloads),
        startAt: input.startAt,
        periodSeconds: input.periodSeconds,
        batches: input.batches,
        priority: input.priority,
      },
      this.pool,
    );
    return rows.map((r) => ({ batch: r.batch, scheduled_at: r.scheduledAt, task_count: r.taskCount }));
  }

  /** Partition sets of the queue's history, retention settings and the next drop (admin.history_status). */
  async history(): Promise<HistoryStatus> {
    const [row] = await historyStatus.run(undefined, this.pool);
    return row?.status as HistoryStatus;
  }

  async processes(): Promise<string[]> {
    const rows = await processList.run(undefined, this.pool);
    return rows.map((r) => r.process);
  }

  async processTimeline(process: string, rootId: number) {
    const rows = await processTimeline.run({ process, rootId }, this.pool);
    return rows.map((r) => ({
      at: r.at,
      process: r.process,
      root_id: num(r.rootId),
      fact: r.fact,
      attempt_id: numOrNull(r.attemptId),
      detail: r.detail,
    }));
  }

  async cancel(taskIds: number[], reason?: string): Promise<ActionResult[]> {
    const rows = await taskCancel.run({ taskIds, reason }, this.pool);
    return rows.map((r) => ({ task_id: num(r.taskId), result: r.result }));
  }

  async cancelMatching(filter: {
    taskType?: string;
    state?: string;
    limit: number;
    reason?: string;
  }): Promise<ActionResult[]> {
    const rows = await taskCancelMatching.run(filter, this.pool);
    return rows.map((r) => ({ task_id: num(r.taskId), result: r.result }));
  }

  async runNow(taskIds: number[]): Promise<ActionResult[]> {
    const rows = await taskRunNow.run({ taskIds }, this.pool);
    return rows.map((r) => ({ task_id: num(r.taskId), result: r.result }));
  }

  async redriveMany(taskIds: number[]): Promise<ActionResult[]> {
    const rows = await taskRedriveMany.run({ taskIds }, this.pool);
    return rows.map((r) => ({ task_id: num(r.taskId), result: r.result, new_task_id: numOrNull(r.newTaskId) }));
  }

  async redriveMatching(filter: { taskType?: string; limit: number }): Promise<ActionResult[]> {
    const rows = await taskRedriveMatching.run(filter, this.pool);
    return rows.map((r) => ({ task_id: num(r.taskId), result: r.result, new_task_id: numOrNull(r.newTaskId) }));
  }

  async depth(windowSeconds?: number, bucketSeconds?: number) {
    const rows = await taskDepthList.run({ windowSeconds, bucketSeconds }, this.pool);
    return rows.map((r) => ({ bucket_end: r.bucketEnd, task_type: r.taskType, depth: num(r.depth) }));
  }

  async queues() {
    const rows = await queueList.run(undefined, this.pool);
    return rows.map((r) => ({
      task_type: r.taskType,
      description: r.description,
      paused: r.paused,
      paused_at: r.pausedAt,
      pause_reason: r.pauseReason,
      scheduled: num(r.scheduled),
      ready: num(r.ready),
      running: num(r.running),
      retrying: num(r.retrying),
      workers: r.workers,
    }));
  }

  async pause(taskType: string, reason?: string): Promise<number> {
    const [row] = await queuePause.run({ taskType, reason }, this.pool);
    return num(row!.pauseId);
  }

  /** Sets (null: clears) a task type's run timeout (admin.set_task_type_timeout). */
  async setTimeout(taskType: string, timeoutSeconds: number | null): Promise<void> {
    await queueSetTimeout.run({ taskType, timeoutSeconds }, this.pool);
  }

  /** The flow limits in force with how full each is now (admin.task_limits). */
  async limits() {
    const rows = await limitList.run(undefined, this.pool);
    return rows.map((r) => ({
      task_type: r.taskType,
      scope: r.scope as LimitScope,
      group_key: r.groupKey,
      max_running: r.maxRunning,
      max_starts: r.maxStarts,
      interval_ms: r.intervalMs,
      set_at: r.setAt,
      running: num(r.running),
      starts: num(r.starts),
      held_back: num(r.heldBack),
    }));
  }

  /** Sets a scope's flow limits (admin.set_task_limit). */
  async setLimit(limit: LimitInput): Promise<void> {
    await limitSet.run(
      {
        taskType: limit.task_type,
        scope: limit.scope,
        groupKey: limit.group_key ?? null,
        maxRunning: limit.max_running ?? null,
        maxStarts: limit.max_starts ?? null,
        intervalMs: limit.interval_ms ?? null,
      },
      this.pool,
    );
  }

  /** Clears a scope's flow limits; whether it had one (admin.clear_task_limit). */
  async clearLimit(taskType: string, scope: LimitScope, groupKey?: string | null): Promise<boolean> {
    const [row] = await limitClear.run({ taskType, scope, groupKey: groupKey ?? null }, this.pool);
    return row!.cleared;
  }

  /** The provider throttles in force (admin.list_throttles), one per key. */
  async throttles() {
    const rows = await queueThrottleList.run(undefined, this.pool);
    return rows.map((r) => ({
      key_kind: r.keyKind,
      key: r.key,
      throttled_until: r.throttledUntil,
      reason: r.reason,
      recorded_at: r.recordedAt,
      recorded_by: r.recordedBy,
      reports: r.reports,
    }));
  }

  /** Clears a key's throttle now (admin.clear_throttle); whether one was in force. */
  async clearThrottle(keyKind: string, key: string): Promise<boolean> {
    const [row] = await queueThrottleClear.run({ keyKind, key }, this.pool);
    return row!.cleared;
  }

  async resume(taskType: string): Promise<boolean> {
    const [row] = await queueResume.run({ taskType }, this.pool);
    return row!.resumed;
  }

  async workers() {
    const rows = await workerList.run(undefined, this.pool);
    return rows.map((r) => ({
      worker_id: r.workerId,
      task_types: r.taskTypes,
      status: r.status,
      started_at: r.startedAt,
      last_seen_at: r.lastSeenAt,
      stopped_at: r.stoppedAt,
      heartbeat_age_seconds: r.heartbeatAgeSeconds,
      tasks_in_flight: num(r.tasksInFlight),
    }));
  }

  async recoverWorker(workerId: string, deadAfterSeconds?: number) {
    const rows = await workerRecover.run({ workerId, deadAfterSeconds }, this.pool);
    return rows.map((r) => ({ task_id: num(r.taskId), task_lease_id: num(r.taskLeaseId), worker_id: r.workerId }));
  }

  async schedules(runs?: number) {
    const rows = await scheduleList.run({ runs }, this.pool);
    return rows.map((r) => ({
      name: r.name,
      cron: r.cron,
      task_type: r.taskType,
      payload: r.payload,
      priority: r.priority,
      missed_run_policy: r.missedRunPolicy,
      enabled: r.enabled,
      last_fire_at: r.lastFireAt,
      next_fire_at: r.nextFireAt,
      updated_at: r.updatedAt,
      last_runs: r.lastRuns,
      time_zone: r.timeZone,
    }));
  }

  /** Creates or updates a schedule (schedules.upsert_schedule); the validation failure message or null. */
  async upsertSchedule(input: {
    name: string;
    cron: string;
    task_type: string;
    payload: Record<string, unknown>;
    priority?: number;
    missed_run_policy?: string;
    time_zone?: string;
  }): Promise<string | null> {
    const [row] = await scheduleUpsert.run(
      {
        name: input.name,
        cron: input.cron,
        taskType: input.task_type,
        payload: JSON.stringify(input.payload),
        priority: input.priority,
        missedRunPolicy: input.missed_run_policy,
        timeZone: input.time_zone,
      },
      this.pool,
    );
    return row?.validationFailureMessage ?? null;
  }

  /** Enables or disables a schedule; the validation failure message (no such schedule) or null. */
  async setScheduleEnabled(name: string, enabled: boolean): Promise<string | null> {
    const [row] = await (enabled ? scheduleEnable : scheduleDisable).run({ name }, this.pool);
    return row?.validationFailureMessage ?? null;
  }

  async processRootsRanked(process: string, limit?: number, before?: number) {
    const rows = await processRootRankedList.run({ process, limit, beforeRootId: before }, this.pool);
    return rows.map((r) => ({
      root_id: num(r.rootId),
      created_at: r.createdAt,
      status: r.status,
      subject: r.subject,
      attempts: num(r.attempts),
      stuck_descendants: r.stuckDescendants,
      last_fact_at: r.lastFactAt,
    }));
  }

  async processTree(process: string, rootId: number): Promise<unknown> {
    const [row] = await processTree.run({ process, rootId }, this.pool);
    return row?.tree;
  }
}
