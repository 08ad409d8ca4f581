/** Types generated for queries found in "src/queries/function.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

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

const functionRunTracedIR: any = {"usedParamSet":{"traceparent":true,"functionName":true,"payload":true},"params":[{"name":"traceparent","required":true,"transform":{"type":"scalar"},"locs":[{"a":72,"b":84}]},{"name":"functionName","required":true,"transform":{"type":"scalar"},"locs":[{"a":170,"b":183}]},{"name":"payload","required":false,"transform":{"type":"scalar"},"locs":[{"a":192,"b":199}]}],"statement":"with context as materialized (\n  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent\n),\nran as materialized (\n  select internal.run_function(:functionName!::text, :payload::jsonb) as result from context\n),\ncleared as materialized (\n  select set_config('queue.traceparent', '', true) from ran\n)\nselect r.result as \"result\" from ran r, cleared"};

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


