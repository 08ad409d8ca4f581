/**
 * The REST API's answers as zod schemas: what the OpenAPI document (openapi.ts) says each
 * route returns. They describe the JSON as sent (timestamps as ISO 8601 strings, bigint
 * ids and counts as numbers) and are checked against real answers by
 * test/openapi.test.ts. Objects list every key they have (no others), except where a
 * value is documented elsewhere as open (payloads, process trees, history details).
 */
import { z } from 'zod';

const timestamp = z.iso.datetime({ offset: true });
const id = z.number().int().positive();
const count = z.number().int().min(0);
/** Any JSON value (a payload, a process subject, a fact's detail). */
const json = z.unknown();

export const errorBody = z
  .object({
    error: z
      .string()
      .describe('a stable code: invalid_input, unauthorized, not_found, conflict, bad_request, internal'),
    message: z.string().describe('what was wrong, for a person'),
  })
  .meta({ title: 'Error' });

const taskSummary = z
  .object({
    task_id: id,
    task_type: z.string(),
    state: z.string(),
    priority: z.number().int(),
    resource_key: z.string().nullable(),
    max_attempts: z.number().int(),
    lease_count: z.number().int(),
    enqueued_at: timestamp,
    scheduled_at: timestamp,
    available_at: timestamp.nullable(),
    completed_at: timestamp.nullable(),
  })
  .meta({ title: 'TaskSummary' });

const countRow = z.object({ task_type: z.string(), state: z.string(), count });

const capacity = z
  .object({
    task_type: z.string(),
    pending_tasks: count,
    ready_tasks: count,
    running_tasks: count,
    active_workers: count,
    completed_in_window: count,
    window_workers: count,
    window_seconds: z.number().int(),
    tasks_per_worker_hour: z.number().nullable(),
    estimated_hours_to_drain: z.number().nullable(),
    workers_needed: z.object({
      for_1_hour: z.number().int().nullable(),
      for_4_hours: z.number().int().nullable(),
      for_8_hours: z.number().int().nullable(),
    }),
  })
  .meta({ title: 'Capacity' });

const throughputBucket = z.object({
  bucket_start: timestamp,
  task_type: z.string(),
  outcome: z.string(),
  completed: count,
});
const depthBucket = z.object({ bucket_end: timestamp, task_type: z.string(), depth: count });

const queue = z
  .object({
    task_type: z.string(),
    description: z.string(),
    paused: z.boolean(),
    paused_at: timestamp.nullable(),
    pause_reason: z.string().nullable(),
    scheduled: count,
    ready: count,
    running: count,
    retrying: count,
    workers: z.array(z.string()),
  })
  .meta({ title: 'Queue' });

const leaseRef = z.object({ task_id: id, task_lease_id: id, worker_id: z.string() });

/** A bulk action's answer: how many did it, and each task's result. */
const actionResults = (key: string) =>
  z.object({
    [key]: count,
    results: z.array(z.object({ task_id: id, result: z.string(), new_task_id: id.nullable().optional() })),
  });

const batch = z.object({ batch: z.number().int(), scheduled_at: timestamp, task_count: count });

/** One schedule as GET /api/schedules lists it (admin.list_schedules). */
const schedule = z.object({
  name: z.string(),
  cron: z.string(),
  task_type: z.string(),
  payload: json,
  priority: z.number().int(),
  missed_run_policy: z.string(),
  enabled: z.boolean(),
  last_fire_at: timestamp.nullable(),
  next_fire_at: timestamp.nullable(),
  updated_at: timestamp,
  last_runs: json,
  time_zone: z.string(),
});

