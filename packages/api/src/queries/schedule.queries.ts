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


