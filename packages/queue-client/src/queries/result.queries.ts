/** Types generated for queries found in "src/queries/result.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

/** 'TaskResultRecord' parameters type */
export interface ITaskResultRecordParams {
  result: unknown;
  taskId: NumberOrString;
  taskLeaseId: NumberOrString;
}

/** 'TaskResultRecord' return type */
export interface ITaskResultRecordResult {
  recorded: undefined | null;
}

/** 'TaskResultRecord' query type */
export interface ITaskResultRecordQuery {
  params: ITaskResultRecordParams;
  result: ITaskResultRecordResult;
}

const taskResultRecordIR: any = {"usedParamSet":{"taskId":true,"taskLeaseId":true,"result":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":33,"b":40}]},{"name":"taskLeaseId","required":true,"transform":{"type":"scalar"},"locs":[{"a":51,"b":63}]},{"name":"result","required":true,"transform":{"type":"scalar"},"locs":[{"a":74,"b":81}]}],"statement":"select queues.record_task_result(:taskId!::bigint, :taskLeaseId!::bigint, :result!::jsonb) as \"recorded\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.record_task_result(:taskId!::bigint, :taskLeaseId!::bigint, :result!::jsonb) as "recorded"
 * ```
 */
export const taskResultRecord = new PreparedQuery<ITaskResultRecordParams,ITaskResultRecordResult>(taskResultRecordIR);


/** 'TaskResultList' parameters type */
export interface ITaskResultListParams {
  taskId: NumberOrString;
}

/** 'TaskResultList' return type */
export interface ITaskResultListResult {
  recordedAt: Date;
  result: unknown;
  taskLeaseId: string;
}

/** 'TaskResultList' query type */
export interface ITaskResultListQuery {
  params: ITaskResultListParams;
  result: ITaskResultListResult;
}

const taskResultListIR: any = {"usedParamSet":{"taskId":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":151,"b":158}]}],"statement":"select r.task_lease_id as \"taskLeaseId!\",\n       r.result        as \"result!\",\n       r.recorded_at   as \"recordedAt!\"\n  from queues.list_task_results(:taskId!::bigint) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_lease_id as "taskLeaseId!",
 *        r.result        as "result!",
 *        r.recorded_at   as "recordedAt!"
 *   from queues.list_task_results(:taskId!::bigint) r
 * ```
 */
export const taskResultList = new PreparedQuery<ITaskResultListParams,ITaskResultListResult>(taskResultListIR);


