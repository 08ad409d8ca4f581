/** Types generated for queries found in "src/queries/task.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type DateOrString = Date | string;

export type DateOrStringArray = (DateOrString)[];

export type NumberOrString = number | string;

export type NumberOrStringArray = (NumberOrString)[];

export type booleanArray = (boolean)[];

export type stringArray = (string)[];

export type unknownArray = (unknown)[];

/** 'TaskEnqueue' parameters type */
export interface ITaskEnqueueParams {
  dependsOn?: NumberOrStringArray | null | void;
  groupKey?: string | null | void;
  maxAttempts?: number | null | void;
  payload: unknown;
  priority?: number | null | void;
  resourceKey?: string | null | void;
  scheduledAt?: DateOrString | null | void;
  taskType: string;
  timeoutMs?: number | null | void;
}

/** 'TaskEnqueue' return type */
export interface ITaskEnqueueResult {
  taskId: string;
}

/** 'TaskEnqueue' query type */
export interface ITaskEnqueueQuery {
  params: ITaskEnqueueParams;
  result: ITaskEnqueueResult;
}

const taskEnqueueIR: any = {"usedParamSet":{"taskType":true,"payload":true,"scheduledAt":true,"priority":true,"resourceKey":true,"maxAttempts":true,"dependsOn":true,"groupKey":true,"timeoutMs":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":25,"b":34}]},{"name":"payload","required":true,"transform":{"type":"scalar"},"locs":[{"a":43,"b":51}]},{"name":"scheduledAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":61,"b":72}]},{"name":"priority","required":false,"transform":{"type":"scalar"},"locs":[{"a":88,"b":96}]},{"name":"resourceKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":110,"b":121}]},{"name":"maxAttempts","required":false,"transform":{"type":"scalar"},"locs":[{"a":130,"b":141}]},{"name":"dependsOn","required":false,"transform":{"type":"scalar"},"locs":[{"a":168,"b":177}]},{"name":"groupKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":206,"b":214}]},{"name":"timeoutMs","required":false,"transform":{"type":"scalar"},"locs":[{"a":238,"b":247}]}],"statement":"select queues.enqueue(\n  :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,\n  :resourceKey::text, :maxAttempts::integer, _depends_on => :dependsOn::bigint[],\n  _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer\n) as \"taskId!\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.enqueue(
 *   :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,
 *   :resourceKey::text, :maxAttempts::integer, _depends_on => :dependsOn::bigint[],
 *   _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer
 * ) as "taskId!"
 * ```
 */
export const taskEnqueue = new PreparedQuery<ITaskEnqueueParams,ITaskEnqueueResult>(taskEnqueueIR);


/** 'TaskEnqueueAndCommit' parameters type */
export interface ITaskEnqueueAndCommitParams {
  dependsOn?: NumberOrStringArray | null | void;
  groupKey?: string | null | void;
  maxAttempts?: number | null | void;
  payload: unknown;
  priority?: number | null | void;
  resourceKey?: string | null | void;
  scheduledAt?: DateOrString | null | void;
  taskType: string;
  timeoutMs?: number | null | void;
}

/** 'TaskEnqueueAndCommit' return type */
export interface ITaskEnqueueAndCommitResult {
  _task_id: string | null;
}

/** 'TaskEnqueueAndCommit' query type */
export interface ITaskEnqueueAndCommitQuery {
  params: ITaskEnqueueAndCommitParams;
  result: ITaskEnqueueAndCommitResult;
}

const taskEnqueueAndCommitIR: any = {"usedParamSet":{"taskType":true,"payload":true,"scheduledAt":true,"priority":true,"resourceKey":true,"maxAttempts":true,"groupKey":true,"timeoutMs":true,"dependsOn":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":34,"b":43}]},{"name":"payload","required":true,"transform":{"type":"scalar"},"locs":[{"a":52,"b":60}]},{"name":"scheduledAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":70,"b":81}]},{"name":"priority","required":false,"transform":{"type":"scalar"},"locs":[{"a":97,"b":105}]},{"name":"resourceKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":119,"b":130}]},{"name":"maxAttempts","required":false,"transform":{"type":"scalar"},"locs":[{"a":139,"b":150}]},{"name":"groupKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":176,"b":184}]},{"name":"timeoutMs","required":false,"transform":{"type":"scalar"},"locs":[{"a":208,"b":217}]},{"name":"dependsOn","required":false,"transform":{"type":"scalar"},"locs":[{"a":246,"b":255}]}],"statement":"call queues.enqueue_and_commit(\n  :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,\n  :resourceKey::text, :maxAttempts::integer, _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer,\n  _depends_on => :dependsOn::bigint[]\n)"};

/**
 * Query generated from SQL:
 * ```
 * call queues.enqueue_and_commit(
 *   :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,
 *   :resourceKey::text, :maxAttempts::integer, _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer,
 *   _depends_on => :dependsOn::bigint[]
 * )
 * ```
 */
export const taskEnqueueAndCommit = new PreparedQuery<ITaskEnqueueAndCommitParams,ITaskEnqueueAndCommitResult>(taskEnqueueAndCommitIR);


/** 'TaskEnqueueUnique' parameters type */
export interface ITaskEnqueueUniqueParams {
  dependsOn?: NumberOrStringArray | null | void;
  groupKey?: string | null | void;
  maxAttempts?: number | null | void;
  payload: unknown;
  priority?: number | null | void;
  resourceKey?: string | null | void;
  scheduledAt?: DateOrString | null | void;
  taskType: string;
  timeoutMs?: number | null | void;
  uniqueKey: string;
  uniquePeriod?: DateOrString | null | void;
  uniquePolicy?: string | null | void;
}

/** 'TaskEnqueueUnique' return type */
export interface ITaskEnqueueUniqueResult {
  outcome: string;
  replacedTaskId: string | null;
  taskId: string;
}

/** 'TaskEnqueueUnique' query type */
export interface ITaskEnqueueUniqueQuery {
  params: ITaskEnqueueUniqueParams;
  result: ITaskEnqueueUniqueResult;
}

const taskEnqueueUniqueIR: any = {"usedParamSet":{"taskType":true,"payload":true,"uniqueKey":true,"uniquePolicy":true,"uniquePeriod":true,"scheduledAt":true,"priority":true,"resourceKey":true,"maxAttempts":true,"dependsOn":true,"groupKey":true,"timeoutMs":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":129,"b":138}]},{"name":"payload","required":true,"transform":{"type":"scalar"},"locs":[{"a":147,"b":155}]},{"name":"uniqueKey","required":true,"transform":{"type":"scalar"},"locs":[{"a":165,"b":175}]},{"name":"uniquePolicy","required":false,"transform":{"type":"scalar"},"locs":[{"a":184,"b":196}]},{"name":"uniquePeriod","required":false,"transform":{"type":"scalar"},"locs":[{"a":205,"b":217}]},{"name":"scheduledAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":234,"b":245}]},{"name":"priority","required":false,"transform":{"type":"scalar"},"locs":[{"a":261,"b":269}]},{"name":"resourceKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":281,"b":292}]},{"name":"maxAttempts","required":false,"transform":{"type":"scalar"},"locs":[{"a":301,"b":312}]},{"name":"dependsOn","required":false,"transform":{"type":"scalar"},"locs":[{"a":343,"b":352}]},{"name":"groupKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":379,"b":387}]},{"name":"timeoutMs","required":false,"transform":{"type":"scalar"},"locs":[{"a":411,"b":420}]}],"statement":"select u.task_id as \"taskId!\", u.outcome as \"outcome!\", u.replaced_task_id as \"replacedTaskId\"\n  from queues.enqueue_unique(\n    :taskType!::text, :payload!::jsonb, :uniqueKey!::text, :uniquePolicy::text, :uniquePeriod::interval,\n    :scheduledAt::timestamptz, :priority::integer, :resourceKey::text, :maxAttempts::integer,\n    _depends_on => :dependsOn::bigint[], _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer\n  ) u"};

/**
 * Query generated from SQL:
 * ```
 * select u.task_id as "taskId!", u.outcome as "outcome!", u.replaced_task_id as "replacedTaskId"
 *   from queues.enqueue_unique(
 *     :taskType!::text, :payload!::jsonb, :uniqueKey!::text, :uniquePolicy::text, :uniquePeriod::interval,
 *     :scheduledAt::timestamptz, :priority::integer, :resourceKey::text, :maxAttempts::integer,
 *     _depends_on => :dependsOn::bigint[], _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer
 *   ) u
 * ```
 */
export const taskEnqueueUnique = new PreparedQuery<ITaskEnqueueUniqueParams,ITaskEnqueueUniqueResult>(taskEnqueueUniqueIR);


/** 'TaskEnqueueMany' parameters type */
export interface ITaskEnqueueManyParams {
  tasks: unknown;
}

/** 'TaskEnqueueMany' return type */
export interface ITaskEnqueueManyResult {
  taskIds: stringArray;
}

/** 'TaskEnqueueMany' query type */
export interface ITaskEnqueueManyQuery {
  params: ITaskEnqueueManyParams;
  result: ITaskEnqueueManyResult;
}

const taskEnqueueManyIR: any = {"usedParamSet":{"tasks":true},"params":[{"name":"tasks","required":true,"transform":{"type":"scalar"},"locs":[{"a":98,"b":104}]}],"statement":"select coalesce(array_agg(e.task_id order by e.n), '{}') as \"taskIds!\"\n  from queues.enqueue_many(:tasks!::jsonb) with ordinality e(task_id, n)                                                                                                                                                                                                                                                                                                                                                           "};

/**
 * Query generated from SQL:
 * ```
 * select coalesce(array_agg(e.task_id order by e.n), '{}') as "taskIds!"
 *   from queues.enqueue_many(:tasks!::jsonb) with ordinality e(task_id, n)                                                                                                                                                                                                                                                                                                                                                           
 * ```
 */
export const taskEnqueueMany = new PreparedQuery<ITaskEnqueueManyParams,ITaskEnqueueManyResult>(taskEnqueueManyIR);


/** 'TaskEnqueueTraced' parameters type */
export interface ITaskEnqueueTracedParams {
  dependsOn?: NumberOrStringArray | null | void;
  groupKey?: string | null | void;
  maxAttempts?: number | null | void;
  payload: unknown;
  priority?: number | null | void;
  resourceKey?: string | null | void;
  scheduledAt?: DateOrString | null | void;
  taskType: string;
  timeoutMs?: number | null | void;
  traceparent: string;
  tracestate?: string | null | void;
}

/** 'TaskEnqueueTraced' return type */
export interface ITaskEnqueueTracedResult {
  taskId: string;
}

/** 'TaskEnqueueTraced' query type */
export interface ITaskEnqueueTracedQuery {
  params: ITaskEnqueueTracedParams;
  result: ITaskEnqueueTracedResult;
}

const taskEnqueueTracedIR: any = {"usedParamSet":{"traceparent":true,"tracestate":true,"taskType":true,"payload":true,"scheduledAt":true,"priority":true,"resourceKey":true,"maxAttempts":true,"dependsOn":true,"groupKey":true,"timeoutMs":true},"params":[{"name":"traceparent","required":true,"transform":{"type":"scalar"},"locs":[{"a":72,"b":84}]},{"name":"tracestate","required":false,"transform":{"type":"scalar"},"locs":[{"a":164,"b":174}]},{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":267,"b":276}]},{"name":"payload","required":true,"transform":{"type":"scalar"},"locs":[{"a":285,"b":293}]},{"name":"scheduledAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":303,"b":314}]},{"name":"priority","required":false,"transform":{"type":"scalar"},"locs":[{"a":330,"b":338}]},{"name":"resourceKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":354,"b":365}]},{"name":"maxAttempts","required":false,"transform":{"type":"scalar"},"locs":[{"a":374,"b":385}]},{"name":"dependsOn","required":false,"transform":{"type":"scalar"},"locs":[{"a":412,"b":421}]},{"name":"groupKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":452,"b":460}]},{"name":"timeoutMs","required":false,"transform":{"type":"scalar"},"locs":[{"a":484,"b":493}]}],"statement":"with context as materialized (\n  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,\n         set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate\n),\nenqueued as materialized (\n  select queues.enqueue(\n    :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,\n    :resourceKey::text, :maxAttempts::integer, _depends_on => :dependsOn::bigint[],\n    _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer\n  ) as task_id\n    from context\n),\ncleared as materialized (\n  select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true) from enqueued\n)\nselect e.task_id as \"taskId!\" from enqueued e, cleared"};

/**
 * Query generated from SQL:
 * ```
 * with context as materialized (
 *   select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,
 *          set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate
 * ),
 * enqueued as materialized (
 *   select queues.enqueue(
 *     :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,
 *     :resourceKey::text, :maxAttempts::integer, _depends_on => :dependsOn::bigint[],
 *     _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer
 *   ) as task_id
 *     from context
 * ),
 * cleared as materialized (
 *   select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true) from enqueued
 * )
 * select e.task_id as "taskId!" from enqueued e, cleared
 * ```
 */
export const taskEnqueueTraced = new PreparedQuery<ITaskEnqueueTracedParams,ITaskEnqueueTracedResult>(taskEnqueueTracedIR);


/** 'TaskEnqueueUniqueTraced' parameters type */
export interface ITaskEnqueueUniqueTracedParams {
  dependsOn?: NumberOrStringArray | null | void;
  groupKey?: string | null | void;
  maxAttempts?: number | null | void;
  payload: unknown;
  priority?: number | null | void;
  resourceKey?: string | null | void;
  scheduledAt?: DateOrString | null | void;
  taskType: string;
  timeoutMs?: number | null | void;
  traceparent: string;
  tracestate?: string | null | void;
  uniqueKey: string;
  uniquePeriod?: DateOrString | null | void;
  uniquePolicy?: string | null | void;
}

/** 'TaskEnqueueUniqueTraced' return type */
export interface ITaskEnqueueUniqueTracedResult {
  outcome: string;
  replacedTaskId: string | null;
  taskId: string;
}

/** 'TaskEnqueueUniqueTraced' query type */
export interface ITaskEnqueueUniqueTracedQuery {
  params: ITaskEnqueueUniqueTracedParams;
  result: ITaskEnqueueUniqueTracedResult;
}

const taskEnqueueUniqueTracedIR: any = {"usedParamSet":{"traceparent":true,"tracestate":true,"taskType":true,"payload":true,"uniqueKey":true,"uniquePolicy":true,"uniquePeriod":true,"scheduledAt":true,"priority":true,"resourceKey":true,"maxAttempts":true,"dependsOn":true,"groupKey":true,"timeoutMs":true},"params":[{"name":"traceparent","required":true,"transform":{"type":"scalar"},"locs":[{"a":72,"b":84}]},{"name":"tracestate","required":false,"transform":{"type":"scalar"},"locs":[{"a":164,"b":174}]},{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":487,"b":496}]},{"name":"payload","required":true,"transform":{"type":"scalar"},"locs":[{"a":509,"b":517}]},{"name":"uniqueKey","required":true,"transform":{"type":"scalar"},"locs":[{"a":527,"b":537}]},{"name":"uniquePolicy","required":false,"transform":{"type":"scalar"},"locs":[{"a":550,"b":562}]},{"name":"uniquePeriod","required":false,"transform":{"type":"scalar"},"locs":[{"a":571,"b":583}]},{"name":"scheduledAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":600,"b":611}]},{"name":"priority","required":false,"transform":{"type":"scalar"},"locs":[{"a":627,"b":635}]},{"name":"resourceKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":647,"b":658}]},{"name":"maxAttempts","required":false,"transform":{"type":"scalar"},"locs":[{"a":667,"b":678}]},{"name":"dependsOn","required":false,"transform":{"type":"scalar"},"locs":[{"a":709,"b":718}]},{"name":"groupKey","required":false,"transform":{"type":"scalar"},"locs":[{"a":745,"b":753}]},{"name":"timeoutMs","required":false,"transform":{"type":"scalar"},"locs":[{"a":777,"b":786}]}],"statement":"with context as materialized (\n  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,\n         set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate\n),\nenqueued as materialized (\n  select u.task_id, u.outcome, u.replaced_task_id\n    from context c\n   cross join lateral queues.enqueue_unique(\n    -- c.traceparent (never null) ties the call to the settings' row: it runs after them.\n    case when c.traceparent is not null then :taskType!::text end, :payload!::jsonb, :uniqueKey!::text,\n    :uniquePolicy::text, :uniquePeriod::interval,\n    :scheduledAt::timestamptz, :priority::integer, :resourceKey::text, :maxAttempts::integer,\n    _depends_on => :dependsOn::bigint[], _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer\n  ) u\n),\ncleared as materialized (\n  select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true)\n    from (select count(*) from enqueued) n\n)\nselect e.task_id as \"taskId!\", e.outcome as \"outcome!\", e.replaced_task_id as \"replacedTaskId\"\n  from enqueued e, cleared"};

/**
 * Query generated from SQL:
 * ```
 * with context as materialized (
 *   select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,
 *          set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate
 * ),
 * enqueued as materialized (
 *   select u.task_id, u.outcome, u.replaced_task_id
 *     from context c
 *    cross join lateral queues.enqueue_unique(
 *     -- c.traceparent (never null) ties the call to the settings' row: it runs after them.
 *     case when c.traceparent is not null then :taskType!::text end, :payload!::jsonb, :uniqueKey!::text,
 *     :uniquePolicy::text, :uniquePeriod::interval,
 *     :scheduledAt::timestamptz, :priority::integer, :resourceKey::text, :maxAttempts::integer,
 *     _depends_on => :dependsOn::bigint[], _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer
 *   ) u
 * ),
 * cleared as materialized (
 *   select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true)
 *     from (select count(*) from enqueued) n
 * )
 * select e.task_id as "taskId!", e.outcome as "outcome!", e.replaced_task_id as "replacedTaskId"
 *   from enqueued e, cleared
 * ```
 */
export const taskEnqueueUniqueTraced = new PreparedQuery<ITaskEnqueueUniqueTracedParams,ITaskEnqueueUniqueTracedResult>(taskEnqueueUniqueTracedIR);


/** 'TaskEnqueueManyTraced' parameters type */
export interface ITaskEnqueueManyTracedParams {
  tasks: unknown;
  traceparent: string;
  tracestate?: string | null | void;
}

/** 'TaskEnqueueManyTraced' return type */
export interface ITaskEnqueueManyTracedResult {
  taskIds: stringArray;
}

/** 'TaskEnqueueManyTraced' query type */
export interface ITaskEnqueueManyTracedQuery {
  params: ITaskEnqueueManyTracedParams;
  result: ITaskEnqueueManyTracedResult;
}

const taskEnqueueManyTracedIR: any = {"usedParamSet":{"traceparent":true,"tracestate":true,"tasks":true},"params":[{"name":"traceparent","required":true,"transform":{"type":"scalar"},"locs":[{"a":72,"b":84}]},{"name":"tracestate","required":false,"transform":{"type":"scalar"},"locs":[{"a":164,"b":174}]},{"name":"tasks","required":true,"transform":{"type":"scalar"},"locs":[{"a":500,"b":506}]}],"statement":"with context as materialized (\n  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,\n         set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate\n),\nenqueued as materialized (\n  select coalesce(array_agg(e.task_id order by e.n), '{}') as task_ids\n    from context c\n   -- c.traceparent (never null) ties the call to the settings' row: it runs after them.\n   cross join lateral queues.enqueue_many(case when c.traceparent is not null then :tasks!::jsonb end)\n         with ordinality e(task_id, n)\n),\ncleared as materialized (\n  select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true) from enqueued\n)\nselect e.task_ids as \"taskIds!\" from enqueued e, cleared"};

/**
 * Query generated from SQL:
 * ```
 * with context as materialized (
 *   select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,
 *          set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate
 * ),
 * enqueued as materialized (
 *   select coalesce(array_agg(e.task_id order by e.n), '{}') as task_ids
 *     from context c
 *    -- c.traceparent (never null) ties the call to the settings' row: it runs after them.
 *    cross join lateral queues.enqueue_many(case when c.traceparent is not null then :tasks!::jsonb end)
 *          with ordinality e(task_id, n)
 * ),
 * cleared as materialized (
 *   select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true) from enqueued
 * )
 * select e.task_ids as "taskIds!" from enqueued e, cleared
 * ```
 */
export const taskEnqueueManyTraced = new PreparedQuery<ITaskEnqueueManyTracedParams,ITaskEnqueueManyTracedResult>(taskEnqueueManyTracedIR);


/** 'TaskTraceContextSet' parameters type */
export interface ITaskTraceContextSetParams {
  traceparent: string;
  tracestate?: string | null | void;
}

/** 'TaskTraceContextSet' return type */
export interface ITaskTraceContextSetResult {
  traceparent: string;
  tracestate: string;
}

/** 'TaskTraceContextSet' query type */
export interface ITaskTraceContextSetQuery {
  params: ITaskTraceContextSetParams;
  result: ITaskTraceContextSetResult;
}

const taskTraceContextSetIR: any = {"usedParamSet":{"traceparent":true,"tracestate":true},"params":[{"name":"traceparent","required":true,"transform":{"type":"scalar"},"locs":[{"a":39,"b":51}]},{"name":"tracestate","required":false,"transform":{"type":"scalar"},"locs":[{"a":132,"b":142}]}],"statement":"select set_config('queue.traceparent', :traceparent!::text, true) as \"traceparent!\",\n       set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as \"tracestate!\""};

/**
 * Query generated from SQL:
 * ```
 * select set_config('queue.traceparent', :traceparent!::text, true) as "traceparent!",
 *        set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as "tracestate!"
 * ```
 */
export const taskTraceContextSet = new PreparedQuery<ITaskTraceContextSetParams,ITaskTraceContextSetResult>(taskTraceContextSetIR);


/** 'TaskTraces' parameters type */
export interface ITaskTracesParams {
  taskIds: NumberOrStringArray;
}

/** 'TaskTraces' return type */
export interface ITaskTracesResult {
  taskId: string;
  traceparent: string;
  tracestate: string | null;
}

/** 'TaskTraces' query type */
export interface ITaskTracesQuery {
  params: ITaskTracesParams;
  result: ITaskTracesResult;
}

const taskTracesIR: any = {"usedParamSet":{"taskIds":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":103,"b":111}]}],"statement":"select t.task_id as \"taskId!\", t.traceparent as \"traceparent!\", t.tracestate\n  from queues.task_traces(:taskIds!::bigint[]) t"};

/**
 * Query generated from SQL:
 * ```
 * select t.task_id as "taskId!", t.traceparent as "traceparent!", t.tracestate
 *   from queues.task_traces(:taskIds!::bigint[]) t
 * ```
 */
export const taskTraces = new PreparedQuery<ITaskTracesParams,ITaskTracesResult>(taskTracesIR);


/** 'TaskClaim' parameters type */
export interface ITaskClaimParams {
  leaseSeconds?: number | null | void;
  limit?: number | null | void;
  maxLeases?: number | null | void;
  suspects?: string | null | void;
  taskTypes?: stringArray | null | void;
  workerId: string;
}

/** 'TaskClaim' return type */
export interface ITaskClaimResult {
  enqueuedAtMs: number;
  expiresAtMs: number;
  leaseCount: number;
  leasedAtMs: number;
  maxAttempts: number;
  payload: unknown;
  priority: number;
  resourceKey: string | null;
  scheduledAtMs: number;
  taskId: string;
  taskLeaseId: string;
  taskType: string;
  timeoutMs: number | null;
}

/** 'TaskClaim' query type */
export interface ITaskClaimQuery {
  params: ITaskClaimParams;
  result: ITaskClaimResult;
}

const taskClaimIR: any = {"usedParamSet":{"workerId":true,"limit":true,"taskTypes":true,"leaseSeconds":true,"maxLeases":true,"suspects":true},"params":[{"name":"workerId","required":true,"transform":{"type":"scalar"},"locs":[{"a":791,"b":800}]},{"name":"limit","required":false,"transform":{"type":"scalar"},"locs":[{"a":809,"b":814}]},{"name":"taskTypes","required":false,"transform":{"type":"scalar"},"locs":[{"a":826,"b":835}]},{"name":"leaseSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":846,"b":858}]},{"name":"maxLeases","required":false,"transform":{"type":"scalar"},"locs":[{"a":870,"b":879}]},{"name":"suspects","required":false,"transform":{"type":"scalar"},"locs":[{"a":891,"b":899}]}],"statement":"select c.task_id       as \"taskId!\",\n       c.task_type     as \"taskType!\",\n       c.payload       as \"payload!\",\n       c.priority      as \"priority!\",\n       c.resource_key  as \"resourceKey\",\n       c.max_attempts  as \"maxAttempts!\",\n       round(date_part('epoch', date_trunc('milliseconds', c.enqueued_at)) * 1000) as \"enqueuedAtMs!\",\n       round(date_part('epoch', date_trunc('milliseconds', c.scheduled_at)) * 1000) as \"scheduledAtMs!\",\n       c.task_lease_id as \"taskLeaseId!\",\n       round(date_part('epoch', date_trunc('milliseconds', c.leased_at)) * 1000) as \"leasedAtMs!\",\n       round(date_part('epoch', date_trunc('milliseconds', c.expires_at)) * 1000) as \"expiresAtMs!\",\n       c.lease_count   as \"leaseCount!\",\n       c.timeout_ms    as \"timeoutMs\"\n  from queues.claim_tasks(:workerId!::text, :limit::integer, :taskTypes::text[], :leaseSeconds::integer, :maxLeases::integer, :suspects::text) c"};

/**
 * Query generated from SQL:
 * ```
 * select c.task_id       as "taskId!",
 *        c.task_type     as "taskType!",
 *        c.payload       as "payload!",
 *        c.priority      as "priority!",
 *        c.resource_key  as "resourceKey",
 *        c.max_attempts  as "maxAttempts!",
 *        round(date_part('epoch', date_trunc('milliseconds', c.enqueued_at)) * 1000) as "enqueuedAtMs!",
 *        round(date_part('epoch', date_trunc('milliseconds', c.scheduled_at)) * 1000) as "scheduledAtMs!",
 *        c.task_lease_id as "taskLeaseId!",
 *        round(date_part('epoch', date_trunc('milliseconds', c.leased_at)) * 1000) as "leasedAtMs!",
 *        round(date_part('epoch', date_trunc('milliseconds', c.expires_at)) * 1000) as "expiresAtMs!",
 *        c.lease_count   as "leaseCount!",
 *        c.timeout_ms    as "timeoutMs"
 *   from queues.claim_tasks(:workerId!::text, :limit::integer, :taskTypes::text[], :leaseSeconds::integer, :maxLeases::integer, :suspects::text) c
 * ```
 */
export const taskClaim = new PreparedQuery<ITaskClaimParams,ITaskClaimResult>(taskClaimIR);


/** 'TaskNextClaimIn' parameters type */
export interface ITaskNextClaimInParams {
  missedMs?: number | null | void;
  taskTypes?: stringArray | null | void;
}

/** 'TaskNextClaimIn' return type */
export interface ITaskNextClaimInResult {
  ms: number | null;
}

/** 'TaskNextClaimIn' query type */
export interface ITaskNextClaimInQuery {
  params: ITaskNextClaimInParams;
  result: ITaskNextClaimInResult;
}

const taskNextClaimInIR: any = {"usedParamSet":{"taskTypes":true,"missedMs":true},"params":[{"name":"taskTypes","required":false,"transform":{"type":"scalar"},"locs":[{"a":31,"b":40}]},{"name":"missedMs","required":false,"transform":{"type":"scalar"},"locs":[{"a":51,"b":59}]}],"statement":"select queues.next_claim_in_ms(:taskTypes::text[], :missedMs::integer) as \"ms\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.next_claim_in_ms(:taskTypes::text[], :missedMs::integer) as "ms"
 * ```
 */
