/** Types generated for queries found in "src/queries/dead_letter.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

/** 'DeadLetterList' parameters type */
export interface IDeadLetterListParams {
  beforeTaskId?: NumberOrString | null | void;
  limit?: number | null | void;
  taskType?: string | null | void;
}

/** 'DeadLetterList' return type */
export interface IDeadLetterListResult {
  attempts: number;
  completedAt: Date;
  lastError: string | null;
  outcome: string;
  payload: unknown;
  taskId: string;
  taskType: string;
}

/** 'DeadLetterList' query type */
export interface IDeadLetterListQuery {
  params: IDeadLetterListParams;
  result: IDeadLetterListResult;
}

const deadLetterListIR: any = {"usedParamSet":{"taskType":true,"limit":true,"beforeTaskId":true},"params":[{"name":"taskType","required":false,"transform":{"type":"scalar"},"locs":[{"a":295,"b":303}]},{"name":"limit","required":false,"transform":{"type":"scalar"},"locs":[{"a":312,"b":317}]},{"name":"beforeTaskId","required":false,"transform":{"type":"scalar"},"locs":[{"a":329,"b":341}]}],"statement":"select d.task_id      as \"taskId!\",\n       d.task_type    as \"taskType!\",\n       d.payload      as \"payload!\",\n       d.outcome      as \"outcome!\",\n       d.completed_at as \"completedAt!\",\n       d.last_error   as \"lastError\",\n       d.attempts     as \"attempts!\"\n  from admin.list_dead_letters(:taskType::text, :limit::integer, :beforeTaskId::bigint) d"};

/**
 * Query generated from SQL:
 * ```
 * select d.task_id      as "taskId!",
 *        d.task_type    as "taskType!",
 *        d.payload      as "payload!",
 *        d.outcome      as "outcome!",
 *        d.completed_at as "completedAt!",
 *        d.last_error   as "lastError",
 *        d.attempts     as "attempts!"
 *   from admin.list_dead_letters(:taskType::text, :limit::integer, :beforeTaskId::bigint) d
 * ```
 */
export const deadLetterList = new PreparedQuery<IDeadLetterListParams,IDeadLetterListResult>(deadLetterListIR);


