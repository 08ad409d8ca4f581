/** Types generated for queries found in "src/queries/metrics.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type stringArray = (string)[];

/** 'ThroughputList' parameters type */
export interface IThroughputListParams {
  bucketSeconds?: number | null | void;
  windowSeconds?: number | null | void;
}

/** 'ThroughputList' return type */
export interface IThroughputListResult {
  bucketStart: Date;
  completed: string;
  outcome: string;
  taskType: string;
}

/** 'ThroughputList' query type */
export interface IThroughputListQuery {
  params: IThroughputListParams;
  result: IThroughputListResult;
}

const throughputListIR: any = {"usedParamSet":{"windowSeconds":true,"bucketSeconds":true},"params":[{"name":"windowSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":153,"b":166}]},{"name":"bucketSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":178,"b":191}]}],"statement":"select t.bucket_start as \"bucketStart!\", t.task_type as \"taskType!\", t.outcome as \"outcome!\",\n       t.completed as \"completed!\"\n  from admin.throughput(:windowSeconds::integer, :bucketSeconds::integer) t"};

/**
 * Query generated from SQL:
 * ```
 * select t.bucket_start as "bucketStart!", t.task_type as "taskType!", t.outcome as "outcome!",
 *        t.completed as "completed!"
 *   from admin.throughput(:windowSeconds::integer, :bucketSeconds::integer) t
 * ```
 */
export const throughputList = new PreparedQuery<IThroughputListParams,IThroughputListResult>(throughputListIR);


/** 'CompletionStatsList' parameters type */
export interface ICompletionStatsListParams {
  windowSeconds?: number | null | void;
}

/** 'CompletionStatsList' return type */
export interface ICompletionStatsListResult {
  completed: string;
  durationBuckets: stringArray;
  durationSum: number;
  outcome: string;
  taskType: string;
  timed: string;
}

/** 'CompletionStatsList' query type */
export interface ICompletionStatsListQuery {
  params: ICompletionStatsListParams;
  result: ICompletionStatsListResult;
}

const completionStatsListIR: any = {"usedParamSet":{"windowSeconds":true},"params":[{"name":"windowSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":222,"b":235}]}],"statement":"select s.task_type as \"taskType!\", s.outcome as \"outcome!\", s.completed as \"completed!\",\n       s.timed as \"timed!\", s.duration_sum as \"durationSum!\", s.duration_buckets as \"durationBuckets!\"\n  from admin.completion_stats(:windowSeconds::integer) s"};

/**
 * Query generated from SQL:
 * ```
 * select s.task_type as "taskType!", s.outcome as "outcome!", s.completed as "completed!",
 *        s.timed as "timed!", s.duration_sum as "durationSum!", s.duration_buckets as "durationBuckets!"
 *   from admin.completion_stats(:windowSeconds::integer) s
 * ```
 */
export const completionStatsList = new PreparedQuery<ICompletionStatsListParams,ICompletionStatsListResult>(completionStatsListIR);