export const taskNextClaimIn = new PreparedQuery<ITaskNextClaimInParams,ITaskNextClaimInResult>(taskNextClaimInIR);


/** 'TaskDequeueNextAvailable' parameters type */
export interface ITaskDequeueNextAvailableParams {
  leaseSeconds?: number | null | void;
  workerId?: string | null | void;
}

/** 'TaskDequeueNextAvailable' return type */
export interface ITaskDequeueNextAvailableResult {
  enqueuedAt: Date;
  maxAttempts: number;
  payload: unknown;
  priority: number;
  resourceKey: string | null;
  scheduledAt: Date;
  taskId: string;
  taskType: string;
}

/** 'TaskDequeueNextAvailable' query type */
export interface ITaskDequeueNextAvailableQuery {
  params: ITaskDequeueNextAvailableParams;
  result: ITaskDequeueNextAvailableResult;
}

const taskDequeueNextAvailableIR: any = {"usedParamSet":{"workerId":true,"leaseSeconds":true},"params":[{"name":"workerId","required":false,"transform":{"type":"scalar"},"locs":[{"a":352,"b":360}]},{"name":"leaseSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":369,"b":381}]}],"statement":"select t.task_id      as \"taskId!\",\n       t.task_type    as \"taskType!\",\n       t.payload      as \"payload!\",\n       t.priority     as \"priority!\",\n       t.resource_key as \"resourceKey\",\n       t.max_attempts as \"maxAttempts!\",\n       t.enqueued_at  as \"enqueuedAt!\",\n       t.scheduled_at as \"scheduledAt!\"\n  from queues.dequeue_next_available_task(:workerId::text, :leaseSeconds::integer) t"};

