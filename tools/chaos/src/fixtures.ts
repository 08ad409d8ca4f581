/**
 * The chaos fixtures (as the owner): a runnable step with an observable effect, bad
 * envelopes and handlers for the bad-input corpus, and the extra task types of the chaos
 * worker entry (slow, crash, oom). Supervisor backoffs are scaled down (5 s -> 10 ms).
 * The `chaos` schema is left out of the privilege sweep (scenario 8).
 */
import type { ChaosDb } from './harness.js';

export async function installFixtures(db: ChaosDb): Promise<void> {
  const exists = await db.query(`select 1 from pg_namespace where nspname = 'chaos'`);
  if (exists.rowCount) return;
  const worker = db.dbUsers.worker;
  await db.query(`
    create schema chaos;
    create table chaos.effect (task_key text not null, created_at timestamptz not null default now());
    create index on chaos.effect (task_key);
    create table chaos.record (task_key text not null, created_at timestamptz not null default now());
    create table chaos.handler_call (kind text not null, body jsonb not null);
    create table chaos.gate (key text primary key);

    -- A step: one effect row per run that commits; sleeps payload.sleep seconds; waits
    -- (at most 30 s) until chaos.gate holds payload.gate when given; returns payload.result
    -- when given (bad envelopes), else success.
    create function chaos.step(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    declare
      _until timestamptz := clock_timestamp() + interval '30 seconds';
    begin
      insert into chaos.effect (task_key) values (coalesce(payload->>'key', 'none'));
      if payload->>'sleep' is not null then perform pg_sleep((payload->>'sleep')::float); end if;
      while payload ? 'gate' and clock_timestamp() < _until
            and not exists (select 1 from chaos.gate g where g.key = payload->>'gate') loop
        perform pg_sleep(0.05);
      end loop;
      return case when payload ? 'result' then payload->'result' else '{"success": true}'::jsonb end;
    end $$;
    -- Returns SQL NULL.
    create function chaos.nothing(payload jsonb) returns jsonb
      language sql security definer set search_path = pg_catalog, pg_temp as $$ select null::jsonb $$;
    -- A business fact recorded by the chaos entry's slow processor with its completion.
    create function chaos.record(payload jsonb) returns jsonb
      language sql volatile security definer set search_path = pg_catalog, pg_temp as $$
      insert into chaos.record (task_key) values (coalesce(payload->>'key', 'none'));
      select '{"success": true}'::jsonb $$;
    -- Handlers: before returns payload.before as the provider payload.
    create function chaos.before(payload jsonb) returns jsonb
      language sql security definer set search_path = pg_catalog, pg_temp as $$
      select case when payload ? 'before_envelope' then payload->'before_envelope'
                  else jsonb_build_object('success', true, 'payload', payload->'before') end $$;
    create function chaos.on_success(payload jsonb) returns jsonb
      language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
    begin
      insert into chaos.handler_call values ('success', payload);
      return coalesce(payload->'original_payload'->'success_result', '{"success": true}'::jsonb);
    end $$;
    create function chaos.on_error(payload jsonb) returns jsonb
      language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
    begin
      insert into chaos.handler_call values ('error', payload);
      return coalesce(payload->'original_payload'->'error_result', '{"success": true}'::jsonb);
    end $$;

    -- Task code raising the SQLSTATE and message of payload.code / payload.message (or, as
    -- a success handler, of its original payload's): 55000, 40P01, anything.
    create function chaos.raise(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    declare
      _p jsonb := case when payload ? 'original_payload' then payload->'original_payload' else payload end;
    begin
      raise exception '%', coalesce(_p->>'message', 'raised') using errcode = coalesce(_p->>'code', 'P0001');
    end $$;

    revoke execute on all functions in schema chaos from public;
    grant usage on schema chaos to ${worker};
    grant execute on all functions in schema chaos to ${worker};
    select internal.register_runnable_function(f::regprocedure)
      from unnest(array['chaos.step(jsonb)', 'chaos.nothing(jsonb)', 'chaos.record(jsonb)', 'chaos.before(jsonb)',
                        'chaos.on_success(jsonb)', 'chaos.on_error(jsonb)', 'chaos.raise(jsonb)']) f;
    insert into queues.task_type (task_type, description) values
      ('slow', 'chaos: waits payload.ms, then completes (or fails, or records a fact)'),
      ('crash', 'chaos: kills its worker with SIGKILL'),
      ('oom', 'chaos: exhausts its worker''s heap')
    on conflict do nothing;
    insert into internal.setting (name, value) values ('backoff_scale', '0.002')
      on conflict (name) do update set value = excluded.value;
  `);
}
