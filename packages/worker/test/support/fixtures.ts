// Fixture SQL for worker tests: runnable functions with observable effects, and extra
// task types for test processors.
import type { TestDatabase } from '@org/testing';

/** The advisory lock fixture.step holds while it sleeps (see `stepsRunning`). */
export const STEP_RUNNING_LOCK = { classid: 7391, objid: 1 } as const;

/** How many fixture.step calls are sleeping now, in any role's session. */
export async function stepsRunning(db: TestDatabase): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `select count(*)::int as n from pg_locks
      where locktype = 'advisory' and classid = $1 and objid = $2 and objsubid = 2 and granted`,
    [STEP_RUNNING_LOCK.classid, STEP_RUNNING_LOCK.objid],
  );
  return rows[0].n;
}

export async function installFixtures(db: TestDatabase): Promise<void> {
  const worker = db.dbUsers.worker;
  await db.query(`
    create schema fixture;
    create table fixture.effect (task_key text not null, created_at timestamptz not null default now());
    create table fixture.handler_call (kind text not null, body jsonb not null);

    -- A step with an effect, returning whatever envelope the payload asks for. While it
    -- sleeps, it holds a shared advisory lock (STEP_RUNNING_LOCK): pg_locks shows it to every
    -- role, where pg_stat_activity hides another role's query.
    create function fixture.step(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      insert into fixture.effect (task_key) values (coalesce(payload->>'key', 'none'));
      if payload->>'sleep' is not null then
        perform pg_advisory_xact_lock_shared(${STEP_RUNNING_LOCK.classid}, ${STEP_RUNNING_LOCK.objid});
        perform pg_sleep((payload->>'sleep')::float);
      end if;
      if payload ? 'raise' then raise exception 'step failed: %', payload->>'raise'; end if;
      return case when payload ? 'result' then payload->'result' else '{"success": true}'::jsonb end;
    end $$;

    -- A step done in short transactions ("repeat"): one effect per call, keyed by its
    -- transaction id; says "more" until payload.times calls were made.
    create function fixture.repeat(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    declare
      _calls integer;
    begin
      insert into fixture.effect (task_key) values ((payload->>'key') || '#' || pg_current_xact_id()::text);
      select count(*) into _calls from fixture.effect where task_key like (payload->>'key') || '#%';
      if payload ? 'fail_at' and _calls = (payload->>'fail_at')::int then
        return jsonb_build_object('success', false, 'error', 'gave up at call ' || _calls);
      end if;
      return jsonb_build_object('success', true, 'payload', jsonb_build_object('call', _calls, 'more', _calls < (payload->>'times')::int));
    end $$;

    -- A function returning SQL NULL.
    create function fixture.nothing(payload jsonb) returns jsonb
      language sql security definer set search_path = pg_catalog, pg_temp as $$ select null::jsonb $$;

    -- Handlers: the before handler returns what the payload carries in "before".
    create function fixture.before(payload jsonb) returns jsonb
      language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
    begin
      if payload ? 'before_raise' then raise exception 'before failed'; end if;
      return payload->'before';
    end $$;
    create function fixture.on_success(payload jsonb) returns jsonb
      language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
    begin
      insert into fixture.handler_call values ('success', payload);
      if payload->'original_payload' ? 'success_raise' then raise exception 'success handler failed'; end if;
      return coalesce(payload->'original_payload'->'success_result', '{"success": true}'::jsonb);
    end $$;
    create function fixture.on_error(payload jsonb) returns jsonb
      language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
    begin
      insert into fixture.handler_call values ('error', payload);
      if payload->'original_payload' ? 'error_raise' then raise exception 'error handler failed'; end if;
      return '{"success": true}'::jsonb;
    end $$;

    revoke execute on all functions in schema fixture from public;
    grant usage on schema fixture to ${worker};
    grant execute on all functions in schema fixture to ${worker};
    select internal.register_runnable_function(f::regprocedure)
      from unnest(array['fixture.step(jsonb)', 'fixture.repeat(jsonb)', 'fixture.nothing(jsonb)', 'fixture.before(jsonb)',
                        'fixture.on_success(jsonb)', 'fixture.on_error(jsonb)']) f;
    insert into queues.task_type (task_type, description) values
      ('test_channel', 'worker tests: a channel task with a test provider'),
      ('slow', 'worker tests: waits'), ('crash', 'worker tests: kills its worker'),
      ('hang', 'worker tests: blocks its worker');
  `);
}

/**
 * Internal task types (queues.internal_task_type) are enqueued by the owner, as its SQL would; others by the app.
 * One attempt (not the queue's default of 25): these tests read the outcome of one run. The default's
 * retries are tested in sql/queues/retry.test.ts.
 */
export async function enqueue(db: TestDatabase, taskType: string, payload: unknown, maxAttempts = 1): Promise<string> {
  const dbUser = ['db_function', 'email', 'sms', 'file_delete'].includes(taskType) ? 'owner' : 'app';
  const { rows } = await db
    .pool(dbUser)
    .query('select queues.enqueue($1, $2::jsonb, _max_attempts => $3) as id', [
      taskType,
      JSON.stringify(payload),
      maxAttempts,
    ]);
  return rows[0].id;
}

export interface TaskFacts {
  outcome: string | null;
  errors: string[];
  leases: number;
}

export async function factsOf(db: TestDatabase, taskId: string): Promise<TaskFacts> {
  const { rows } = await db.query<TaskFacts>(
    `select (select outcome from queues.task_end where task_id = $1) as outcome,
            coalesce((select array_agg(error_message order by error_id) from queues.error where task_id = $1), '{}') as errors,
            (select count(*)::int from queues.task_leases where task_id = $1) as leases`,
    [taskId],
  );
  return rows[0];
}

export async function effects(db: TestDatabase, key: string): Promise<number> {
  return (await db.query('select count(*)::int as n from fixture.effect where task_key = $1', [key])).rows[0].n;
}

export async function handlerCalls(db: TestDatabase): Promise<{ kind: string; body: Record<string, unknown> }[]> {
  const { rows } = await db.query<{ kind: string; body: Record<string, unknown> }>(
    'select kind, body from fixture.handler_call order by ctid',
  );
  await db.query('truncate fixture.handler_call');
  return rows;
}

/** Resolves when `check` returns true; fails after `timeoutMs` with `what`. */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const start = Date.now();
  for (;;) {
    if (await check()) return;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