export const responses = {
  taskList: z.object({ tasks: z.array(taskSummary), next_before: id.nullable() }),
  taskCreated: z.object({ task_id: id }),
  /** A task enqueued with a unique_key: inserted or replaced (201), skipped (200). */
  uniqueTask: z.object({
    task_id: id,
    outcome: z.enum(['inserted', 'skipped', 'replaced']),
    replaced_task_id: id.nullable(),
  }),
  counts: z.object({
    window_seconds: z.number().int(),
    counts: z.array(countRow),
    by_type: z.record(z.string(), z.record(z.string(), count)),
  }),
  taskTypes: z.object({ task_types: z.array(z.object({ task_type: z.string(), description: z.string() })) }),
  capacityList: z.object({ capacity: z.array(capacity) }),
  capacity,
  throughput: z.object({
    window_seconds: z.number().int(),
    bucket_seconds: z.number().int(),
    buckets: z.array(throughputBucket),
  }),
  staleLeases: z.object({
    stale_leases: z.array(leaseRef.extend({ last_seen_at: timestamp, expires_at: timestamp })),
  }),
  recovered: z.object({ recovered: z.array(leaseRef) }),
  workerRecovered: z.object({ worker_id: z.string(), recovered: z.array(leaseRef) }),
  staggered: z.object({ task_type: z.string(), tasks: count, batches: z.array(batch) }),
  resync: z.object({
    task_type: z.literal('product_resync'),
    date: z.iso.date(),
    tasks: count,
    batches: z.array(batch),
  }),
  discovery: z.object({ task_type: z.literal('store_discovery'), task_id: id }),
  cancelled: actionResults('cancelled'),
  runNow: actionResults('run_now'),
  redriven: actionResults('redriven'),
  depth: z.object({
    window_seconds: z.number().int(),
    bucket_seconds: z.number().int(),
    buckets: z.array(depthBucket),
  }),
  overviewLive: z.object({
    generated_at: timestamp,
    queues: z.array(queue),
    /** How far the read replica lags the primary; null when reads go to the primary. */
    replica_lag_seconds: z.number().nullable(),
  }),
  overview: z.object({
    generated_at: timestamp,
    window_seconds: z.number().int(),
    counts: z.array(countRow),
    throughput: z.array(throughputBucket),
    depth: z.array(depthBucket),
    capacity: z.array(capacity),
    queues: z.array(queue),
  }),
  task: z
    .looseObject({
      task: z
        .looseObject({ task_id: id, task_type: z.string(), state: z.string(), payload: json })
        .describe('the task row (queues.task) with its state, available_at and current_lease_id'),
      leases: z.array(
        z.looseObject({ task_lease_id: id, worker_id: z.string(), leased_at: timestamp, live: z.boolean() }),
      ),
      results: z.array(z.object({ task_lease_id: id, result: json, recorded_at: timestamp })),
      dependencies: z
        .array(z.looseObject({ task_id: id, task_type: z.string(), outcome: z.string().nullable() }))
        .describe('the tasks it waits for (depends_on), each with its outcome (null: still pending)'),
      dependents: z
        .array(z.looseObject({ task_id: id, task_type: z.string(), state: z.string() }))
        .describe('the tasks that wait for it, with their states (at most 100)'),
    })
    .describe(
      'one task: its row, leases, errors, completion, each run’s result, its dependencies and dependents (admin.get_task)',
    ),
  history: z
    .looseObject({
      now: timestamp,
      retention_seconds: z.number(),
      partition_size: z.number(),
      last_task_id: z.number(),
      partitions: z.array(z.looseObject({ name: z.string(), is_default: z.boolean(), state: z.string() })),
    })
    .describe('partition sets of the history, retention settings and the next drop (admin.history_status)'),
  deadLetters: z.object({
    dead_letters: z.array(
      z.object({
        task_id: id,
        task_type: z.string(),
        payload: json,
        outcome: z.string(),
        completed_at: timestamp,
        last_error: z.string().nullable(),
        attempts: z.number().int(),
      }),
    ),
    next_before: id.nullable(),
  }),
  redrive: z.object({ task_id: id, new_task_id: id }),
  queues: z.object({ queues: z.array(queue) }),
  paused: z.object({ task_type: z.string(), paused: z.literal(true), pause_id: id }),
  resumed: z.object({ task_type: z.string(), paused: z.literal(false), was_paused: z.boolean() }),
  timeoutSet: z.object({ task_type: z.string(), timeout_seconds: z.number().nullable() }),
  limits: z.object({
    limits: z.array(
      z.object({
        task_type: z.string(),
        scope: z.enum(['type', 'each_group', 'group']),
        group_key: z.string().nullable(),
        max_running: z.number().int().nullable(),
        max_starts: z.number().int().nullable(),
        interval_ms: z.number().int().nullable(),
        set_at: timestamp,
        running: z.number().int().describe('tasks of the scope holding a live lease now'),
        starts: z.number().int().describe('tasks of the scope claimed in the current rate window'),
        held_back: z.number().int().describe('tasks ready now that the full scope holds back'),
      }),
    ),
  }),
  limitSet: z.object({
    task_type: z.string(),
    scope: z.enum(['type', 'each_group', 'group']),
    group_key: z.string().nullable(),
    max_running: z.number().int().nullable(),
    max_starts: z.number().int().nullable(),
    interval_ms: z.number().int().nullable(),
  }),
  limitCleared: z.object({
    task_type: z.string(),
    scope: z.enum(['type', 'each_group', 'group']),
    group_key: z.string().nullable(),
    cleared: z.boolean(),
  }),
  throttles: z.object({
    throttles: z.array(
      z.object({
        key_kind: z.string(),
        key: z.string(),
        throttled_until: timestamp,
        reason: z.string(),
        recorded_at: timestamp,
        recorded_by: z.string(),
        reports: z.number().int(),
      }),
    ),
  }),
  throttleCleared: z.object({ key_kind: z.string(), key: z.string(), cleared: z.boolean() }),
  workers: z.object({
    workers: z.array(
      z.object({
        worker_id: z.string(),
        task_types: z.array(z.string()),
        status: z.string(),
        started_at: timestamp,
        last_seen_at: timestamp,
        stopped_at: timestamp.nullable(),
        heartbeat_age_seconds: z.number(),
        tasks_in_flight: count,
      }),
    ),
  }),
  schedules: z.object({ schedules: z.array(schedule) }),
  scheduleUpserted: z.object({ schedule }),
  scheduleSet: z.object({ name: z.string(), enabled: z.boolean() }),
  processes: z.object({ processes: z.array(z.string()) }),
  processRoots: z.object({
    process: z.string(),
    roots: z.array(
      z.object({
        root_id: id,
        created_at: timestamp,
        status: z.string(),
        subject: json,
        attempts: count,
        stuck_descendants: z.number().int(),
        last_fact_at: timestamp,
      }),
    ),
  }),
  processRoot: z.object({
    process: z.string(),
    root_id: id,
    tree: json.describe('the process tree (admin.process_tree)'),
    timeline: z.array(
      z.object({
        at: timestamp,
        process: z.string(),
        root_id: id,
        fact: z.string(),
        attempt_id: id.nullable(),
        detail: json,
      }),
    ),
  }),
  ok: z.object({ ok: z.literal(true) }),
  session: z.object({
    user: z.string().nullable().describe('the user the credential names; null for an anonymous reader (open reads)'),
    level: z.enum(['read', 'operator']).nullable(),
    can_change: z.boolean(),
    open_reads: z.boolean(),
  }),
  audit: z.object({
    changes: z.array(
      z.object({
        api_change_id: id,
        changed_at: timestamp,
        user_name: z.string(),
        user_level: z.string(),
        request_id: z.string(),
        method: z.string(),
        route: z.string(),
        action: z.string(),
        task_ids: z.array(id),
        task_type: z.string().nullable(),
        schedule_name: z.string().nullable(),
        worker_id: z.string().nullable(),
        input: json,
        answer: json,
      }),
    ),
    next_before: id.nullable(),
  }),
} as const;
