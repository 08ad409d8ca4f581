/** Types generated for queries found in "src/queries/task.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

/** 'TaskList' parameters type */
export interface ITaskListParams {
  beforeTaskId?: NumberOrString | null | void;
  limit?: number | null | void;
  state?: string | null | void;
  taskType?: string | null | void;
}

/** 'TaskList' return type */
export interface ITaskListResult {
  availableAt: Date | null;
  completedAt: Date | null;
  enqueuedAt: Date;
  leaseCount: number;
  maxAttempts: number;
  priority: number;
  resourceKey: string | null;
  scheduledAt: Date;
  state: string;
  taskId: string;
  taskType: string;
}

/** 'TaskList' query type */
export interface ITaskListQuery {
  params: ITaskListParams;
  result: ITaskListResult;
}

const taskListIR: any = {"usedParamSet":{"taskType":true,"state":true,"limit":true,"beforeTaskId":true},"params":[{"name":"taskType","required":false,"transform":{"type":"scalar"},"locs":[{"a":452,"b":460}]},{"name":"state","required":false,"transform":{"type":"scalar"},"locs":[{"a":469,"b":474}]},{"name":"limit","required":false,"transform":{"type":"scalar"},"locs":[{"a":483,"b":488}]},{"name":"beforeTaskId","required":false,"transform":{"type":"scalar"},"locs":[{"a":500,"b":512}]}],"statement":"select t.task_id      as \"taskId!\",\n       t.task_type    as \"taskType!\",\n       t.state        as \"state!\",\n       t.priority     as \"priority!\",\n       t.resource_key as \"resourceKey\",\n       t.max_attempts as \"maxAttempts!\",\n       t.lease_count  as \"leaseCount!\",\n       t.enqueued_at  as \"enqueuedAt!\",\n       t.scheduled_at as \"scheduledAt!\",\n       t.available_at as \"availableAt\",\n       t.completed_at as \"completedAt\"\n  from admin.list_tasks(:taskType::text, :state::text, :limit::integer, :beforeTaskId::bigint) t"};

/**
 * Query generated from SQL:
 * ```
 * select t.task_id      as "taskId!",
 *        t.task_type    as "taskType!",
 *        t.state        as "state!",
 *        t.priority     as "priority!",
 *        t.resource_key as "resourceKey",
 *        t.max_attempts as "maxAttempts!",
 *        t.lease_count  as "leaseCount!",
 *        t.enqueued_at  as "enqueuedAt!",
 *        t.scheduled_at as "scheduledAt!",
 *        t.available_at as "availableAt",
 *        t.completed_at as "completedAt"
 *   from admin.list_tasks(:taskType::text, :state::text, :limit::integer, :beforeTaskId::bigint) t
 * ```
 */
export const taskList = new PreparedQuery<ITaskListParams,ITaskListResult>(taskListIR);


/** 'TaskGet' parameters type */
export interface ITaskGetParams {
  taskId: NumberOrString;
}

/** 'TaskGet' return type */
export interface ITaskGetResult {
  task: unknown;
}

/** 'TaskGet' query type */
export interface ITaskGetQuery {
  params: ITaskGetParams;
  result: ITaskGetResult;
}

const taskGetIR: any = {"usedParamSet":{"taskId":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":22,"b":29}]}],"statement":"select admin.get_task(:taskId!::bigint) as \"task!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.get_task(:taskId!::bigint) as "task!"
 * ```
 */
export const taskGet = new PreparedQuery<ITaskGetParams,ITaskGetResult>(taskGetIR);


/** 'TaskCountList' parameters type */
export interface ITaskCountListParams {
  windowSeconds?: number | null | void;
}

/** 'TaskCountList' return type */
export interface ITaskCountListResult {
  count: string;
  state: string;
  taskType: string;
}

/** 'TaskCountList' query type */
export interface ITaskCountListQuery {
  params: ITaskCountListParams;
  result: ITaskCountListResult;
}

const taskCountListIR: any = {"usedParamSet":{"windowSeconds":true},"params":[{"name":"windowSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":101,"b":114}]}],"statement":"select c.task_type as \"taskType!\", c.state as \"state!\", c.count as \"count!\"\n  from admin.task_counts(:windowSeconds::integer) c"};

/**
 * Query generated from SQL:
 * ```
 * select c.task_type as "taskType!", c.state as "state!", c.count as "count!"
 *   from admin.task_counts(:windowSeconds::integer) c
 * ```
 */
export const taskCountList = new PreparedQuery<ITaskCountListParams,ITaskCountListResult>(taskCountListIR);


/** 'TaskTypeList' parameters type */
export type ITaskTypeListParams = void;

/** 'TaskTypeList' return type */
export interface ITaskTypeListResult {
  description: string;
  taskType: string;
}

/** 'TaskTypeList' query type */
export interface ITaskTypeListQuery {
  params: ITaskTypeListParams;
  result: ITaskTypeListResult;
}

const taskTypeListIR: any = {"usedParamSet":{},"params":[],"statement":"select t.task_type as \"taskType!\", t.description as \"description!\"\n  from admin.list_task_types() t"};

/**
 * Query generated from SQL:
 * ```
 * select t.task_type as "taskType!", t.description as "description!"
 *   from admin.list_task_types() t
 * ```
 */
export const taskTypeList = new PreparedQuery<ITaskTypeListParams,ITaskTypeListResult>(taskTypeListIR);


/** 'TaskRedrive' parameters type */
export interface ITaskRedriveParams {
  taskId: NumberOrString;
}

/** 'TaskRedrive' return type */
export interface ITaskRedriveResult {
  newTaskId: string;
}

/** 'TaskRedrive' query type */
export interface ITaskRedriveQuery {
  params: ITaskRedriveParams;
  result: ITaskRedriveResult;
}

const taskRedriveIR: any = {"usedParamSet":{"taskId":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":26,"b":33}]}],"statement":"select admin.redrive_task(:taskId!::bigint) as \"newTaskId!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.redrive_task(:taskId!::bigint) as "newTaskId!"
 * ```
 */
export const taskRedrive = new PreparedQuery<ITaskRedriveParams,ITaskRedriveResult>(taskRedriveIR);


