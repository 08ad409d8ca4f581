/** Types generated for queries found in "src/queries/function.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

/** 'FunctionRun' parameters type */
export interface IFunctionRunParams {
  functionName: string;
  payload?: unknown | null | void;
}

/** 'FunctionRun' return type */
export interface IFunctionRunResult {
  result: unknown | null;
}

/** 'FunctionRun' query type */
export interface IFunctionRunQuery {
  params: IFunctionRunParams;
  result: IFunctionRunResult;
}

const functionRunIR: any = {"usedParamSet":{"functionName":true,"payload":true},"params":[{"name":"functionName","required":true,"transform":{"type":"scalar"},"locs":[{"a":29,"b":42}]},{"name":"payload","required":false,"transform":{"type":"scalar"},"locs":[{"a":51,"b":58}]}],"statement":"select internal.run_function(:functionName!::text, :payload::jsonb) as \"result\"                                                                                                                                                                                                                                                                "};

/**
 * Query generated from SQL:
 * ```
 * select internal.run_function(:functionName!::text, :payload::jsonb) as "result"                                                                                                                                                                                                                                                                
 * ```
 */
export const functionRun = new PreparedQuery<IFunctionRunParams,IFunctionRunResult>(functionRunIR);


/** 'FunctionRunTraced' parameters type */
export interface IFunctionRunTracedParams {
  functionName: string;
  payload?: unknown | null | void;
  traceparent: string;
}

/** 'FunctionRunTraced' return type */
export interface IFunctionRunTracedResult {
  result: unknown | null;
}

/** 'FunctionRunTraced' query type */
export interface IFunctionRunTracedQuery {
  params: IFunctionRunTracedParams;
  result: IFunctionRunTracedResult;
}

const functionRunTracedIR: any = {"usedParamSet":{"traceparent":true,"functionName":true,"payload":true},"params":[{"name":"traceparent","required":true,"transform":{"type":"scalar"},"locs":[{"a":72,"b":84}]},{"name":"functionName","required":true,"transform":{"type":"scalar"},"locs":[{"a":170,"b":183}]},{"name":"payload","required":false,"transform":{"type":"scalar"},"locs":[{"a":192,"b":199}]}],"statement":"with context as materialized (\n  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent\n),\nran as materialized (\n  select internal.run_function(:functionName!::text, :payload::jsonb) as result from context\n),\ncleared as materialized (\n  select set_config('queue.traceparent', '', true) from ran\n)\nselect r.result as \"result\" from ran r, cleared                                                                                                                                                      "};

/**
 * Query generated from SQL:
 * ```
 * with context as materialized (
 *   select set_config('queue.traceparent', :traceparent!::text, true) as traceparent
 * ),
 * ran as materialized (
 *   select internal.run_function(:functionName!::text, :payload::jsonb) as result from context
 * ),
 * cleared as materialized (
 *   select set_config('queue.traceparent', '', true) from ran
 * )
 * select r.result as "result" from ran r, cleared                                                                                                                                                      
 * ```
 */
export const functionRunTraced = new PreparedQuery<IFunctionRunTracedParams,IFunctionRunTracedResult>(functionRunTracedIR);


/** 'FunctionRunBeforeProviderCall' parameters type */
export interface IFunctionRunBeforeProviderCallParams {
  beforeHandler: string;
  payload?: unknown | null | void;
  taskId: NumberOrString;
  taskLeaseId: NumberOrString;
}

/** 'FunctionRunBeforeProviderCall' return type */
export interface IFunctionRunBeforeProviderCallResult {
  beforeResult: unknown | null;
  startError: string | null;
  startResult: unknown | null;
}

/** 'FunctionRunBeforeProviderCall' query type */
export interface IFunctionRunBeforeProviderCallQuery {
  params: IFunctionRunBeforeProviderCallParams;
  result: IFunctionRunBeforeProviderCallResult;
}

