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

const functionRunIR: any = {"usedParamSet":{"functionName":true,"payload":true},"params":[{"name":"functionName","required":true,"transform":{"type":"scalar"},"locs":[{"a":29,"b":42}]},{"name":"payload","required":false,"transform":{"type":"scalar"},"locs":[{"a":51,"b":58}]}],"statement":"select internal.run_function(:functionName!::text, :payload::jsonb) as \"result\""};

/**
 * Query generated from SQL:
 * ```
 * select internal.run_function(:functionName!::text, :payload::jsonb) as "result"
 * ```
 */
export const functionRun = new PreparedQuery<IFunctionRunParams,IFunctionRunResult>(functionRunIR);


