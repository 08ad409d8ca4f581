/** Types generated for queries found in "src/queries/audit.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

export type NumberOrStringArray = (NumberOrString)[];

export type stringArray = (string)[];

/** 'ApiChangeRecord' parameters type */
export interface IApiChangeRecordParams {
  action: string;
  answer: unknown;
  input?: unknown | null | void;
  method: string;
  requestId: string;
  route: string;
  scheduleName?: string | null | void;
  taskIds?: NumberOrStringArray | null | void;
  taskType?: string | null | void;
  userLevel: string;
  userName: string;
  workerId?: string | null | void;
}

/** 'ApiChangeRecord' return type */
export interface IApiChangeRecordResult {
  apiChangeId: string;
}

/** 'ApiChangeRecord' query type */
export interface IApiChangeRecordQuery {
  params: IApiChangeRecordParams;
  result: IApiChangeRecordResult;
}

const apiChangeRecordIR: any = {"usedParamSet":{"userName":true,"userLevel":true,"requestId":true,"method":true,"route":true,"action":true,"taskIds":true,"taskType":true,"scheduleName":true,"workerId":true,"input":true,"answer":true},"params":[{"name":"userName","required":true,"transform":{"type":"scalar"},"locs":[{"a":34,"b":43}]},{"name":"userLevel","required":true,"transform":{"type":"scalar"},"locs":[{"a":52,"b":62}]},{"name":"requestId","required":true,"transform":{"type":"scalar"},"locs":[{"a":71,"b":81}]},{"name":"method","required":true,"transform":{"type":"scalar"},"locs":[{"a":90,"b":97}]},{"name":"route","required":true,"transform":{"type":"scalar"},"locs":[{"a":106,"b":112}]},{"name":"action","required":true,"transform":{"type":"scalar"},"locs":[{"a":121,"b":128}]},{"name":"taskIds","required":false,"transform":{"type":"scalar"},"locs":[{"a":139,"b":146}]},{"name":"taskType","required":false,"transform":{"type":"scalar"},"locs":[{"a":159,"b":167}]},{"name":"scheduleName","required":false,"transform":{"type":"scalar"},"locs":[{"a":176,"b":188}]},{"name":"workerId","required":false,"transform":{"type":"scalar"},"locs":[{"a":197,"b":205}]},{"name":"input","required":false,"transform":{"type":"scalar"},"locs":[{"a":214,"b":219}]},{"name":"answer","required":true,"transform":{"type":"scalar"},"locs":[{"a":229,"b":236}]}],"statement":"select admin.record_api_change(\n  :userName!::text, :userLevel!::text, :requestId!::text, :method!::text, :route!::text, :action!::text,\n  :taskIds::bigint[], :taskType::text, :scheduleName::text, :workerId::text, :input::jsonb, :answer!::jsonb\n) as \"apiChangeId!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.record_api_change(
 *   :userName!::text, :userLevel!::text, :requestId!::text, :method!::text, :route!::text, :action!::text,
 *   :taskIds::bigint[], :taskType::text, :scheduleName::text, :workerId::text, :input::jsonb, :answer!::jsonb
 * ) as "apiChangeId!"
 * ```
 */
export const apiChangeRecord = new PreparedQuery<IApiChangeRecordParams,IApiChangeRecordResult>(apiChangeRecordIR);


/** 'ApiChangeList' parameters type */
export interface IApiChangeListParams {
  beforeId?: NumberOrString | null | void;
  limit?: number | null | void;
  taskId?: NumberOrString | null | void;
}

/** 'ApiChangeList' return type */
export interface IApiChangeListResult {
  action: string;
  answer: unknown;
  apiChangeId: string;
  changedAt: Date;
  input: unknown;
  method: string;
  requestId: string;
  route: string;
  scheduleName: string | null;
  taskIds: stringArray;
  taskType: string | null;
  userLevel: string;
  userName: string;
  workerId: string | null;
}

/** 'ApiChangeList' query type */
export interface IApiChangeListQuery {
  params: IApiChangeListParams;
  result: IApiChangeListResult;
}

const apiChangeListIR: any = {"usedParamSet":{"taskId":true,"limit":true,"beforeId":true},"params":[{"name":"taskId","required":false,"transform":{"type":"scalar"},"locs":[{"a":436,"b":442}]},{"name":"limit","required":false,"transform":{"type":"scalar"},"locs":[{"a":453,"b":458}]},{"name":"beforeId","required":false,"transform":{"type":"scalar"},"locs":[{"a":470,"b":478}]}],"statement":"select c.api_change_id as \"apiChangeId!\", c.changed_at as \"changedAt!\", c.user_name as \"userName!\",\n       c.user_level as \"userLevel!\", c.request_id as \"requestId!\", c.method as \"method!\", c.route as \"route!\",\n       c.action as \"action!\", c.task_ids as \"taskIds!\", c.task_type as \"taskType\", c.schedule_name as \"scheduleName\",\n       c.worker_id as \"workerId\", c.input as \"input!\", c.answer as \"answer!\"\n  from admin.list_api_changes(:taskId::bigint, :limit::integer, :beforeId::bigint) c"};

/**
 * Query generated from SQL:
 * ```
 * select c.api_change_id as "apiChangeId!", c.changed_at as "changedAt!", c.user_name as "userName!",
 *        c.user_level as "userLevel!", c.request_id as "requestId!", c.method as "method!", c.route as "route!",
 *        c.action as "action!", c.task_ids as "taskIds!", c.task_type as "taskType", c.schedule_name as "scheduleName",
 *        c.worker_id as "workerId", c.input as "input!", c.answer as "answer!"
 *   from admin.list_api_changes(:taskId::bigint, :limit::integer, :beforeId::bigint) c
 * ```
 */
export const apiChangeList = new PreparedQuery<IApiChangeListParams,IApiChangeListResult>(apiChangeListIR);


