/** Types generated for queries found in "src/queries/cancel.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

export type NumberOrStringArray = (NumberOrString)[];

/** 'TaskCancel' parameters type */
export interface ITaskCancelParams {
  reason?: string | null | void;
  taskIds: NumberOrStringArray;
}

/** 'TaskCancel' return type */
export interface ITaskCancelResult {
  result: string;
  taskId: string;
  wasRunning: boolean;
}

/** 'TaskCancel' query type */
export interface ITaskCancelQuery {
  params: ITaskCancelParams;
  result: ITaskCancelResult;
}

const taskCancelIR: any = {"usedParamSet":{"taskIds":true,"reason":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":112,"b":120}]},{"name":"reason","required":false,"transform":{"type":"scalar"},"locs":[{"a":133,"b":139}]}],"statement":"select c.task_id as \"taskId!\", c.result as \"result!\", c.was_running as \"wasRunning!\"\n  from queues.cancel_tasks(:taskIds!::bigint[], :reason::text) c"};

/**
 * Query generated from SQL:
 * ```
 * select c.task_id as "taskId!", c.result as "result!", c.was_running as "wasRunning!"
 *   from queues.cancel_tasks(:taskIds!::bigint[], :reason::text) c
 * ```
 */
export const taskCancel = new PreparedQuery<ITaskCancelParams,ITaskCancelResult>(taskCancelIR);


/** 'TaskCancelledReasons' parameters type */
export interface ITaskCancelledReasonsParams {
  taskIds: NumberOrStringArray;
}

/** 'TaskCancelledReasons' return type */
export interface ITaskCancelledReasonsResult {
  cancelledAt: Date;
  reason: string;
  taskId: string;
}

/** 'TaskCancelledReasons' query type */
export interface ITaskCancelledReasonsQuery {
  params: ITaskCancelledReasonsParams;
  result: ITaskCancelledReasonsResult;
}

const taskCancelledReasonsIR: any = {"usedParamSet":{"taskIds":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":117,"b":125}]}],"statement":"select c.task_id as \"taskId!\", c.reason as \"reason!\", c.cancelled_at as \"cancelledAt!\"\n  from queues.cancelled_tasks(:taskIds!::bigint[]) c"};

/**
 * Query generated from SQL:
 * ```
 * select c.task_id as "taskId!", c.reason as "reason!", c.cancelled_at as "cancelledAt!"
 *   from queues.cancelled_tasks(:taskIds!::bigint[]) c
 * ```
 */
export const taskCancelledReasons = new PreparedQuery<ITaskCancelledReasonsParams,ITaskCancelledReasonsResult>(taskCancelledReasonsIR);


