/** Types generated for queries found in "src/queries/history.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

/** 'HistoryStatus' parameters type */
export type IHistoryStatusParams = void;

/** 'HistoryStatus' return type */
export interface IHistoryStatusResult {
  status: unknown;
}

/** 'HistoryStatus' query type */
export interface IHistoryStatusQuery {
  params: IHistoryStatusParams;
  result: IHistoryStatusResult;
}

const historyStatusIR: any = {"usedParamSet":{},"params":[],"statement":"select admin.history_status() as \"status!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.history_status() as "status!"
 * ```
 */
export const historyStatus = new PreparedQuery<IHistoryStatusParams,IHistoryStatusResult>(historyStatusIR);


