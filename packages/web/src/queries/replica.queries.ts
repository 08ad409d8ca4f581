/** Types generated for queries found in "src/queries/replica.sql" */
import { PreparedQuery } from '@pgtyped/runtime';

/** 'ReplicaLag' parameters type */
export type IReplicaLagParams = void;

/** 'ReplicaLag' return type */
export interface IReplicaLagResult {
  lagSeconds: number | null;
}

/** 'ReplicaLag' query type */
export interface IReplicaLagQuery {
  params: IReplicaLagParams;
  result: IReplicaLagResult;
}

const replicaLagIR: any = {"usedParamSet":{},"params":[],"statement":"-- How far the database the API reads lags its primary, in seconds: null on a primary, 0 on\n-- a standby that has replayed all it received, else the age of the last transaction it\n-- replayed.\nselect case\n         when not pg_is_in_recovery() then null\n         when pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() then 0::float8\n         else extract(epoch from clock_timestamp() - pg_last_xact_replay_timestamp())::float8\n       end as \"lagSeconds\""};

/**
 * Query generated from SQL:
 * ```
 * -- How far the database the API reads lags its primary, in seconds: null on a primary, 0 on
 * -- a standby that has replayed all it received, else the age of the last transaction it
 * -- replayed.
 * select case
 *          when not pg_is_in_recovery() then null
 *          when pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() then 0::float8
 *          else extract(epoch from clock_timestamp() - pg_last_xact_replay_timestamp())::float8
 *        end as "lagSeconds"
 * ```
 */
export const replicaLag = new PreparedQuery<IReplicaLagParams,IReplicaLagResult>(replicaLagIR);


