-- Retention of the flow-control facts that are not history (docs/operations.md,
-- "Retention and partitions"). Per-task facts (progress reports, dependency edges) are
-- history tables and leave with their task's set; what is removed here are the facts kept
-- per key rather than per task. Owner only; run by every history maintenance run
-- (queues.maintain_history_step_at, when it has nothing else to change).
--
--   queues.throttle / queues.throttle_cleared  a throttle report ended longer ago than
--     the retention window (queues.history_setting.retention) is deleted, with the clears
--     that name it (on delete cascade), when
--       - a later report of its key exists (the key's latest report is kept, so the
--         operator still sees when the key was last throttled),
--       - every earlier report of its key ended before the window too (a clear covers the
--         reports up to the one it names: deleting it never brings back an earlier report
--         that is still in force),
--       - the task it names, if any, is gone from the history (internal.provider_call_start
--         reads the report of a lease while its task may still run).
--     A report in force (throttled_until after now) is never deleted.
--   queues.task_limit_window  a counter whose window started more than a day ago (a rate
--     limit's interval is at most a day, so that window is over; the next claim would
--     start a new one) is deleted: it only grows with the group keys that come and go.
--
-- Returns {"throttles": n, "throttle_clears": n, "limit_windows": n}: what it deleted.
-- (queues.history_set_has_waiting_dependents, below, is what history maintenance asks
-- before it drops a set.)
create or replace function queues.prune_flow_facts_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _cutoff timestamptz;
  _throttles bigint;
  _clears bigint;
  _windows bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _cutoff := _now - (select s.retention from queues.history_setting s);
  _cutoff := least(_cutoff, _now);
  with gone as (
    delete from queues.throttle t
     where t.throttled_until < _cutoff
       and exists (select 1 from queues.throttle l
                    where l.key_kind = t.key_kind and l.key = t.key and l.throttle_id > t.throttle_id)
       and not exists (select 1 from queues.throttle e
                        where e.key_kind = t.key_kind and e.key = t.key and e.throttle_id < t.throttle_id
                          and e.throttled_until >= _cutoff)
       and (t.task_id is null or not exists (select 1 from queues.task x where x.task_id = t.task_id))
    returning t.throttle_id
  )
  select count(*), (select count(*) from queues.throttle_cleared c where c.last_throttle_id in (select g.throttle_id from gone g))
    into _throttles, _clears
    from gone;
  delete from queues.task_limit_window w
   where w.window_start < _now - interval '1 day';
  get diagnostics _windows = row_count;
  return jsonb_build_object('throttles', _throttles, 'throttle_clears', _clears, 'limit_windows', _windows);
end;
$$;

-- Whether an unfinished task of a newer set depends on a task of the set [_lower, _upper):
-- the set is then kept, however old, since the dependent reads its dependencies and their
-- results when it runs (queues.list_task_dependencies). Unfinished: a claim-index row, or
-- no row and no end (a task its claim lease holds: the ready set, docs/design/hot-path.md).
-- Its edges live in its own set, so they are kept with it. Reads the dependency index of
-- the newer sets' partitions, and each dependent's end only when it has no row. Owner only.
create or replace function queues.history_set_has_waiting_dependents(_lower bigint, _upper bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from queues.task_dependency d
                  where d.depends_on_task_id >= _lower and d.depends_on_task_id < _upper
                    and d.task_id >= _upper
                    and (exists (select 1 from queues.task_pending p where p.task_id = d.task_id)
                         or not exists (select 1 from queues.task_end_of(d.task_id) e)))
$$;

revoke execute on function queues.prune_flow_facts_at(timestamptz),
  queues.history_set_has_waiting_dependents(bigint, bigint) from public;
