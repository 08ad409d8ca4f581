/** Types generated for queries found in "src/queries/task.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type DateOrString = Date | string;

export type NumberOrString = number | string;

export type NumberOrStringArray = (NumberOrString)[];

export type stringArray = (string)[];

/** 'TaskList' parameters type */
export interface ITaskListParams {
  beforeTaskId?: NumberOrString | null | void;
  enqueuedFrom?: DateOrString | null | void;
  enqueuedTo?: DateOrString | null | void;
  limit?: number | null | void;
  payloadPath?: stringArray | null | void;
  payloadValue?: unknown | null | void;
  resourceKey?: string | null | void;
  state?: string | null | void;
  taskType?: string | null | void;
  workerId?: string | null | void;
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

const taskListIR: any = {"usedParamSet":{"taskType":true,"state":true,"limit":true,"beforeTaskId":true,"workerId":true,"resourceKey":true,"enqueuedFrom":true,"enqueuedTo":true,"payloadPath":true,"payloadValue":true},"params":[{"name":"taskType","required":false,"transform":{"type":"scalar"},"locs":[{"a":452,"b":460}]},{"name":"state","required":false,"transform":{"type":"scalar"},"locs":[{"a":469,"b":474}]},{"name":"limit","required":false,"transform":{"type":"scalar"},"locs":[{"a":483,"b":488}]},{"name":"beforeTaskId","required":false,"transform":{"type":"scalar"},"locs":[{"a":500,"b":512}]},{"name":"workerId","required":false,"transform":{"type":"scalar"},"locs":[{"a":547,"b":555}]},{"name":"resourceKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":564,"b":575}]},{"name":"enqueuedFrom","required":false,"transform":{"type":"scalar"},"locs":[{"a":584,"b":596}]},{"name":"enqueuedTo","required":false,"transform":{"type":"scalar"},"locs":[{"a":612,"b":622}]},{"name":"payloadPath","required":false,"transform":{"type":"scalar"},"locs":[{"a":662,"b":673}]},{"name":"payloadValue","required":false,"transform":{"type":"scalar"},"locs":[{"a":684,"b":696}]}],"statement":"select t.task_id      as \"taskId!\",\n       t.task_type    as \"taskType!\",\n       t.state        as \"state!\",\n       t.priority     as \"priority!\",\n       t.resource_key as \"resourceKey\",\n       t.max_attempts as \"maxAttempts!\",\n       t.lease_count  as \"leaseCount!\",\n       t.enqueued_at  as \"enqueuedAt!\",\n       t.scheduled_at as \"scheduledAt!\",\n       t.available_at as \"availableAt\",\n       t.completed_at as \"completedAt\"\n  from admin.list_tasks(:taskType::text, :state::text, :limit::integer, :beforeTaskId::bigint,\n                        :workerId::text, :resourceKey::text, :enqueuedFrom::timestamptz, :enqueuedTo::timestamptz,\n                        :payloadPath::text[], :payloadValue::jsonb) t"};

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
 *   from admin.list_tasks(:taskType::text, :state::text, :limit::integer, :beforeTaskId::bigint,
 *                         :workerId::text, :resourceKey::text, :enqueuedFrom::timestamptz, :enqueuedTo::timestamptz,
 *                         :payloadPath::text[], :payloadValue::jsonb) t
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


/** 'TaskCancel' parameters type */
export interface ITaskCancelParams {
  reason?: string | null | void;
  taskIds: NumberOrStringArray;
}

/** 'TaskCancel' return type */
export interface ITaskCancelResult {
  result: string;
  taskId: string;
}

/** 'TaskCancel' query type */
export interface ITaskCancelQuery {
  params: ITaskCancelParams;
  result: ITaskCancelResult;
}

