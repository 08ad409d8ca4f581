/** Types generated for queries found in "src/queries/progress.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

/** 'TaskRecordProgress' parameters type */
export interface ITaskRecordProgressParams {
  done: NumberOrString;
  note?: string | null | void;
  taskId: NumberOrString;
  taskLeaseId: NumberOrString;
  total?: NumberOrString | null | void;
}

/** 'TaskRecordProgress' return type */
export interface ITaskRecordProgressResult {
  ok: undefined | null;
}

/** 'TaskRecordProgress' query type */
export interface ITaskRecordProgressQuery {
  params: ITaskRecordProgressParams;
  result: ITaskRecordProgressResult;
}

const taskRecordProgressIR: any = {"usedParamSet":{"taskId":true,"taskLeaseId":true,"done":true,"total":true,"note":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":30,"b":37}]},{"name":"taskLeaseId","required":true,"transform":{"type":"scalar"},"locs":[{"a":48,"b":60}]},{"name":"done","required":true,"transform":{"type":"scalar"},"locs":[{"a":71,"b":76}]},{"name":"total","required":false,"transform":{"type":"scalar"},"locs":[{"a":87,"b":92}]},{"name":"note","required":false,"transform":{"type":"scalar"},"locs":[{"a":103,"b":107}]}],"statement":"select queues.record_progress(:taskId!::bigint, :taskLeaseId!::bigint, :done!::bigint, :total::bigint, :note::text) as \"ok\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.record_progress(:taskId!::bigint, :taskLeaseId!::bigint, :done!::bigint, :total::bigint, :note::text) as "ok"
 * ```
 */
export const taskRecordProgress = new PreparedQuery<ITaskRecordProgressParams,ITaskRecordProgressResult>(taskRecordProgressIR);


