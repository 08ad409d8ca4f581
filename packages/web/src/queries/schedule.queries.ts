/** Types generated for queries found in "src/queries/schedule.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type DateOrString = Date | string;

/** 'StaggeredGenerate' parameters type */
export interface IStaggeredGenerateParams {
  batches: number;
  payloads: unknown;
  periodSeconds: number;
  priority?: number | null | void;
  startAt: DateOrString;
  taskType: string;
}

/** 'StaggeredGenerate' return type */
export interface IStaggeredGenerateResult {
  batch: number;
  scheduledAt: Date;
  taskCount: number;
}

/** 'StaggeredGenerate' query type */
export interface IStaggeredGenerateQuery {
  params: IStaggeredGenerateParams;
  result: IStaggeredGenerateResult;
}

const staggeredGenerateIR: any = {"usedParamSet":{"taskType":true,"payloads":true,"startAt":true,"periodSeconds":true,"batches":true,"priority":true},"params":[{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":138,"b":147}]},{"name":"payloads","required":true,"transform":{"type":"scalar"},"locs":[{"a":156,"b":165}]},{"name":"startAt","required":true,"transform":{"type":"scalar"},"locs":[{"a":175,"b":183}]},{"name":"periodSeconds","required":true,"transform":{"type":"scalar"},"locs":[{"a":225,"b":239}]},{"name":"batches","required":true,"transform":{"type":"scalar"},"locs":[{"a":252,"b":260}]},{"name":"priority","required":false,"transform":{"type":"scalar"},"locs":[{"a":272,"b":280}]}],"statement":"select b.batch as \"batch!\", b.scheduled_at as \"scheduledAt!\", b.task_count as \"taskCount!\"\n  from schedules.generate_staggered_tasks(\n    :taskType!::text, :payloads!::jsonb, :startAt!::timestamptz,\n    make_interval(secs => :periodSeconds!::integer), :batches!::integer, :priority::integer\n  ) b"};

/**
 * Query generated from SQL:
 * ```
 * select b.batch as "batch!", b.scheduled_at as "scheduledAt!", b.task_count as "taskCount!"
 *   from schedules.generate_staggered_tasks(
 *     :taskType!::text, :payloads!::jsonb, :startAt!::timestamptz,
 *     make_interval(secs => :periodSeconds!::integer), :batches!::integer, :priority::integer
 *   ) b
 * ```
 */
export const staggeredGenerate = new PreparedQuery<IStaggeredGenerateParams,IStaggeredGenerateResult>(staggeredGenerateIR);


/** 'ScheduleList' parameters type */
export interface IScheduleListParams {
  runs?: number | null | void;
}

/** 'ScheduleList' return type */
export interface IScheduleListResult {
  cron: string;
  enabled: boolean;
  lastFireAt: Date | null;
  lastRuns: unknown;
  missedRunPolicy: string;
  name: string;
  nextFireAt: Date | null;
  payload: unknown;
  priority: number;
  taskType: string;
  timeZone: string;
  updatedAt: Date;
}

/** 'ScheduleList' query type */
export interface IScheduleListQuery {
  params: IScheduleListParams;
  result: IScheduleListResult;
}

const scheduleListIR: any = {"usedParamSet":{"runs":true},"params":[{"name":"runs","required":false,"transform":{"type":"scalar"},"locs":[{"a":391,"b":395}]}],"statement":"select s.name as \"name!\", s.cron as \"cron!\", s.task_type as \"taskType!\", s.payload as \"payload!\",\n       s.priority as \"priority!\", s.missed_run_policy as \"missedRunPolicy!\", s.enabled as \"enabled!\",\n       s.last_fire_at as \"lastFireAt\", s.next_fire_at as \"nextFireAt\", s.updated_at as \"updatedAt!\",\n       s.last_runs as \"lastRuns!\", s.time_zone as \"timeZone!\"\n  from admin.list_schedules(:runs::integer) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.name as "name!", s.cron as "cron!", s.task_type as "taskType!", s.payload as "payload!",
 *        s.priority as "priority!", s.missed_run_policy as "missedRunPolicy!", s.enabled as "enabled!",
 *        s.last_fire_at as "lastFireAt", s.next_fire_at as "nextFireAt", s.updated_at as "updatedAt!",
 *        s.last_runs as "lastRuns!", s.time_zone as "timeZone!"
 *   from admin.list_schedules(:runs::integer) s
 * ```
 */
export const scheduleList = new PreparedQuery<IScheduleListParams,IScheduleListResult>(scheduleListIR);


/** 'ScheduleUpsert' parameters type */
export interface IScheduleUpsertParams {
  cron: string;
  missedRunPolicy?: string | null | void;
  name: string;
  payload: unknown;
  priority?: number | null | void;
  taskType: string;
  timeZone?: string | null | void;
}

/** 'ScheduleUpsert' return type */
export interface IScheduleUpsertResult {
  scheduleId: string | null;
  validationFailureMessage: string | null;
}

/** 'ScheduleUpsert' query type */
export interface IScheduleUpsertQuery {
  params: IScheduleUpsertParams;
  result: IScheduleUpsertResult;
}

const scheduleUpsertIR: any = {"usedParamSet":{"name":true,"cron":true,"taskType":true,"payload":true,"priority":true,"missedRunPolicy":true,"timeZone":true},"params":[{"name":"name","required":true,"transform":{"type":"scalar"},"locs":[{"a":135,"b":140}]},{"name":"cron","required":true,"transform":{"type":"scalar"},"locs":[{"a":149,"b":154}]},{"name":"taskType","required":true,"transform":{"type":"scalar"},"locs":[{"a":163,"b":172}]},{"name":"payload","required":true,"transform":{"type":"scalar"},"locs":[{"a":181,"b":189}]},{"name":"priority","required":false,"transform":{"type":"scalar"},"locs":[{"a":199,"b":207}]},{"name":"missedRunPolicy","required":false,"transform":{"type":"scalar"},"locs":[{"a":223,"b":238}]},{"name":"timeZone","required":false,"transform":{"type":"scalar"},"locs":[{"a":247,"b":255}]}],"statement":"select s.schedule_id as \"scheduleId\", s.validation_failure_message as \"validationFailureMessage\"\n  from schedules.upsert_schedule(\n    :name!::text, :cron!::text, :taskType!::text, :payload!::jsonb, :priority::integer,\n    :missedRunPolicy::text, :timeZone::text\n  ) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.schedule_id as "scheduleId", s.validation_failure_message as "validationFailureMessage"
 *   from schedules.upsert_schedule(
 *     :name!::text, :cron!::text, :taskType!::text, :payload!::jsonb, :priority::integer,
 *     :missedRunPolicy::text, :timeZone::text
 *   ) s
 * ```
 */
export const scheduleUpsert = new PreparedQuery<IScheduleUpsertParams,IScheduleUpsertResult>(scheduleUpsertIR);


/** 'ScheduleEnable' parameters type */
export interface IScheduleEnableParams {
  name: string;
}

/** 'ScheduleEnable' return type */
export interface IScheduleEnableResult {
  scheduleId: string | null;
  validationFailureMessage: string | null;
}

/** 'ScheduleEnable' query type */
export interface IScheduleEnableQuery {
  params: IScheduleEnableParams;
  result: IScheduleEnableResult;
}

const scheduleEnableIR: any = {"usedParamSet":{"name":true},"params":[{"name":"name","required":true,"transform":{"type":"scalar"},"locs":[{"a":130,"b":135}]}],"statement":"select s.schedule_id as \"scheduleId\", s.validation_failure_message as \"validationFailureMessage\"\n  from schedules.enable_schedule(:name!::text) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.schedule_id as "scheduleId", s.validation_failure_message as "validationFailureMessage"
 *   from schedules.enable_schedule(:name!::text) s
 * ```
 */
export const scheduleEnable = new PreparedQuery<IScheduleEnableParams,IScheduleEnableResult>(scheduleEnableIR);


/** 'ScheduleDisable' parameters type */
export interface IScheduleDisableParams {
  name: string;
}

/** 'ScheduleDisable' return type */
export interface IScheduleDisableResult {
  scheduleId: string | null;
  validationFailureMessage: string | null;
}

/** 'ScheduleDisable' query type */
export interface IScheduleDisableQuery {
  params: IScheduleDisableParams;
  result: IScheduleDisableResult;
}

const scheduleDisableIR: any = {"usedParamSet":{"name":true},"params":[{"name":"name","required":true,"transform":{"type":"scalar"},"locs":[{"a":131,"b":136}]}],"statement":"select s.schedule_id as \"scheduleId\", s.validation_failure_message as \"validationFailureMessage\"\n  from schedules.disable_schedule(:name!::text) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.schedule_id as "scheduleId", s.validation_failure_message as "validationFailureMessage"
 *   from schedules.disable_schedule(:name!::text) s
 * ```
 */
export const scheduleDisable = new PreparedQuery<IScheduleDisableParams,IScheduleDisableResult>(scheduleDisableIR);


