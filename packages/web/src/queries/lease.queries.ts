/** Types generated for queries found in "src/queries/lease.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

/** 'LeaseRecoverStale' parameters type */
export interface ILeaseRecoverStaleParams {
  deadAfterSeconds?: number | null | void;
}

/** 'LeaseRecoverStale' return type */
export interface ILeaseRecoverStaleResult {
  taskId: string;
  taskLeaseId: string;
  workerId: string;
}

/** 'LeaseRecoverStale' query type */
export interface ILeaseRecoverStaleQuery {
  params: ILeaseRecoverStaleParams;
  result: ILeaseRecoverStaleResult;
}

const leaseRecoverStaleIR: any = {"usedParamSet":{"deadAfterSeconds":true},"params":[{"name":"deadAfterSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":127,"b":143}]}],"statement":"select r.task_id as \"taskId!\", r.task_lease_id as \"taskLeaseId!\", r.worker_id as \"workerId!\"\n  from admin.recover_stale_leases(:deadAfterSeconds::integer) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!", r.task_lease_id as "taskLeaseId!", r.worker_id as "workerId!"
 *   from admin.recover_stale_leases(:deadAfterSeconds::integer) r
 * ```
 */
export const leaseRecoverStale = new PreparedQuery<ILeaseRecoverStaleParams,ILeaseRecoverStaleResult>(leaseRecoverStaleIR);


/** 'LeaseStaleList' parameters type */
export type ILeaseStaleListParams = void;

/** 'LeaseStaleList' return type */
export interface ILeaseStaleListResult {
  expiresAt: Date;
  lastSeenAt: Date;
  taskId: string;
  taskLeaseId: string;
  workerId: string;
}

/** 'LeaseStaleList' query type */
export interface ILeaseStaleListQuery {
  params: ILeaseStaleListParams;
  result: ILeaseStaleListResult;
}

const leaseStaleListIR: any = {"usedParamSet":{},"params":[],"statement":"select s.task_id      as \"taskId!\",\n       s.task_lease_id as \"taskLeaseId!\",\n       s.worker_id    as \"workerId!\",\n       s.last_seen_at as \"lastSeenAt!\",\n       s.expires_at   as \"expiresAt!\"\n  from admin.list_stale_leases() s"};

/**
 * Query generated from SQL:
 * ```
 * select s.task_id      as "taskId!",
 *        s.task_lease_id as "taskLeaseId!",
 *        s.worker_id    as "workerId!",
 *        s.last_seen_at as "lastSeenAt!",
 *        s.expires_at   as "expiresAt!"
 *   from admin.list_stale_leases() s
 * ```
 */
export const leaseStaleList = new PreparedQuery<ILeaseStaleListParams,ILeaseStaleListResult>(leaseStaleListIR);


