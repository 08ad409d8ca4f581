/** Types generated for queries found in "src/queries/task_type.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

/** 'TaskTypeRegister' parameters type */
export interface ITaskTypeRegisterParams {
  taskTypes: unknown;
}

/** 'TaskTypeRegister' return type */
export interface ITaskTypeRegisterResult {
  created: boolean;
  taskType: string;
}

/** 'TaskTypeRegister' query type */
export interface ITaskTypeRegisterQuery {
  params: ITaskTypeRegisterParams;
  result: ITaskTypeRegisterResult;
}

const taskTypeRegisterIR: any = {"usedParamSet":{"taskTypes":true},"params":[{"name":"taskTypes","required":true,"transform":{"type":"scalar"},"locs":[{"a":93,"b":103}]}],"statement":"select r.task_type as \"taskType!\", r.created as \"created!\"\n  from queues.register_task_types(:taskTypes!::jsonb) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_type as "taskType!", r.created as "created!"
 *   from queues.register_task_types(:taskTypes!::jsonb) r
 * ```
 */
export const taskTypeRegister = new PreparedQuery<ITaskTypeRegisterParams,ITaskTypeRegisterResult>(taskTypeRegisterIR);


