/** Types generated for queries found in "src/queries/throttle.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type DateOrString = Date | string;

export type NumberOrString = number | string;

export type NumberOrStringArray = (NumberOrString)[];

export type stringArray = (string)[];

/** 'ThrottleRecord' parameters type */
export interface IThrottleRecordParams {
  key?: string | null | void;
  keyKind: string;
  reason: string;
  recordedBy: string;
  retryAfterSeconds?: NumberOrString | null | void;
  taskId?: NumberOrString | null | void;
  taskLeaseId?: NumberOrString | null | void;
  until?: DateOrString | null | void;
  waitingLeaseIds?: NumberOrStringArray | null | void;
  waitingTaskIds?: NumberOrStringArray | null | void;
}

/** 'ThrottleRecord' return type */
export interface IThrottleRecordResult {
  releasedWaiting: stringArray;
  result: string;
  throttledUntil: Date;
}

/** 'ThrottleRecord' query type */
export interface IThrottleRecordQuery {
  params: IThrottleRecordParams;
  result: IThrottleRecordResult;
}

const throttleRecordIR: any = {"usedParamSet":{"keyKind":true,"key":true,"until":true,"retryAfterSeconds":true,"reason":true,"recordedBy":true,"taskId":true,"taskLeaseId":true,"waitingTaskIds":true,"waitingLeaseIds":true},"params":[{"name":"keyKind","required":true,"transform":{"type":"scalar"},"locs":[{"a":141,"b":149}]},{"name":"key","required":false,"transform":{"type":"scalar"},"locs":[{"a":158,"b":161}]},{"name":"until","required":false,"transform":{"type":"scalar"},"locs":[{"a":170,"b":175}]},{"name":"retryAfterSeconds","required":false,"transform":{"type":"scalar"},"locs":[{"a":191,"b":208}]},{"name":"reason","required":true,"transform":{"type":"scalar"},"locs":[{"a":250,"b":257}]},{"name":"recordedBy","required":true,"transform":{"type":"scalar"},"locs":[{"a":266,"b":277}]},{"name":"taskId","required":false,"transform":{"type":"scalar"},"locs":[{"a":286,"b":292}]},{"name":"taskLeaseId","required":false,"transform":{"type":"scalar"},"locs":[{"a":303,"b":314}]},{"name":"waitingTaskIds","required":false,"transform":{"type":"scalar"},"locs":[{"a":355,"b":369}]},{"name":"waitingLeaseIds","required":false,"transform":{"type":"scalar"},"locs":[{"a":382,"b":397}]}],"statement":"select r.result as \"result!\", r.throttled_until as \"throttledUntil!\", r.released_waiting as \"releasedWaiting!\"\n  from queues.record_throttle(:keyKind!::text, :key::text, :until::timestamptz, :retryAfterSeconds::numeric,\n                              :reason!::text, :recordedBy!::text, :taskId::bigint, :taskLeaseId::bigint,\n                              :waitingTaskIds::bigint[], :waitingLeaseIds::bigint[]) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.result as "result!", r.throttled_until as "throttledUntil!", r.released_waiting as "releasedWaiting!"
 *   from queues.record_throttle(:keyKind!::text, :key::text, :until::timestamptz, :retryAfterSeconds::numeric,
 *                               :reason!::text, :recordedBy!::text, :taskId::bigint, :taskLeaseId::bigint,
 *                               :waitingTaskIds::bigint[], :waitingLeaseIds::bigint[]) r
 * ```
 */
export const throttleRecord = new PreparedQuery<IThrottleRecordParams,IThrottleRecordResult>(throttleRecordIR);


/** 'ThrottleListActive' parameters type */
export type IThrottleListActiveParams = void;

/** 'ThrottleListActive' return type */
export interface IThrottleListActiveResult {
  key: string;
  keyKind: string;
  reason: string;
  recordedAt: Date;
  recordedBy: string;
  reports: number;
  throttledUntil: Date;
}

/** 'ThrottleListActive' query type */
export interface IThrottleListActiveQuery {
  params: IThrottleListActiveParams;
  result: IThrottleListActiveResult;
}

const throttleListActiveIR: any = {"usedParamSet":{},"params":[],"statement":"select t.key_kind as \"keyKind!\", t.key as \"key!\", t.throttled_until as \"throttledUntil!\", t.reason as \"reason!\",\n       t.recorded_at as \"recordedAt!\", t.recorded_by as \"recordedBy!\", t.reports as \"reports!\"\n  from queues.active_throttles() t"};

/**
 * Query generated from SQL:
 * ```
 * select t.key_kind as "keyKind!", t.key as "key!", t.throttled_until as "throttledUntil!", t.reason as "reason!",
 *        t.recorded_at as "recordedAt!", t.recorded_by as "recordedBy!", t.reports as "reports!"
 *   from queues.active_throttles() t
 * ```
 */
export const throttleListActive = new PreparedQuery<IThrottleListActiveParams,IThrottleListActiveResult>(throttleListActiveIR);


