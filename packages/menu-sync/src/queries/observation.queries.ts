/** Types generated for queries found in "src/queries/observation.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

export type NumberOrString = number | string;

/** 'ObservationRecord' parameters type */
export interface IObservationRecordParams {
  observation: unknown;
  taskId: NumberOrString;
  taskLeaseId: NumberOrString;
}

/** 'ObservationRecord' return type */
export interface IObservationRecordResult {
  result: unknown;
}

/** 'ObservationRecord' query type */
export interface IObservationRecordQuery {
  params: IObservationRecordParams;
  result: IObservationRecordResult;
}

const observationRecordIR: any = {"usedParamSet":{"taskId":true,"taskLeaseId":true,"observation":true},"params":[{"name":"taskId","required":true,"transform":{"type":"scalar"},"locs":[{"a":32,"b":39}]},{"name":"taskLeaseId","required":true,"transform":{"type":"scalar"},"locs":[{"a":50,"b":62}]},{"name":"observation","required":true,"transform":{"type":"scalar"},"locs":[{"a":73,"b":85}]}],"statement":"select menus.record_observation(:taskId!::bigint, :taskLeaseId!::bigint, :observation!::jsonb) as \"result!\""};

/**
 * Query generated from SQL:
 * ```
 * select menus.record_observation(:taskId!::bigint, :taskLeaseId!::bigint, :observation!::jsonb) as "result!"
 * ```
 */
export const observationRecord = new PreparedQuery<IObservationRecordParams,IObservationRecordResult>(observationRecordIR);


