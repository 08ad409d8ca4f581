/** Types generated for queries found in "src/queries/menus.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type DateOrString = Date | string;

/** 'MenusResyncGenerate' parameters type */
export interface IMenusResyncGenerateParams {
  batches: number;
  date: DateOrString;
}

/** 'MenusResyncGenerate' return type */
export interface IMenusResyncGenerateResult {
  batch: number;
  scheduledAt: Date;
  taskCount: number;
}

/** 'MenusResyncGenerate' query type */
export interface IMenusResyncGenerateQuery {
  params: IMenusResyncGenerateParams;
  result: IMenusResyncGenerateResult;
}

const menusResyncGenerateIR: any = {"usedParamSet":{"batches":true,"date":true},"params":[{"name":"batches","required":true,"transform":{"type":"scalar"},"locs":[{"a":126,"b":134}]},{"name":"date","required":true,"transform":{"type":"scalar"},"locs":[{"a":146,"b":151}]}],"statement":"select b.batch as \"batch!\", b.scheduled_at as \"scheduledAt!\", b.task_count as \"taskCount!\"\n  from menus.generate_resync_tasks(:batches!::integer, :date!::date) b"};

/**
 * Query generated from SQL:
 * ```
 * select b.batch as "batch!", b.scheduled_at as "scheduledAt!", b.task_count as "taskCount!"
 *   from menus.generate_resync_tasks(:batches!::integer, :date!::date) b
 * ```
 */
export const menusResyncGenerate = new PreparedQuery<IMenusResyncGenerateParams,IMenusResyncGenerateResult>(menusResyncGenerateIR);


/** 'MenusStoreDiscoveryGenerate' parameters type */
export interface IMenusStoreDiscoveryGenerateParams {
  scheduledAt?: DateOrString | null | void;
}

/** 'MenusStoreDiscoveryGenerate' return type */
export interface IMenusStoreDiscoveryGenerateResult {
  taskId: string;
}

/** 'MenusStoreDiscoveryGenerate' query type */
export interface IMenusStoreDiscoveryGenerateQuery {
  params: IMenusStoreDiscoveryGenerateParams;
  result: IMenusStoreDiscoveryGenerateResult;
}

const menusStoreDiscoveryGenerateIR: any = {"usedParamSet":{"scheduledAt":true},"params":[{"name":"scheduledAt","required":false,"transform":{"type":"scalar"},"locs":[{"a":38,"b":49}]}],"statement":"select menus.generate_store_discovery(:scheduledAt::timestamptz) as \"taskId!\""};

/**
 * Query generated from SQL:
 * ```
 * select menus.generate_store_discovery(:scheduledAt::timestamptz) as "taskId!"
 * ```
 */
export const menusStoreDiscoveryGenerate = new PreparedQuery<IMenusStoreDiscoveryGenerateParams,IMenusStoreDiscoveryGenerateResult>(menusStoreDiscoveryGenerateIR);


