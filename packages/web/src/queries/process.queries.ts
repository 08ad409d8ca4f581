/** Types generated for queries found in "src/queries/process.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

/** 'ProcessTimeline' parameters type */
export interface IProcessTimelineParams {
  process: string;
  rootId: NumberOrString;
}

/** 'ProcessTimeline' return type */
export interface IProcessTimelineResult {
  at: Date;
  attemptId: string | null;
  detail: unknown;
  fact: string;
  process: string;
  rootId: string;
}

/** 'ProcessTimeline' query type */
export interface IProcessTimelineQuery {
  params: IProcessTimelineParams;
  result: IProcessTimelineResult;
}

const processTimelineIR: any = {"usedParamSet":{"process":true,"rootId":true},"params":[{"name":"process","required":true,"transform":{"type":"scalar"},"locs":[{"a":178,"b":186}]},{"name":"rootId","required":true,"transform":{"type":"scalar"},"locs":[{"a":195,"b":202}]}],"statement":"select f.at as \"at!\", f.process as \"process!\", f.root_id as \"rootId!\", f.fact as \"fact!\",\n       f.attempt_id as \"attemptId\", f.detail as \"detail!\"\n  from admin.process_timeline(:process!::text, :rootId!::bigint) f"};

/**
 * Query generated from SQL:
 * ```
 * select f.at as "at!", f.process as "process!", f.root_id as "rootId!", f.fact as "fact!",
 *        f.attempt_id as "attemptId", f.detail as "detail!"
 *   from admin.process_timeline(:process!::text, :rootId!::bigint) f
 * ```
 */
export const processTimeline = new PreparedQuery<IProcessTimelineParams,IProcessTimelineResult>(processTimelineIR);


/** 'ProcessList' parameters type */
export type IProcessListParams = void;

/** 'ProcessList' return type */
export interface IProcessListResult {
  process: string;
}

/** 'ProcessList' query type */
export interface IProcessListQuery {
  params: IProcessListParams;
  result: IProcessListResult;
}

const processListIR: any = {"usedParamSet":{},"params":[],"statement":"select p.process as \"process!\" from admin.list_processes() p"};

/**
 * Query generated from SQL:
 * ```
 * select p.process as "process!" from admin.list_processes() p
 * ```
 */
export const processList = new PreparedQuery<IProcessListParams,IProcessListResult>(processListIR);


/** 'ProcessTree' parameters type */
export interface IProcessTreeParams {
  process: string;
  rootId: NumberOrString;
}

/** 'ProcessTree' return type */
export interface IProcessTreeResult {
  tree: unknown;
}

/** 'ProcessTree' query type */
export interface IProcessTreeQuery {
  params: IProcessTreeParams;
  result: IProcessTreeResult;
}

const processTreeIR: any = {"usedParamSet":{"process":true,"rootId":true},"params":[{"name":"process","required":true,"transform":{"type":"scalar"},"locs":[{"a":26,"b":34}]},{"name":"rootId","required":true,"transform":{"type":"scalar"},"locs":[{"a":43,"b":50}]}],"statement":"select admin.process_tree(:process!::text, :rootId!::bigint) as \"tree!\""};

/**
 * Query generated from SQL:
 * ```
 * select admin.process_tree(:process!::text, :rootId!::bigint) as "tree!"
 * ```
 */
export const processTree = new PreparedQuery<IProcessTreeParams,IProcessTreeResult>(processTreeIR);


/** 'ProcessRootRankedList' parameters type */
export interface IProcessRootRankedListParams {
  beforeRootId?: NumberOrString | null | void;
  limit?: number | null | void;
  process: string;
}

/** 'ProcessRootRankedList' return type */
export interface IProcessRootRankedListResult {
  attempts: string;
  createdAt: Date;
  lastFactAt: Date;
  rootId: string;
  status: string;
  stuckDescendants: number;
  subject: unknown;
}

/** 'ProcessRootRankedList' query type */
export interface IProcessRootRankedListQuery {
  params: IProcessRootRankedListParams;
  result: IProcessRootRankedListResult;
}

const processRootRankedListIR: any = {"usedParamSet":{"process":true,"limit":true,"beforeRootId":true},"params":[{"name":"process","required":true,"transform":{"type":"scalar"},"locs":[{"a":258,"b":266}]},{"name":"limit","required":false,"transform":{"type":"scalar"},"locs":[{"a":275,"b":280}]},{"name":"beforeRootId","required":false,"transform":{"type":"scalar"},"locs":[{"a":292,"b":304}]}],"statement":"select r.root_id as \"rootId!\", r.created_at as \"createdAt!\", r.status as \"status!\", r.subject as \"subject!\",\n       r.attempts as \"attempts!\", r.stuck_descendants as \"stuckDescendants!\", r.last_fact_at as \"lastFactAt!\"\n  from admin.list_process_roots_ranked(:process!::text, :limit::integer, :beforeRootId::bigint) r"};

/**
 * Query generated from SQL:
 * ```
 * select r.root_id as "rootId!", r.created_at as "createdAt!", r.status as "status!", r.subject as "subject!",
 *        r.attempts as "attempts!", r.stuck_descendants as "stuckDescendants!", r.last_fact_at as "lastFactAt!"
 *   from admin.list_process_roots_ranked(:process!::text, :limit::integer, :beforeRootId::bigint) r
 * ```
 */
export const processRootRankedList = new PreparedQuery<IProcessRootRankedListParams,IProcessRootRankedListResult>(processRootRankedListIR);


