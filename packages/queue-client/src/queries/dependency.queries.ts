/** Types generated for queries found in "src/queries/dependency.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

/** 'TaskDependencyList' parameters type */
export interface ITaskDependencyListParams {
  taskId: NumberOrString;
}

/** 'TaskDependencyList' return type */
export interface ITaskDependencyListResult {
  completedAt: Date | null;
  outcome: string | null;
  result: unknown | null;
  taskId: string;
  taskType: string;
}

/** 'TaskDependencyList' query type */
export interface ITaskDependencyListQuery {
  params: ITaskDependencyListParams;
  result: ITaskDependencyListResult;
}

const taskDependencyListIR: any = {"usedParamSet":{"taskId":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":221,"b":228}]}],"statement":"select d.task_id      as \"taskId!\",\n       d.task_type    as \"taskType!\",\n       d.outcome      as \"outcome\",\n       d.completed_at as \"completedAt\",\n       d.result       as \"result\"\n  from queues.list_task_dependencies(:taskId!::bigint) d"};

/**
 * Query generated from SQL:
 * ```
 * select d.task_id      as "taskId!",
 *        d.task_type    as "taskType!",
 *        d.outcome      as "outcome",
 *        d.completed_at as "completedAt",
 *        d.result       as "result"
 *   from queues.list_task_dependencies(:taskId!::bigint) d
 * ```
 */
export const taskDependencyList = new PreparedQuery<ITaskDependencyListParams,ITaskDependencyListResult>(taskDependencyListIR);


