/** Types generated for queries found in "src/queries/capacity.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

/** 'CapacityList' parameters type */
export interface ICapacityListParams {
  taskType?: string | null | void;
}

/** 'CapacityList' return type */
export interface ICapacityListResult {
  activeWorkers: string;
  completedInWindow: string;
  estimatedHoursToDrain: number | null;
  pending: string;
  ready: string;
  running: string;
  tasksPerWorkerHour: number | null;
  taskType: string;
  windowSeconds: number;
  windowWorkers: string;
  workersNeeded1h: string | null;
  workersNeeded4h: string | null;
  workersNeeded8h: string | null;
}

/** 'CapacityList' query type */
export interface ICapacityListQuery {
  params: ICapacityListParams;
  result: ICapacityListResult;
}

const capacityListIR: any = {"usedParamSet":{"taskType":true},"params":[{"name":"taskType","required":false,"transform":{"type":"scalar"},"locs":[{"a":729,"b":737}]}],"statement":"select c.task_type                as \"taskType!\",\n       c.pending                  as \"pending!\",\n       c.ready                    as \"ready!\",\n       c.running                  as \"running!\",\n       c.active_workers           as \"activeWorkers!\",\n       c.completed_in_window      as \"completedInWindow!\",\n       c.window_workers           as \"windowWorkers!\",\n       c.window_seconds           as \"windowSeconds!\",\n       c.tasks_per_worker_hour    as \"tasksPerWorkerHour\",\n       c.estimated_hours_to_drain as \"estimatedHoursToDrain\",\n       c.workers_needed_1h        as \"workersNeeded1h\",\n       c.workers_needed_4h        as \"workersNeeded4h\",\n       c.workers_needed_8h        as \"workersNeeded8h\"\n  from admin.capacity(:taskType::text) c"};

/**
 * Query generated from SQL:
 * ```
 * select c.task_type                as "taskType!",
 *        c.pending                  as "pending!",
 *        c.ready                    as "ready!",
 *        c.running                  as "running!",
 *        c.active_workers           as "activeWorkers!",
 *        c.completed_in_window      as "completedInWindow!",
 *        c.window_workers           as "windowWorkers!",
 *        c.window_seconds           as "windowSeconds!",
 *        c.tasks_per_worker_hour    as "tasksPerWorkerHour",
 *        c.estimated_hours_to_drain as "estimatedHoursToDrain",
 *        c.workers_needed_1h        as "workersNeeded1h",
 *        c.workers_needed_4h        as "workersNeeded4h",
 *        c.workers_needed_8h        as "workersNeeded8h"
 *   from admin.capacity(:taskType::text) c
 * ```
 */
export const capacityList = new PreparedQuery<ICapacityListParams,ICapacityListResult>(capacityListIR);