const functionRunBeforeProviderCallIR: any = {"usedParamSet":{"beforeHandler":true,"payload":true,"taskId":true,"taskLeaseId":true},"params":[{"name":"beforeHandler","required":true,"transform":{"type":"scalar"},"locs":[{"a":146,"b":160}]},{"name":"payload","required":false,"transform":{"type":"scalar"},"locs":[{"a":169,"b":176}]},{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":186,"b":193}]},{"name":"taskLeaseId","required":true,"transform":{"type":"scalar"},"locs":[{"a":245,"b":257}]}],"statement":"select b.before_result as \"beforeResult\", b.start_result as \"startResult\", b.start_error as \"startError\"\n  from internal.run_before_provider_call(:beforeHandler!::text, :payload::jsonb, :taskId!::bigint,\n                                         :taskLeaseId!::bigint) b                                                          "};

/**
 * Query generated from SQL:
 * ```
 * select b.before_result as "beforeResult", b.start_result as "startResult", b.start_error as "startError"
 *   from internal.run_before_provider_call(:beforeHandler!::text, :payload::jsonb, :taskId!::bigint,
 *                                          :taskLeaseId!::bigint) b                                                          
 * ```
 */
export const functionRunBeforeProviderCall = new PreparedQuery<IFunctionRunBeforeProviderCallParams,IFunctionRunBeforeProviderCallResult>(functionRunBeforeProviderCallIR);


/** 'FunctionRunBeforeProviderCallTraced' parameters type */
export interface IFunctionRunBeforeProviderCallTracedParams {
  beforeHandler: string;
  payload?: unknown | null | void;
  taskId: NumberOrString;
  taskLeaseId: NumberOrString;
  traceparent: string;
}

/** 'FunctionRunBeforeProviderCallTraced' return type */
export interface IFunctionRunBeforeProviderCallTracedResult {
  beforeResult: unknown | null;
  startError: string | null;
  startResult: unknown | null;
}

/** 'FunctionRunBeforeProviderCallTraced' query type */
export interface IFunctionRunBeforeProviderCallTracedQuery {
  params: IFunctionRunBeforeProviderCallTracedParams;
  result: IFunctionRunBeforeProviderCallTracedResult;
}

const functionRunBeforeProviderCallTracedIR: any = {"usedParamSet":{"traceparent":true,"beforeHandler":true,"payload":true,"taskId":true,"taskLeaseId":true},"params":[{"name":"traceparent","required":true,"transform":{"type":"scalar"},"locs":[{"a":72,"b":84}]},{"name":"beforeHandler","required":true,"transform":{"type":"scalar"},"locs":[{"a":404,"b":418}]},{"name":"payload","required":false,"transform":{"type":"scalar"},"locs":[{"a":431,"b":438}]},{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":448,"b":455}]},{"name":"taskLeaseId","required":true,"transform":{"type":"scalar"},"locs":[{"a":470,"b":482}]}],"statement":"with context as materialized (\n  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent\n),\nran as materialized (\n  select b.before_result, b.start_result, b.start_error\n    from context c\n   cross join lateral internal.run_before_provider_call(\n    -- c.traceparent (never null) ties the call to the setting's row: it runs after it.\n    case when c.traceparent is not null then :beforeHandler!::text end, :payload::jsonb, :taskId!::bigint,\n    :taskLeaseId!::bigint) b\n),\ncleared as materialized (\n  select set_config('queue.traceparent', '', true) from (select count(*) from ran) n\n)\nselect r.before_result as \"beforeResult\", r.start_result as \"startResult\", r.start_error as \"startError\"\n  from ran r, cleared                                                                                                                                                                                          "};

/**
 * Query generated from SQL:
 * ```
 * with context as materialized (
 *   select set_config('queue.traceparent', :traceparent!::text, true) as traceparent
 * ),
 * ran as materialized (
 *   select b.before_result, b.start_result, b.start_error
 *     from context c
 *    cross join lateral internal.run_before_provider_call(
 *     -- c.traceparent (never null) ties the call to the setting's row: it runs after it.
 *     case when c.traceparent is not null then :beforeHandler!::text end, :payload::jsonb, :taskId!::bigint,
 *     :taskLeaseId!::bigint) b
 * ),
 * cleared as materialized (
 *   select set_config('queue.traceparent', '', true) from (select count(*) from ran) n
 * )
 * select r.before_result as "beforeResult", r.start_result as "startResult", r.start_error as "startError"
 *   from ran r, cleared                                                                                                                                                                                          
 * ```
 */
export const functionRunBeforeProviderCallTraced = new PreparedQuery<IFunctionRunBeforeProviderCallTracedParams,IFunctionRunBeforeProviderCallTracedResult>(functionRunBeforeProviderCallTracedIR);


/** 'FunctionRunBeforeProviderCalls' parameters type */
export interface IFunctionRunBeforeProviderCallsParams {
  calls: unknown;
}

/** 'FunctionRunBeforeProviderCalls' return type */
export interface IFunctionRunBeforeProviderCallsResult {
  beforeError: string | null;
  beforeResult: unknown | null;
  beforeSqlstate: string | null;
  ord: number;
  startError: string | null;
  startResult: unknown | null;
}

/** 'FunctionRunBeforeProviderCalls' query type */
export interface IFunctionRunBeforeProviderCallsQuery {
  params: IFunctionRunBeforeProviderCallsParams;
  result: IFunctionRunBeforeProviderCallsResult;
}

const functionRunBeforeProviderCallsIR: any = {"usedParamSet":{"calls":true},"params":[{"name":"calls","required":true,"transform":{"type":"scalar"},"locs":[{"a":243,"b":249}]}],"statement":"select b.ord as \"ord!\", b.before_result as \"beforeResult\", b.start_result as \"startResult\",\n       b.start_error as \"startError\", b.before_error as \"beforeError\", b.before_sqlstate as \"beforeSqlstate\"\n  from internal.run_before_provider_calls(:calls!::jsonb) b"};

/**
 * Query generated from SQL:
 * ```
 * select b.ord as "ord!", b.before_result as "beforeResult", b.start_result as "startResult",
 *        b.start_error as "startError", b.before_error as "beforeError", b.before_sqlstate as "beforeSqlstate"
 *   from internal.run_before_provider_calls(:calls!::jsonb) b
 * ```
 */
export const functionRunBeforeProviderCalls = new PreparedQuery<IFunctionRunBeforeProviderCallsParams,IFunctionRunBeforeProviderCallsResult>(functionRunBeforeProviderCallsIR);


