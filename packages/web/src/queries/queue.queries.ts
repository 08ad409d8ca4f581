/** Types generated for queries found in "src/queries/queue.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

export type stringArray = (string)[];

/** 'QueueList' parameters type */
export type IQueueListParams = void;

/** 'QueueList' return type */
export interface IQueueListResult {
  description: string;
  paused: boolean;
  pausedAt: Date | null;
  pauseReason: string | null;
  ready: string;
  retrying: string;
  running: string;
  scheduled: string;
  taskType: string;
  workers: stringArray;
}

/** 'QueueList' query type */
export interface IQueueListQuery {
  params: IQueueListParams;
  result: IQueueListResult;
}

const queueListIR: any = {"usedParamSet":{},"params":[],"statement":"select q.task_type as \"taskType!\", q.description as \"description!\", q.paused as \"paused!\",\n       q.paused_at as \"pausedAt\", q.pause_reason as \"pauseReason\", q.scheduled as \"scheduled!\",\n       q.ready as \"ready!\", q.running as \"running!\", q.retrying as \"retrying!\", q.workers as \"workers!\"\n  from admin.list_queues() q"};

/**
 * Query generated from SQL:
 * ```
 * select q.task_type as "taskType!", q.description as "description!", q.paused as "paused!",
 *        q.paused_at as "pausedAt", q.pause_reason as "pauseReason", q.scheduled as "scheduled!",
 *        q.ready as "ready!", q.running as "running!", q.retrying as "retrying!", q.workers as "workers!"
 *   from admin.list_queues() q
 * ```
 */
export const queueList = new PreparedQuery<IQueueListParams,IQueueListResult>(queueListIR);


/** 'QueuePause' parameters type */
export interface IQueuePauseParams {
  reason?: string | null | void;
  taskType: string;
}

/** 'QueuePause' return type */
export interface IQueuePauseResult {
  pauseId: string;
}

/** 'QueuePause' query type */
export interface IQueuePauseQuery {
  params: IQueuePauseParams;
  result: IQueuePauseResult;
}

