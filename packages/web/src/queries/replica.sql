/* @name ReplicaLag */
-- How far the database the API reads lags its primary, in seconds: null on a primary, 0 on
-- a standby that has replayed all it received, else the age of the last transaction it
-- replayed.
select case
         when not pg_is_in_recovery() then null
         when pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() then 0::float8
         else extract(epoch from clock_timestamp() - pg_last_xact_replay_timestamp())::float8
       end as "lagSeconds";
