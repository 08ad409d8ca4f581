/** Types generated for queries found in "src/queries/worker.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

export type NumberOrStringArray = (NumberOrString)[];

export type stringArray = (string)[];

/** 'WorkerHeartbeat' parameters type */
export interface IWorkerHeartbeatParams {
  heartbeatIntervalMs?: number | null | void;
  taskTypes: stringArray;
  workerId: string;
}

/** 'WorkerHeartbeat' return type */
export interface IWorkerHeartbeatResult {
  recorded: undefined | null;
}

/** 'WorkerHeartbeat' query type */
export interface IWorkerHeartbeatQuery {
  params: IWorkerHeartbeatParams;
  result: IWorkerHeartbeatResult;
}

const workerHeartbeatIR: any = {"usedParamSet":{"workerId":true,"taskTypes":true,"heartbeatIntervalMs":true},"params":[{"name":"workerId","required":true,"transform":{"type":"scalar"},"locs":[{"a":38,"b":47}]},{"name":"taskTypes","required":true,"transform":{"type":"scalar"},"locs":[{"a":56,"b":66}]},{"name":"heartbeatIntervalMs","required":false,"transform":{"type":"scalar"},"locs":[{"a":77,"b":96}]}],"statement":"select queues.record_worker_heartbeat(:workerId!::text, :taskTypes!::text[], :heartbeatIntervalMs::integer) as \"recorded\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.record_worker_heartbeat(:workerId!::text, :taskTypes!::text[], :heartbeatIntervalMs::integer) as "recorded"
 * ```
 */
export const workerHeartbeat = new PreparedQuery<IWorkerHeartbeatParams,IWorkerHeartbeatResult>(workerHeartbeatIR);


/** 'WorkerStopped' parameters type */
export interface IWorkerStoppedParams {
  workerId: string;
}

/** 'WorkerStopped' return type */
export interface IWorkerStoppedResult {
  recorded: undefined | null;
}

/** 'WorkerStopped' query type */
export interface IWorkerStoppedQuery {
  params: IWorkerStoppedParams;
  result: IWorkerStoppedResult;
}

const workerStoppedIR: any = {"usedParamSet":{"workerId":true},"params":[{"name":"workerId","required":true,"transform":{"type":"scalar"},"locs":[{"a":36,"b":45}]}],"statement":"select queues.record_worker_stopped(:workerId!::text) as \"recorded\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.record_worker_stopped(:workerId!::text) as "recorded"
 * ```
 */
export const workerStopped = new PreparedQuery<IWorkerStoppedParams,IWorkerStoppedResult>(workerStoppedIR);


/** 'WorkerRevokeLeases' parameters type */
export interface IWorkerRevokeLeasesParams {
  started?: NumberOrStringArray | null | void;
  startedUs?: NumberOrStringArray | null | void;
  workerId: string;
}

/** 'WorkerRevokeLeases' return type */
export interface IWorkerRevokeLeasesResult {
  taskId: string;
  taskLeaseId: string;
}

/** 'WorkerRevokeLeases' query type */
export interface IWorkerRevokeLeasesQuery {
  params: IWorkerRevokeLeasesParams;
  result: IWorkerRevokeLeasesResult;
}

const workerRevokeLeasesIR: any = {"usedParamSet":{"workerId":true,"started":true,"startedUs":true},"params":[{"name":"workerId","required":true,"transform":{"type":"scalar"},"locs":[{"a":100,"b":109}]},{"name":"started","required":false,"transform":{"type":"scalar"},"locs":[{"a":118,"b":125}]},{"name":"startedUs","required":false,"transform":{"type":"scalar"},"locs":[{"a":138,"b":147}]}],"statement":"select r.task_id as \"taskId!\", r.task_lease_id as \"taskLeaseId!\"\n  from queues.revoke_worker_leases(:workerId!::text, :started::bigint[], :startedUs::bigint[]) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!", r.task_lease_id as "taskLeaseId!"
 *   from queues.revoke_worker_leases(:workerId!::text, :started::bigint[], :startedUs::bigint[]) r
 * ```
 */
export const workerRevokeLeases = new PreparedQuery<IWorkerRevokeLeasesParams,IWorkerRevokeLeasesResult>(workerRevokeLeasesIR);