const queuePauseIR: any = {"usedParamSet":{"taskType":true,"reason":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":29,"b":38}]},{"name":"reason","required":false,"transform":{"type":"scalar"},"locs":[{"a":47,"b":53}]}],"statement":"select admin.pause_task_type(:taskType!::text, :reason::text) as \"pauseId!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.pause_task_type(:taskType!::text, :reason::text) as "pauseId!"
 * ```
 */
export const queuePause = new PreparedQuery<IQueuePauseParams,IQueuePauseResult>(queuePauseIR);


/** 'QueueSetTimeout' parameters type */
export interface IQueueSetTimeoutParams {
  taskType: string;
  timeoutSeconds?: NumberOrString | null | void;
}

/** 'QueueSetTimeout' return type */
export interface IQueueSetTimeoutResult {
  ok: undefined | null;
}

/** 'QueueSetTimeout' query type */
export interface IQueueSetTimeoutQuery {
  params: IQueueSetTimeoutParams;
  result: IQueueSetTimeoutResult;
}

const queueSetTimeoutIR: any = {"usedParamSet":{"taskType":true,"timeoutSeconds":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":35,"b":44}]},{"name":"timeoutSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":53,"b":67}]}],"statement":"select admin.set_task_type_timeout(:taskType!::text, :timeoutSeconds::numeric) as \"ok\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.set_task_type_timeout(:taskType!::text, :timeoutSeconds::numeric) as "ok"
 * ```
 */
export const queueSetTimeout = new PreparedQuery<IQueueSetTimeoutParams,IQueueSetTimeoutResult>(queueSetTimeoutIR);


/** 'QueueResume' parameters type */
export interface IQueueResumeParams {
  taskType: string;
}

/** 'QueueResume' return type */
export interface IQueueResumeResult {
  resumed: boolean;
}

/** 'QueueResume' query type */
export interface IQueueResumeQuery {
  params: IQueueResumeParams;
  result: IQueueResumeResult;
}

const queueResumeIR: any = {"usedParamSet":{"taskType":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":30,"b":39}]}],"statement":"select admin.resume_task_type(:taskType!::text) as \"resumed!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.resume_task_type(:taskType!::text) as "resumed!"
 * ```
 */
export const queueResume = new PreparedQuery<IQueueResumeParams,IQueueResumeResult>(queueResumeIR);


/** 'WorkerList' parameters type */
export type IWorkerListParams = void;

/** 'WorkerList' return type */
export interface IWorkerListResult {
  heartbeatAgeSeconds: number;
  lastSeenAt: Date;
  startedAt: Date;
  status: string;
  stoppedAt: Date | null;
  tasksInFlight: string;
  taskTypes: stringArray;
  workerId: string;
}

/** 'WorkerList' query type */
export interface IWorkerListQuery {
  params: IWorkerListParams;
  result: IWorkerListResult;
}

const workerListIR: any = {"usedParamSet":{},"params":[],"statement":"select w.worker_id as \"workerId!\", w.task_types as \"taskTypes!\", w.status as \"status!\",\n       w.started_at as \"startedAt!\", w.last_seen_at as \"lastSeenAt!\", w.stopped_at as \"stoppedAt\",\n       w.heartbeat_age_seconds as \"heartbeatAgeSeconds!\", w.tasks_in_flight as \"tasksInFlight!\"\n  from admin.list_workers() w"};

/**
 * Query generated from SQL:
 * ```
 * select w.worker_id as "workerId!", w.task_types as "taskTypes!", w.status as "status!",
 *        w.started_at as "startedAt!", w.last_seen_at as "lastSeenAt!", w.stopped_at as "stoppedAt",
 *        w.heartbeat_age_seconds as "heartbeatAgeSeconds!", w.tasks_in_flight as "tasksInFlight!"
 *   from admin.list_workers() w
 * ```
 */
export const workerList = new PreparedQuery<IWorkerListParams,IWorkerListResult>(workerListIR);


/** 'WorkerRecover' parameters type */
export interface IWorkerRecoverParams {
  deadAfterSeconds?: number | null | void;
  workerId: string;
}

/** 'WorkerRecover' return type */
export interface IWorkerRecoverResult {
  taskId: string;
  taskLeaseId: string;
  workerId: string;
}

/** 'WorkerRecover' query type */
export interface IWorkerRecoverQuery {
  params: IWorkerRecoverParams;
  result: IWorkerRecoverResult;
}

const workerRecoverIR: any = {"usedParamSet":{"workerId":true,"deadAfterSeconds":true},"params":[{"name":"workerId","required":true,"transform":{"type":"scalar"},"locs":[{"a":128,"b":137}]},{"name":"deadAfterSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":146,"b":162}]}],"statement":"select r.task_id as \"taskId!\", r.task_lease_id as \"taskLeaseId!\", r.worker_id as \"workerId!\"\n  from admin.recover_worker_leases(:workerId!::text, :deadAfterSeconds::integer) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!", r.task_lease_id as "taskLeaseId!", r.worker_id as "workerId!"
 *   from admin.recover_worker_leases(:workerId!::text, :deadAfterSeconds::integer) r
 * ```
 */
export const workerRecover = new PreparedQuery<IWorkerRecoverParams,IWorkerRecoverResult>(workerRecoverIR);


/** 'QueueThrottleList' parameters type */
export type IQueueThrottleListParams = void;

/** 'QueueThrottleList' return type */
export interface IQueueThrottleListResult {
  key: string;
  keyKind: string;
  reason: string;
  recordedAt: Date;
  recordedBy: string;
  reports: number;
  throttledUntil: Date;
}

/** 'QueueThrottleList' query type */
export interface IQueueThrottleListQuery {
  params: IQueueThrottleListParams;
  result: IQueueThrottleListResult;
}

const queueThrottleListIR: any = {"usedParamSet":{},"params":[],"statement":"select t.key_kind as \"keyKind!\", t.key as \"key!\", t.throttled_until as \"throttledUntil!\", t.reason as \"reason!\",\n       t.recorded_at as \"recordedAt!\", t.recorded_by as \"recordedBy!\", t.reports as \"reports!\"\n  from admin.list_throttles() t"};

/**
 * Query generated from SQL:
 * ```
 * select t.key_kind as "keyKind!", t.key as "key!", t.throttled_until as "throttledUntil!", t.reason as "reason!",
 *        t.recorded_at as "recordedAt!", t.recorded_by as "recordedBy!", t.reports as "reports!"
 *   from admin.list_throttles() t
 * ```
 */
export const queueThrottleList = new PreparedQuery<IQueueThrottleListParams,IQueueThrottleListResult>(queueThrottleListIR);


/** 'QueueThrottleClear' parameters type */
export interface IQueueThrottleClearParams {
  key: string;
  keyKind: string;
}

/** 'QueueThrottleClear' return type */
export interface IQueueThrottleClearResult {
  cleared: boolean;
}

/** 'QueueThrottleClear' query type */
export interface IQueueThrottleClearQuery {
  params: IQueueThrottleClearParams;
  result: IQueueThrottleClearResult;
}

const queueThrottleClearIR: any = {"usedParamSet":{"keyKind":true,"key":true},"params":[{"name":"keyKind","required":true,"transform":{"type":"scalar"},"locs":[{"a":28,"b":36}]},{"name":"key","required":true,"transform":{"type":"scalar"},"locs":[{"a":45,"b":49}]}],"statement":"select admin.clear_throttle(:keyKind!::text, :key!::text) as \"cleared!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.clear_throttle(:keyKind!::text, :key!::text) as "cleared!"
 * ```
 */
export const queueThrottleClear = new PreparedQuery<IQueueThrottleClearParams,IQueueThrottleClearResult>(queueThrottleClearIR);


/** 'LimitList' parameters type */
export type ILimitListParams = void;

/** 'LimitList' return type */
export interface ILimitListResult {
  groupKey: string | null;
  heldBack: string;
  intervalMs: number | null;
  maxRunning: number | null;
  maxStarts: number | null;
  running: string;
  scope: string;
  setAt: Date;
  starts: string;
  taskType: string;
}

/** 'LimitList' query type */
export interface ILimitListQuery {
  params: ILimitListParams;
  result: ILimitListResult;
}

const limitListIR: any = {"usedParamSet":{},"params":[],"statement":"select l.task_type as \"taskType!\", l.scope as \"scope!\", l.group_key as \"groupKey\", l.max_running as \"maxRunning\",\n       l.max_starts as \"maxStarts\", l.interval_ms as \"intervalMs\", l.set_at as \"setAt!\", l.running as \"running!\",\n       l.starts as \"starts!\", l.held_back as \"heldBack!\"\n  from admin.task_limits() l"};

/**
 * Query generated from SQL:
 * ```
 * select l.task_type as "taskType!", l.scope as "scope!", l.group_key as "groupKey", l.max_running as "maxRunning",
 *        l.max_starts as "maxStarts", l.interval_ms as "intervalMs", l.set_at as "setAt!", l.running as "running!",
 *        l.starts as "starts!", l.held_back as "heldBack!"
 *   from admin.task_limits() l
 * ```
 */
export const limitList = new PreparedQuery<ILimitListParams,ILimitListResult>(limitListIR);


/** 'LimitSet' parameters type */
export interface ILimitSetParams {
  groupKey?: string | null | void;
  intervalMs?: number | null | void;
  maxRunning?: number | null | void;
  maxStarts?: number | null | void;
  scope: string;
  taskType: string;
}

/** 'LimitSet' return type */
export interface ILimitSetResult {
  ok: undefined | null;
}

/** 'LimitSet' query type */
export interface ILimitSetQuery {
  params: ILimitSetParams;
  result: ILimitSetResult;
}

const limitSetIR: any = {"usedParamSet":{"taskType":true,"scope":true,"groupKey":true,"maxRunning":true,"maxStarts":true,"intervalMs":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":28,"b":37}]},{"name":"scope","required":true,"transform":{"type":"scalar"},"locs":[{"a":46,"b":52}]},{"name":"groupKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":61,"b":69}]},{"name":"maxRunning","required":false,"transform":{"type":"scalar"},"locs":[{"a":78,"b":88}]},{"name":"maxStarts","required":false,"transform":{"type":"scalar"},"locs":[{"a":128,"b":137}]},{"name":"intervalMs","required":false,"transform":{"type":"scalar"},"locs":[{"a":149,"b":159}]}],"statement":"select admin.set_task_limit(:taskType!::text, :scope!::text, :groupKey::text, :maxRunning::integer,\n                            :maxStarts::integer, :intervalMs::integer) as \"ok\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.set_task_limit(:taskType!::text, :scope!::text, :groupKey::text, :maxRunning::integer,
 *                             :maxStarts::integer, :intervalMs::integer) as "ok"
 * ```
 */
export const limitSet = new PreparedQuery<ILimitSetParams,ILimitSetResult>(limitSetIR);


/** 'LimitClear' parameters type */
export interface ILimitClearParams {
  groupKey?: string | null | void;
  scope: string;
  taskType: string;
}

/** 'LimitClear' return type */
export interface ILimitClearResult {
  cleared: boolean;
}

/** 'LimitClear' query type */
export interface ILimitClearQuery {
  params: ILimitClearParams;
  result: ILimitClearResult;
}

const limitClearIR: any = {"usedParamSet":{"taskType":true,"scope":true,"groupKey":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":30,"b":39}]},{"name":"scope","required":true,"transform":{"type":"scalar"},"locs":[{"a":48,"b":54}]},{"name":"groupKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":63,"b":71}]}],"statement":"select admin.clear_task_limit(:taskType!::text, :scope!::text, :groupKey::text) as \"cleared!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.clear_task_limit(:taskType!::text, :scope!::text, :groupKey::text) as "cleared!"
 * ```
 */
export const limitClear = new PreparedQuery<ILimitClearParams,ILimitClearResult>(limitClearIR);