const taskCancelIR: any = {"usedParamSet":{"taskIds":true,"reason":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":79,"b":87}]},{"name":"reason","required":false,"transform":{"type":"scalar"},"locs":[{"a":100,"b":106}]}],"statement":"select r.task_id as \"taskId!\", r.result as \"result!\"\n  from admin.cancel_tasks(:taskIds!::bigint[], :reason::text) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!", r.result as "result!"
 *   from admin.cancel_tasks(:taskIds!::bigint[], :reason::text) r
 * ```
 */
export const taskCancel = new PreparedQuery<ITaskCancelParams,ITaskCancelResult>(taskCancelIR);


/** 'TaskCancelMatching' parameters type */
export interface ITaskCancelMatchingParams {
  limit: number;
  reason?: string | null | void;
  state?: string | null | void;
  taskType?: string | null | void;
}

/** 'TaskCancelMatching' return type */
export interface ITaskCancelMatchingResult {
  result: string;
  taskId: string;
}

/** 'TaskCancelMatching' query type */
export interface ITaskCancelMatchingQuery {
  params: ITaskCancelMatchingParams;
  result: ITaskCancelMatchingResult;
}

const taskCancelMatchingIR: any = {"usedParamSet":{"taskType":true,"state":true,"limit":true,"reason":true},"params":[{"name":"taskType","required":false,"transform":{"type":"scalar"},"locs":[{"a":88,"b":96}]},{"name":"state","required":false,"transform":{"type":"scalar"},"locs":[{"a":105,"b":110}]},{"name":"limit","required":true,"transform":{"type":"scalar"},"locs":[{"a":119,"b":125}]},{"name":"reason","required":false,"transform":{"type":"scalar"},"locs":[{"a":137,"b":143}]}],"statement":"select r.task_id as \"taskId!\", r.result as \"result!\"\n  from admin.cancel_tasks_matching(:taskType::text, :state::text, :limit!::integer, :reason::text) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!", r.result as "result!"
 *   from admin.cancel_tasks_matching(:taskType::text, :state::text, :limit!::integer, :reason::text) r
 * ```
 */
export const taskCancelMatching = new PreparedQuery<ITaskCancelMatchingParams,ITaskCancelMatchingResult>(taskCancelMatchingIR);


/** 'TaskRunNow' parameters type */
export interface ITaskRunNowParams {
  taskIds: NumberOrStringArray;
}

/** 'TaskRunNow' return type */
export interface ITaskRunNowResult {
  result: string;
  taskId: string;
}

/** 'TaskRunNow' query type */
export interface ITaskRunNowQuery {
  params: ITaskRunNowParams;
  result: ITaskRunNowResult;
}

const taskRunNowIR: any = {"usedParamSet":{"taskIds":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":80,"b":88}]}],"statement":"select r.task_id as \"taskId!\", r.result as \"result!\"\n  from admin.run_tasks_now(:taskIds!::bigint[]) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!", r.result as "result!"
 *   from admin.run_tasks_now(:taskIds!::bigint[]) r
 * ```
 */
export const taskRunNow = new PreparedQuery<ITaskRunNowParams,ITaskRunNowResult>(taskRunNowIR);


/** 'TaskRedriveMany' parameters type */
export interface ITaskRedriveManyParams {
  taskIds: NumberOrStringArray;
}

/** 'TaskRedriveMany' return type */
export interface ITaskRedriveManyResult {
  newTaskId: string | null;
  result: string;
  taskId: string;
}

/** 'TaskRedriveMany' query type */
export interface ITaskRedriveManyQuery {
  params: ITaskRedriveManyParams;
  result: ITaskRedriveManyResult;
}

const taskRedriveManyIR: any = {"usedParamSet":{"taskIds":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":110,"b":118}]}],"statement":"select r.task_id as \"taskId!\", r.result as \"result!\", r.new_task_id as \"newTaskId\"\n  from admin.redrive_tasks(:taskIds!::bigint[]) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!", r.result as "result!", r.new_task_id as "newTaskId"
 *   from admin.redrive_tasks(:taskIds!::bigint[]) r
 * ```
 */
export const taskRedriveMany = new PreparedQuery<ITaskRedriveManyParams,ITaskRedriveManyResult>(taskRedriveManyIR);


/** 'TaskRedriveMatching' parameters type */
export interface ITaskRedriveMatchingParams {
  limit: number;
  taskType?: string | null | void;
}

/** 'TaskRedriveMatching' return type */
export interface ITaskRedriveMatchingResult {
  newTaskId: string | null;
  result: string;
  taskId: string;
}

/** 'TaskRedriveMatching' query type */
export interface ITaskRedriveMatchingQuery {
  params: ITaskRedriveMatchingParams;
  result: ITaskRedriveMatchingResult;
}

const taskRedriveMatchingIR: any = {"usedParamSet":{"taskType":true,"limit":true},"params":[{"name":"taskType","required":false,"transform":{"type":"scalar"},"locs":[{"a":119,"b":127}]},{"name":"limit","required":true,"transform":{"type":"scalar"},"locs":[{"a":136,"b":142}]}],"statement":"select r.task_id as \"taskId!\", r.result as \"result!\", r.new_task_id as \"newTaskId\"\n  from admin.redrive_tasks_matching(:taskType::text, :limit!::integer) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!", r.result as "result!", r.new_task_id as "newTaskId"
 *   from admin.redrive_tasks_matching(:taskType::text, :limit!::integer) r
 * ```
 */
export const taskRedriveMatching = new PreparedQuery<ITaskRedriveMatchingParams,ITaskRedriveMatchingResult>(taskRedriveMatchingIR);


/** 'TaskDepthList' parameters type */
export interface ITaskDepthListParams {
  bucketSeconds?: number | null | void;
  windowSeconds?: number | null | void;
}

/** 'TaskDepthList' return type */
export interface ITaskDepthListResult {
  bucketEnd: Date;
  depth: string;
  taskType: string;
}

/** 'TaskDepthList' query type */
export interface ITaskDepthListQuery {
  params: ITaskDepthListParams;
  result: ITaskDepthListResult;
}

const taskDepthListIR: any = {"usedParamSet":{"windowSeconds":true,"bucketSeconds":true},"params":[{"name":"windowSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":110,"b":123}]},{"name":"bucketSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":135,"b":148}]}],"statement":"select d.bucket_end as \"bucketEnd!\", d.task_type as \"taskType!\", d.depth as \"depth!\"\n  from admin.queue_depth(:windowSeconds::integer, :bucketSeconds::integer) d"};

/**
 * Query generated from SQL:
 * ```
 * select d.bucket_end as "bucketEnd!", d.task_type as "taskType!", d.depth as "depth!"
 *   from admin.queue_depth(:windowSeconds::integer, :bucketSeconds::integer) d
 * ```
 */
export const taskDepthList = new PreparedQuery<ITaskDepthListParams,ITaskDepthListResult>(taskDepthListIR);


