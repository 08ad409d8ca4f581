/** Types generated for queries found in "src/queries/timeout.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

/** 'TaskTypeTimeouts' parameters type */
export type ITaskTypeTimeoutsParams = void;

/** 'TaskTypeTimeouts' return type */
export interface ITaskTypeTimeoutsResult {
  taskType: string;
  timeoutMs: number;
}

/** 'TaskTypeTimeouts' query type */
export interface ITaskTypeTimeoutsQuery {
  params: ITaskTypeTimeoutsParams;
  result: ITaskTypeTimeoutsResult;
}

const taskTypeTimeoutsIR: any = {"usedParamSet":{},"params":[],"statement":"select t.task_type as \"taskType!\", t.timeout_ms as \"timeoutMs!\"\n  from queues.task_type_timeouts() t"};

/**
 * Query generated from SQL:
 * ```
 * select t.task_type as "taskType!", t.timeout_ms as "timeoutMs!"
 *   from queues.task_type_timeouts() t
 * ```
 */
export const taskTypeTimeouts = new PreparedQuery<ITaskTypeTimeoutsParams,ITaskTypeTimeoutsResult>(taskTypeTimeoutsIR);