/**
 * Query generated from SQL:
 * ```
 * select t.task_id      as "taskId!",
 *        t.task_type    as "taskType!",
 *        t.payload      as "payload!",
 *        t.priority     as "priority!",
 *        t.resource_key as "resourceKey",
 *        t.max_attempts as "maxAttempts!",
 *        t.enqueued_at  as "enqueuedAt!",
 *        t.scheduled_at as "scheduledAt!"
 *   from queues.dequeue_next_available_task(:workerId::text, :leaseSeconds::integer) t
 * ```
 */
export const taskDequeueNextAvailable = new PreparedQuery<ITaskDequeueNextAvailableParams,ITaskDequeueNextAvailableResult>(taskDequeueNextAvailableIR);


/** 'TaskComplete' parameters type */
export interface ITaskCompleteParams {
  outcome?: string | null | void;
  taskId: NumberOrString;
  taskLeaseId?: NumberOrString | null | void;
}

/** 'TaskComplete' return type */
export interface ITaskCompleteResult {
  completed: boolean;
}

/** 'TaskComplete' query type */
export interface ITaskCompleteQuery {
  params: ITaskCompleteParams;
  result: ITaskCompleteResult;
}

const taskCompleteIR: any = {"usedParamSet":{"taskId":true,"taskLeaseId":true,"outcome":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":28,"b":35}]},{"name":"taskLeaseId","required":false,"transform":{"type":"scalar"},"locs":[{"a":46,"b":57}]},{"name":"outcome","required":false,"transform":{"type":"scalar"},"locs":[{"a":68,"b":75}]}],"statement":"select queues.complete_task(:taskId!::bigint, :taskLeaseId::bigint, :outcome::text) as \"completed!\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.complete_task(:taskId!::bigint, :taskLeaseId::bigint, :outcome::text) as "completed!"
 * ```
 */
export const taskComplete = new PreparedQuery<ITaskCompleteParams,ITaskCompleteResult>(taskCompleteIR);


/** 'TaskCompleteMany' parameters type */
export interface ITaskCompleteManyParams {
  outcomes?: stringArray | null | void;
  retries?: booleanArray | null | void;
  startedAt?: DateOrStringArray | null | void;
  taskIds: NumberOrStringArray;
  taskLeaseIds?: NumberOrStringArray | null | void;
}

/** 'TaskCompleteMany' return type */
export interface ITaskCompleteManyResult {
  result: string;
  taskId: string;
}

/** 'TaskCompleteMany' query type */
export interface ITaskCompleteManyQuery {
  params: ITaskCompleteManyParams;
  result: ITaskCompleteManyResult;
}

const taskCompleteManyIR: any = {"usedParamSet":{"taskIds":true,"taskLeaseIds":true,"outcomes":true,"retries":true,"startedAt":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":82,"b":90}]},{"name":"taskLeaseIds","required":false,"transform":{"type":"scalar"},"locs":[{"a":103,"b":115}]},{"name":"outcomes","required":false,"transform":{"type":"scalar"},"locs":[{"a":128,"b":136}]},{"name":"retries","required":false,"transform":{"type":"scalar"},"locs":[{"a":147,"b":154}]},{"name":"startedAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":197,"b":206}]}],"statement":"select c.task_id as \"taskId!\", c.result as \"result!\"\n  from queues.complete_tasks(:taskIds!::bigint[], :taskLeaseIds::bigint[], :outcomes::text[], :retries::boolean[],\n                             :startedAt::timestamptz[]) c"};

/**
 * Query generated from SQL:
 * ```
 * select c.task_id as "taskId!", c.result as "result!"
 *   from queues.complete_tasks(:taskIds!::bigint[], :taskLeaseIds::bigint[], :outcomes::text[], :retries::boolean[],
 *                              :startedAt::timestamptz[]) c
 * ```
 */
export const taskCompleteMany = new PreparedQuery<ITaskCompleteManyParams,ITaskCompleteManyResult>(taskCompleteManyIR);


/** 'TaskSettle' parameters type */
export interface ITaskSettleParams {
  errorMessages?: stringArray | null | void;
  errorTaskIds?: NumberOrStringArray | null | void;
  outcomes?: stringArray | null | void;
  retries?: booleanArray | null | void;
  startedUs?: NumberOrStringArray | null | void;
  taskIds: NumberOrStringArray;
  taskLeaseIds?: NumberOrStringArray | null | void;
}

/** 'TaskSettle' return type */
export interface ITaskSettleResult {
  result: string;
  taskId: string;
}

/** 'TaskSettle' query type */
export interface ITaskSettleQuery {
  params: ITaskSettleParams;
  result: ITaskSettleResult;
}

const taskSettleIR: any = {"usedParamSet":{"taskIds":true,"taskLeaseIds":true,"outcomes":true,"retries":true,"errorTaskIds":true,"errorMessages":true,"startedUs":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":80,"b":88}]},{"name":"taskLeaseIds","required":false,"transform":{"type":"scalar"},"locs":[{"a":101,"b":113}]},{"name":"outcomes","required":false,"transform":{"type":"scalar"},"locs":[{"a":126,"b":134}]},{"name":"retries","required":false,"transform":{"type":"scalar"},"locs":[{"a":145,"b":152}]},{"name":"errorTaskIds","required":false,"transform":{"type":"scalar"},"locs":[{"a":193,"b":205}]},{"name":"errorMessages","required":false,"transform":{"type":"scalar"},"locs":[{"a":218,"b":231}]},{"name":"startedUs","required":false,"transform":{"type":"scalar"},"locs":[{"a":242,"b":251}]}],"statement":"select s.task_id as \"taskId!\", s.result as \"result!\"\n  from queues.settle_tasks(:taskIds!::bigint[], :taskLeaseIds::bigint[], :outcomes::text[], :retries::boolean[],\n                           :errorTaskIds::bigint[], :errorMessages::text[], :startedUs::bigint[]) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.task_id as "taskId!", s.result as "result!"
 *   from queues.settle_tasks(:taskIds!::bigint[], :taskLeaseIds::bigint[], :outcomes::text[], :retries::boolean[],
 *                            :errorTaskIds::bigint[], :errorMessages::text[], :startedUs::bigint[]) s
 * ```
 */
export const taskSettle = new PreparedQuery<ITaskSettleParams,ITaskSettleResult>(taskSettleIR);


/** 'TaskSettleWithHandler' parameters type */
export interface ITaskSettleWithHandlerParams {
  body: unknown;
  errors: stringArray;
  handler: string;
  mode: string;
  outcome: string;
  raisedPrefix: string;
  retry?: boolean | null | void;
  startedAt?: DateOrString | null | void;
  taskId: NumberOrString;
  taskLeaseId: NumberOrString;
}

/** 'TaskSettleWithHandler' return type */
export interface ITaskSettleWithHandlerResult {
  errors: stringArray;
  outcome: string;
  result: string;
}

/** 'TaskSettleWithHandler' query type */
export interface ITaskSettleWithHandlerQuery {
  params: ITaskSettleWithHandlerParams;
  result: ITaskSettleWithHandlerResult;
}

const taskSettleWithHandlerIR: any = {"usedParamSet":{"taskId":true,"taskLeaseId":true,"outcome":true,"errors":true,"retry":true,"handler":true,"body":true,"mode":true,"raisedPrefix":true,"startedAt":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":111,"b":118}]},{"name":"taskLeaseId","required":true,"transform":{"type":"scalar"},"locs":[{"a":129,"b":141}]},{"name":"outcome","required":true,"transform":{"type":"scalar"},"locs":[{"a":152,"b":160}]},{"name":"errors","required":true,"transform":{"type":"scalar"},"locs":[{"a":169,"b":176}]},{"name":"retry","required":false,"transform":{"type":"scalar"},"locs":[{"a":221,"b":226}]},{"name":"handler","required":true,"transform":{"type":"scalar"},"locs":[{"a":238,"b":246}]},{"name":"body","required":true,"transform":{"type":"scalar"},"locs":[{"a":255,"b":260}]},{"name":"mode","required":true,"transform":{"type":"scalar"},"locs":[{"a":270,"b":275}]},{"name":"raisedPrefix","required":true,"transform":{"type":"scalar"},"locs":[{"a":318,"b":331}]},{"name":"startedAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":340,"b":349}]}],"statement":"select s.result as \"result!\", s.outcome as \"outcome!\", s.errors as \"errors!\"\n  from queues.settle_with_handler(:taskId!::bigint, :taskLeaseId!::bigint, :outcome!::text, :errors!::text[],\n                                  :retry::boolean, :handler!::text, :body!::jsonb, :mode!::text,\n                                  :raisedPrefix!::text, :startedAt::timestamptz) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.result as "result!", s.outcome as "outcome!", s.errors as "errors!"
 *   from queues.settle_with_handler(:taskId!::bigint, :taskLeaseId!::bigint, :outcome!::text, :errors!::text[],
 *                                   :retry::boolean, :handler!::text, :body!::jsonb, :mode!::text,
 *                                   :raisedPrefix!::text, :startedAt::timestamptz) s
 * ```
 */
export const taskSettleWithHandler = new PreparedQuery<ITaskSettleWithHandlerParams,ITaskSettleWithHandlerResult>(taskSettleWithHandlerIR);


/** 'TaskSettleWithHandlerTraced' parameters type */
export interface ITaskSettleWithHandlerTracedParams {
  body: unknown;
  errors: stringArray;
  handler: string;
  mode: string;
  outcome: string;
  raisedPrefix: string;
  retry?: boolean | null | void;
  startedAt?: DateOrString | null | void;
  taskId: NumberOrString;
  taskLeaseId: NumberOrString;
  traceparent: string;
}

/** 'TaskSettleWithHandlerTraced' return type */
export interface ITaskSettleWithHandlerTracedResult {
  errors: stringArray;
  outcome: string;
  result: string;
}

/** 'TaskSettleWithHandlerTraced' query type */
export interface ITaskSettleWithHandlerTracedQuery {
  params: ITaskSettleWithHandlerTracedParams;
  result: ITaskSettleWithHandlerTracedResult;
}

const taskSettleWithHandlerTracedIR: any = {"usedParamSet":{"traceparent":true,"taskId":true,"taskLeaseId":true,"outcome":true,"errors":true,"retry":true,"handler":true,"body":true,"mode":true,"raisedPrefix":true,"startedAt":true},"params":[{"name":"traceparent","required":true,"transform":{"type":"scalar"},"locs":[{"a":72,"b":84}]},{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":384,"b":391}]},{"name":"taskLeaseId","required":true,"transform":{"type":"scalar"},"locs":[{"a":406,"b":418}]},{"name":"outcome","required":true,"transform":{"type":"scalar"},"locs":[{"a":429,"b":437}]},{"name":"errors","required":true,"transform":{"type":"scalar"},"locs":[{"a":450,"b":457}]},{"name":"retry","required":false,"transform":{"type":"scalar"},"locs":[{"a":468,"b":473}]},{"name":"handler","required":true,"transform":{"type":"scalar"},"locs":[{"a":485,"b":493}]},{"name":"body","required":true,"transform":{"type":"scalar"},"locs":[{"a":502,"b":507}]},{"name":"mode","required":true,"transform":{"type":"scalar"},"locs":[{"a":517,"b":522}]},{"name":"raisedPrefix","required":true,"transform":{"type":"scalar"},"locs":[{"a":531,"b":544}]},{"name":"startedAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":557,"b":566}]}],"statement":"with context as materialized (\n  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent\n),\nsettled as materialized (\n  select s.result, s.outcome, s.errors\n    from context c\n   cross join lateral queues.settle_with_handler(\n    -- c.traceparent (never null) ties the call to the setting's row: it runs after it.\n    case when c.traceparent is not null then :taskId!::bigint end, :taskLeaseId!::bigint, :outcome!::text,\n    :errors!::text[], :retry::boolean, :handler!::text, :body!::jsonb, :mode!::text, :raisedPrefix!::text,\n    :startedAt::timestamptz) s\n),\ncleared as materialized (\n  select set_config('queue.traceparent', '', true) from (select count(*) from settled) n\n)\nselect s.result as \"result!\", s.outcome as \"outcome!\", s.errors as \"errors!\" from settled s, cleared"};

/**
 * Query generated from SQL:
 * ```
 * with context as materialized (
 *   select set_config('queue.traceparent', :traceparent!::text, true) as traceparent
 * ),
 * settled as materialized (
 *   select s.result, s.outcome, s.errors
 *     from context c
 *    cross join lateral queues.settle_with_handler(
 *     -- c.traceparent (never null) ties the call to the setting's row: it runs after it.
 *     case when c.traceparent is not null then :taskId!::bigint end, :taskLeaseId!::bigint, :outcome!::text,
 *     :errors!::text[], :retry::boolean, :handler!::text, :body!::jsonb, :mode!::text, :raisedPrefix!::text,
 *     :startedAt::timestamptz) s
 * ),
 * cleared as materialized (
 *   select set_config('queue.traceparent', '', true) from (select count(*) from settled) n
 * )
 * select s.result as "result!", s.outcome as "outcome!", s.errors as "errors!" from settled s, cleared
 * ```
 */
export const taskSettleWithHandlerTraced = new PreparedQuery<ITaskSettleWithHandlerTracedParams,ITaskSettleWithHandlerTracedResult>(taskSettleWithHandlerTracedIR);


/** 'TaskMarkStarted' parameters type */
export interface ITaskMarkStartedParams {
  startedUs?: NumberOrStringArray | null | void;
  taskIds: NumberOrStringArray;
  taskLeaseIds: NumberOrStringArray;
}

/** 'TaskMarkStarted' return type */
export interface ITaskMarkStartedResult {
  taskId: string;
}

/** 'TaskMarkStarted' query type */
export interface ITaskMarkStartedQuery {
  params: ITaskMarkStartedParams;
  result: ITaskMarkStartedResult;
}

const taskMarkStartedIR: any = {"usedParamSet":{"taskIds":true,"taskLeaseIds":true,"startedUs":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":47,"b":55}]},{"name":"taskLeaseIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":68,"b":81}]},{"name":"startedUs","required":false,"transform":{"type":"scalar"},"locs":[{"a":94,"b":103}]}],"statement":"select s as \"taskId!\" from queues.mark_started(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :startedUs::bigint[]) s"};

/**
 * Query generated from SQL:
 * ```
 * select s as "taskId!" from queues.mark_started(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :startedUs::bigint[]) s
 * ```
 */
export const taskMarkStarted = new PreparedQuery<ITaskMarkStartedParams,ITaskMarkStartedResult>(taskMarkStartedIR);


/** 'TaskRunSteps' parameters type */
export interface ITaskRunStepsParams {
  functionNames: stringArray;
  payloads: unknownArray;
  taskIds: NumberOrStringArray;
  taskLeaseIds: NumberOrStringArray;
  traceparents?: stringArray | null | void;
}

/** 'TaskRunSteps' return type */
export interface ITaskRunStepsResult {
  error: string | null;
  note: string | null;
  outcome: string | null;
  result: string;
  taskId: string;
}

/** 'TaskRunSteps' query type */
export interface ITaskRunStepsQuery {
  params: ITaskRunStepsParams;
  result: ITaskRunStepsResult;
}

const taskRunStepsIR: any = {"usedParamSet":{"taskIds":true,"taskLeaseIds":true,"functionNames":true,"payloads":true,"traceparents":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":105,"b":113}]},{"name":"taskLeaseIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":126,"b":139}]},{"name":"functionNames","required":true,"transform":{"type":"scalar"},"locs":[{"a":152,"b":166}]},{"name":"payloads","required":true,"transform":{"type":"scalar"},"locs":[{"a":177,"b":186}]},{"name":"traceparents","required":false,"transform":{"type":"scalar"},"locs":[{"a":222,"b":234}]}],"statement":"select s.task_id as \"taskId!\", s.result as \"result!\", s.outcome, s.error, s.note\n  from queues.run_steps(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :functionNames!::text[], :payloads!::jsonb[],\n                        :traceparents::text[]) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.task_id as "taskId!", s.result as "result!", s.outcome, s.error, s.note
 *   from queues.run_steps(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :functionNames!::text[], :payloads!::jsonb[],
 *                         :traceparents::text[]) s
 * ```
 */
export const taskRunSteps = new PreparedQuery<ITaskRunStepsParams,ITaskRunStepsResult>(taskRunStepsIR);


/** 'TaskFail' parameters type */
export interface ITaskFailParams {
  errorMessage: string;
  taskId: NumberOrString;
  taskLeaseId?: NumberOrString | null | void;
}

/** 'TaskFail' return type */
export interface ITaskFailResult {
  errorId: string;
}

/** 'TaskFail' query type */
export interface ITaskFailQuery {
  params: ITaskFailParams;
  result: ITaskFailResult;
}

const taskFailIR: any = {"usedParamSet":{"taskId":true,"errorMessage":true,"taskLeaseId":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":24,"b":31}]},{"name":"errorMessage","required":true,"transform":{"type":"scalar"},"locs":[{"a":42,"b":55}]},{"name":"taskLeaseId","required":false,"transform":{"type":"scalar"},"locs":[{"a":64,"b":75}]}],"statement":"select queues.fail_task(:taskId!::bigint, :errorMessage!::text, :taskLeaseId::bigint) as \"errorId!\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.fail_task(:taskId!::bigint, :errorMessage!::text, :taskLeaseId::bigint) as "errorId!"
 * ```
 */
export const taskFail = new PreparedQuery<ITaskFailParams,ITaskFailResult>(taskFailIR);


/** 'TaskInterrupt' parameters type */
export interface ITaskInterruptParams {
  errorMessage: string;
  maxInterruptions?: number | null | void;
  taskId: NumberOrString;
  taskLeaseId: NumberOrString;
}

/** 'TaskInterrupt' return type */
export interface ITaskInterruptResult {
  result: string;
}

/** 'TaskInterrupt' query type */
export interface ITaskInterruptQuery {
  params: ITaskInterruptParams;
  result: ITaskInterruptResult;
}

const taskInterruptIR: any = {"usedParamSet":{"taskId":true,"taskLeaseId":true,"errorMessage":true,"maxInterruptions":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":29,"b":36}]},{"name":"taskLeaseId","required":true,"transform":{"type":"scalar"},"locs":[{"a":47,"b":59}]},{"name":"errorMessage","required":true,"transform":{"type":"scalar"},"locs":[{"a":70,"b":83}]},{"name":"maxInterruptions","required":false,"transform":{"type":"scalar"},"locs":[{"a":92,"b":108}]}],"statement":"select queues.interrupt_task(:taskId!::bigint, :taskLeaseId!::bigint, :errorMessage!::text, :maxInterruptions::integer) as \"result!\""};

/**
 * Query generated from SQL:
 * ```
 * select queues.interrupt_task(:taskId!::bigint, :taskLeaseId!::bigint, :errorMessage!::text, :maxInterruptions::integer) as "result!"
 * ```
 */
export const taskInterrupt = new PreparedQuery<ITaskInterruptParams,ITaskInterruptResult>(taskInterruptIR);


/** 'TaskExtendLeases' parameters type */
export interface ITaskExtendLeasesParams {
  leaseSeconds?: number | null | void;
  taskIds: NumberOrStringArray;
  taskLeaseIds: NumberOrStringArray;
}

/** 'TaskExtendLeases' return type */
export interface ITaskExtendLeasesResult {
  expiresAt: Date;
  taskId: string;
  taskLeaseId: string;
}

/** 'TaskExtendLeases' query type */
export interface ITaskExtendLeasesQuery {
  params: ITaskExtendLeasesParams;
  result: ITaskExtendLeasesResult;
}

const taskExtendLeasesIR: any = {"usedParamSet":{"taskIds":true,"taskLeaseIds":true,"leaseSeconds":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":123,"b":131}]},{"name":"taskLeaseIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":144,"b":157}]},{"name":"leaseSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":170,"b":182}]}],"statement":"select e.task_id as \"taskId!\", e.task_lease_id as \"taskLeaseId!\", e.expires_at as \"expiresAt!\"\n  from queues.extend_leases(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :leaseSeconds::integer) e"};

/**
 * Query generated from SQL:
 * ```
 * select e.task_id as "taskId!", e.task_lease_id as "taskLeaseId!", e.expires_at as "expiresAt!"
 *   from queues.extend_leases(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :leaseSeconds::integer) e
 * ```
 */
export const taskExtendLeases = new PreparedQuery<ITaskExtendLeasesParams,ITaskExtendLeasesResult>(taskExtendLeasesIR);


/** 'TaskReleaseLeases' parameters type */
export interface ITaskReleaseLeasesParams {
  taskIds: NumberOrStringArray;
  taskLeaseIds: NumberOrStringArray;
}

/** 'TaskReleaseLeases' return type */
export interface ITaskReleaseLeasesResult {
  taskId: string;
}

/** 'TaskReleaseLeases' query type */
export interface ITaskReleaseLeasesQuery {
  params: ITaskReleaseLeasesParams;
  result: ITaskReleaseLeasesResult;
}

const taskReleaseLeasesIR: any = {"usedParamSet":{"taskIds":true,"taskLeaseIds":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":59,"b":67}]},{"name":"taskLeaseIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":80,"b":93}]}],"statement":"select r.task_id as \"taskId!\"\n  from queues.release_leases(:taskIds!::bigint[], :taskLeaseIds!::bigint[]) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.task_id as "taskId!"
 *   from queues.release_leases(:taskIds!::bigint[], :taskLeaseIds!::bigint[]) r
 * ```
 */
export const taskReleaseLeases = new PreparedQuery<ITaskReleaseLeasesParams,ITaskReleaseLeasesResult>(taskReleaseLeasesIR);


/** 'TaskSettleWithHandlers' parameters type */
export interface ITaskSettleWithHandlersParams {
  bodies: unknownArray;
  errorMessages?: stringArray | null | void;
  errorTaskIds?: NumberOrStringArray | null | void;
  handlers: stringArray;
  modes: stringArray;
  outcomes: stringArray;
  raisedPrefixes: stringArray;
  retries?: booleanArray | null | void;
  startedUs?: NumberOrStringArray | null | void;
  taskIds: NumberOrStringArray;
  taskLeaseIds: NumberOrStringArray;
  traceparents?: stringArray | null | void;
}

/** 'TaskSettleWithHandlers' return type */
export interface ITaskSettleWithHandlersResult {
  errors: stringArray;
  outcome: string | null;
  result: string;
  taskId: string;
}

/** 'TaskSettleWithHandlers' query type */
export interface ITaskSettleWithHandlersQuery {
  params: ITaskSettleWithHandlersParams;
  result: ITaskSettleWithHandlersResult;
}

const taskSettleWithHandlersIR: any = {"usedParamSet":{"taskIds":true,"taskLeaseIds":true,"outcomes":true,"retries":true,"errorTaskIds":true,"errorMessages":true,"handlers":true,"bodies":true,"modes":true,"raisedPrefixes":true,"startedUs":true,"traceparents":true},"params":[{"name":"taskIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":122,"b":130}]},{"name":"taskLeaseIds","required":true,"transform":{"type":"scalar"},"locs":[{"a":143,"b":156}]},{"name":"outcomes","required":true,"transform":{"type":"scalar"},"locs":[{"a":169,"b":178}]},{"name":"retries","required":false,"transform":{"type":"scalar"},"locs":[{"a":224,"b":231}]},{"name":"errorTaskIds","required":false,"transform":{"type":"scalar"},"locs":[{"a":245,"b":257}]},{"name":"errorMessages","required":false,"transform":{"type":"scalar"},"locs":[{"a":270,"b":283}]},{"name":"handlers","required":true,"transform":{"type":"scalar"},"locs":[{"a":329,"b":338}]},{"name":"bodies","required":true,"transform":{"type":"scalar"},"locs":[{"a":349,"b":356}]},{"name":"modes","required":true,"transform":{"type":"scalar"},"locs":[{"a":368,"b":374}]},{"name":"raisedPrefixes","required":true,"transform":{"type":"scalar"},"locs":[{"a":385,"b":400}]},{"name":"startedUs","required":false,"transform":{"type":"scalar"},"locs":[{"a":446,"b":455}]},{"name":"traceparents","required":false,"transform":{"type":"scalar"},"locs":[{"a":468,"b":480}]}],"statement":"select s.task_id as \"taskId!\", s.result as \"result!\", s.outcome, s.errors as \"errors!\"\n  from queues.settle_with_handlers(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :outcomes!::text[],\n                                   :retries::boolean[], :errorTaskIds::bigint[], :errorMessages::text[],\n                                   :handlers!::text[], :bodies!::jsonb[], :modes!::text[], :raisedPrefixes!::text[],\n                                   :startedUs::bigint[], :traceparents::text[]) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.task_id as "taskId!", s.result as "result!", s.outcome, s.errors as "errors!"
 *   from queues.settle_with_handlers(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :outcomes!::text[],
 *                                    :retries::boolean[], :errorTaskIds::bigint[], :errorMessages::text[],
 *                                    :handlers!::text[], :bodies!::jsonb[], :modes!::text[], :raisedPrefixes!::text[],
 *                                    :startedUs::bigint[], :traceparents::text[]) s
 * ```
 */
export const taskSettleWithHandlers = new PreparedQuery<ITaskSettleWithHandlersParams,ITaskSettleWithHandlersResult>(taskSettleWithHandlersIR);


