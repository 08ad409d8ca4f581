// queues.settle_with_handler: a completion and its success or error handler in one
// statement, against a real PostgreSQL: the handler's envelope decides what is recorded,
// a raise rolls the handler's writes back, a lost lease commits nothing, and bad
// arguments are refused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  const worker = db.dbUsers.worker;
  await db.query(`
    insert into queues.task_type (task_type) values ('swh') on conflict do nothing;
    create schema fixture_swh;
    create table fixture_swh.call (task_key text not null, handler text not null);
    -- Records its call, then answers the envelope the body's "answer" names (or raises).
    create function fixture_swh.handler(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      insert into fixture_swh.call values (payload->'original_payload'->>'key', payload->>'answer');
      case payload->>'answer'
        when 'raise' then raise exception 'handler broke';
        when 'conflict' then raise exception 'could not serialize access' using errcode = '40001';
        when 'error' then return '{"success": false, "error": "mailbox full"}';
        when 'invalid' then return '{"success": false, "validation_failure_message": "bad address"}';
        when 'status' then return '{"status": "bounced"}';
        when 'malformed' then return '[1]';
        else return '{"success": true}';
      end case;
    end $$;
    revoke execute on all functions in schema fixture_swh from public;
    grant usage on schema fixture_swh to ${worker};
    grant execute on all functions in schema fixture_swh to ${worker};
    select internal.register_runnable_function('fixture_swh.handler(jsonb)');
  `);
});
afterAll(async () => {
  await db?.drop();
});

/** A task of type swh, enqueued by the owner and claimed by the worker: its lease. */
async function claimed(key: string, maxAttempts = 1): Promise<{ taskId: string; leaseId: string }> {
  const { rows } = await db
    .pool('owner')
    .query(`select queues.enqueue('swh', $1::jsonb, null, null, null, $2) as id`, [
      JSON.stringify({ key }),
      maxAttempts,
    ]);
  const { rows: leases } = await db
    .pool('worker')
    .query(`select task_id, task_lease_id from queues.claim_tasks('w-swh', 10, '{swh}', 60, 5) where task_id = $1`, [
      rows[0].id,
    ]);
  return { taskId: String(rows[0].id), leaseId: String(leases[0].task_lease_id) };
}

type Mode = 'success' | 'error';

async function settle(
  t: { taskId: string; leaseId: string },
  mode: Mode,
  answer: string,
  options: { errors?: string[]; retry?: boolean | null; key?: string } = {},
) {
  const outcome = mode === 'success' ? 'succeeded' : 'failed';
  // The run's start (a second before, whole milliseconds) is kept with whatever it records.
  const startedAt = new Date(Math.floor(Date.now() / 1000) * 1000 - 1000);
  const { rows } = await db.pool('worker').query(
    `select result, outcome, errors
         from queues.settle_with_handler($1, $2, $3, $4::text[], $5, 'fixture_swh.handler', $6::jsonb, $7, $8, $9)`,
    [
      t.taskId,
      t.leaseId,
      outcome,
      options.errors ?? (mode === 'error' ? ['provider said no'] : []),
      options.retry ?? null,
      JSON.stringify({ original_payload: { key: options.key ?? t.taskId }, answer }),
      mode,
      mode === 'success' ? 'fake succeeded but fixture_swh.handler raised: ' : 'fixture_swh.handler raised: ',
      startedAt,
    ],
  );
  const settled = rows[0] as { result: string; outcome: string; errors: string[] };
  if (settled.result === 'completed' || settled.result === 'retry_scheduled') {
    const { rows: ends } = await db.query(
      `select started_at from queues.task_end where task_id = $1 and task_lease_id = $2
       union all
       select started_at from queues.task_attempt_failed where task_id = $1 and task_lease_id = $2`,
      [t.taskId, t.leaseId],
    );
    expect(ends).toEqual([{ started_at: startedAt }]);
  }
  return settled;
}

/** What the database holds for the task: its completion, its error rows, the handler's writes. */
async function facts(taskId: string) {
  const { rows: completed } = await db.query('select outcome from queues.task_end where task_id = $1', [taskId]);
  const { rows: errors } = await db.query(
    'select error_message as message from queues.error where task_id = $1 order by error_id',
    [taskId],
  );
  const { rows: calls } = await db.query('select handler from fixture_swh.call where task_key = $1', [taskId]);
  // Unfinished: no end (with or without a claim-index row: the ready set).
  const { rows: pending } = await db.query(
    'select 1 from queues.task t where t.task_id = $1 and not exists (select 1 from queues.task_end_of(t.task_id) e)',
    [taskId],
  );
  return {
    outcome: (completed[0]?.outcome as string | undefined) ?? null,
    errors: errors.map((e) => e.message as string),
    calls: calls.map((c) => c.handler as string),
    pending: pending.length === 1,
  };
}

describe('queues.settle_with_handler', () => {
  it('success: the handler and the completion commit together', async () => {
    const t = await claimed('ok');
    expect(await settle(t, 'success', 'ok')).toEqual({ result: 'completed', outcome: 'succeeded', errors: [] });
    expect(await facts(t.taskId)).toEqual({ outcome: 'succeeded', errors: [], calls: ['ok'], pending: false });
  });

  it.each([
    ['error', 'fixture_swh.handler: mailbox full'],
    ['invalid', 'fixture_swh.handler: validation failure: bad address'],
    ['status', 'fixture_swh.handler: status bounced'],
    ['malformed', 'fixture_swh.handler: malformed result envelope: expected an object, got an array'],
  ])('success: a handler answering %s fails the task with its failure, its writes kept', async (answer, error) => {
    const t = await claimed(answer);
    expect(await settle(t, 'success', answer)).toEqual({ result: 'completed', outcome: 'failed', errors: [error] });
    expect(await facts(t.taskId)).toEqual({ outcome: 'failed', errors: [error], calls: [answer], pending: false });
  });

  it('success: a handler that raises fails the task, its writes rolled back', async () => {
    const t = await claimed('raise');
    const error = 'fake succeeded but fixture_swh.handler raised: handler broke';
    expect(await settle(t, 'success', 'raise')).toEqual({ result: 'completed', outcome: 'failed', errors: [error] });
    expect(await facts(t.taskId)).toEqual({ outcome: 'failed', errors: [error], calls: [], pending: false });
  });

  it('error: the handler runs with the failed completion; its failure or raise is one more error row', async () => {
    const t = await claimed('error-ok');
    expect(await settle(t, 'error', 'ok')).toEqual({
      result: 'completed',
      outcome: 'failed',
      errors: ['provider said no'],
    });
    expect(await facts(t.taskId)).toMatchObject({ outcome: 'failed', errors: ['provider said no'], calls: ['ok'] });

    const bad = await claimed('error-error');
    expect((await settle(bad, 'error', 'error')).errors).toEqual([
      'provider said no',
      'fixture_swh.handler: mailbox full',
    ]);
    expect(await facts(bad.taskId)).toMatchObject({
      errors: ['provider said no', 'fixture_swh.handler: mailbox full'],
      calls: ['error'],
    });

    const raised = await claimed('error-raise');
    expect((await settle(raised, 'error', 'raise')).errors).toEqual([
      'provider said no',
      'fixture_swh.handler raised: handler broke',
    ]);
    expect(await facts(raised.taskId)).toMatchObject({ outcome: 'failed', calls: [] });
  });

  it('error: with attempts left the failure schedules a retry, unless retry is false', async () => {
    const t = await claimed('retry', 3);
    expect(await settle(t, 'error', 'ok')).toMatchObject({ result: 'retry_scheduled', outcome: 'failed' });
    expect(await facts(t.taskId)).toMatchObject({ outcome: null, pending: true, calls: ['ok'] });
    const final = await claimed('final', 3);
    expect(await settle(final, 'error', 'ok', { retry: false })).toMatchObject({ result: 'completed' });
    expect(await facts(final.taskId)).toMatchObject({ outcome: 'failed', pending: false });
  });

  it('a lost lease commits nothing: not the handler, not the completion', async () => {
    const t = await claimed('lost');
    // The lease expires and another worker takes the task over.
    await db.query(`select queues.claim_tasks_at(now() + interval '10 minutes', 'w-other', 10, '{swh}', 60, 5)`);
    expect(await settle(t, 'success', 'ok')).toMatchObject({ result: 'lease_lost' });
    expect(await facts(t.taskId)).toEqual({ outcome: null, errors: [], calls: [], pending: true });
    // A completed task: already_completed, nothing written either.
    const done = await claimed('done');
    await settle(done, 'success', 'ok');
    expect(await settle(done, 'error', 'ok')).toMatchObject({ result: 'already_completed' });
    expect((await facts(done.taskId)).calls).toEqual(['ok']);
  });

  it('a serialization failure in the handler is raised: nothing recorded, the task runs again', async () => {
    const t = await claimed('conflict');
    await expect(settle(t, 'success', 'conflict')).rejects.toMatchObject({ code: '40001' });
    expect(await facts(t.taskId)).toEqual({ outcome: null, errors: [], calls: [], pending: true });
  });

  it('refuses bad arguments, and other roles', async () => {
    const t = await claimed('bad');
    const call = (args: unknown[]) =>
      db
        .pool('worker')
        .query(
          'select * from queues.settle_with_handler($1, $2, $3, $4::text[], null, $5, $6::jsonb, $7, $8, null)',
          args,
        );
    const body = JSON.stringify({ original_payload: { key: 'bad' }, answer: 'ok' });
    await expect(
      call([t.taskId, t.leaseId, 'succeeded', [], 'fixture_swh.handler', body, 'later', 'x']),
    ).rejects.toMatchObject({ code: '22023' });
    await expect(
      call([t.taskId, t.leaseId, 'failed', [], 'fixture_swh.handler', body, 'success', 'x']),
    ).rejects.toMatchObject({ code: '22023' });
    await expect(
      call([t.taskId, null, 'succeeded', [], 'fixture_swh.handler', body, 'success', 'x']),
    ).rejects.toMatchObject({ code: '22004' });
    await expect(
      call([t.taskId, t.leaseId, 'failed', [' '], 'fixture_swh.handler', body, 'error', 'x']),
    ).rejects.toMatchObject({ code: '22004' });
    // A function that is not runnable is a handler that raises: recorded, nothing run.
    expect(
      (await call([t.taskId, t.leaseId, 'succeeded', [], 'queues.enqueue', body, 'success', 'p: '])).rows[0],
    ).toMatchObject({ result: 'completed', outcome: 'failed' });
    expect(await facts(t.taskId)).toMatchObject({ outcome: 'failed', calls: [] });
    for (const role of ['app', 'api'] as const)
      await expect(
        db
          .pool(role)
          .query(
            `select queues.settle_with_handler(1, 1, 'succeeded', '{}', null, 'fixture_swh.handler', '{}', 'success', '', null)`,
          ),
      ).rejects.toMatchObject({ code: '42501' });
  });
});

describe('queues.settle_with_handlers', () => {
  interface Entry {
    t: { taskId: string; leaseId: string };
    mode: Mode;
    answer: string;
    errors?: string[];
    handler?: string;
  }

  /** The completions of `entries` with their handlers in one call, as the worker's completer sends them. */
  async function settleMany(entries: Entry[]) {
    const errors = entries.flatMap((e) =>
      (e.errors ?? (e.mode === 'error' ? ['provider said no'] : [])).map((m) => ({ id: e.t.taskId, m })),
    );
    const { rows } = await db.pool('worker').query(
      `select task_id::text, result, outcome, errors
         from queues.settle_with_handlers($1::bigint[], $2::bigint[], $3::text[], null, $4::bigint[], $5::text[],
                                          $6::text[], $7::jsonb[], $8::text[], $9::text[], $10::bigint[])`,
      [
        entries.map((e) => e.t.taskId),
        entries.map((e) => e.t.leaseId),
        entries.map((e) => (e.mode === 'success' ? 'succeeded' : 'failed')),
        errors.map((e) => e.id),
        errors.map((e) => e.m),
        entries.map((e) => e.handler ?? 'fixture_swh.handler'),
        entries.map((e) => JSON.stringify({ original_payload: { key: e.t.taskId }, answer: e.answer })),
        entries.map((e) => e.mode),
        entries.map(() => 'fixture_swh.handler raised: '),
        entries.map(() => String(Date.now() * 1000)),
      ],
    );
    return rows as { task_id: string; result: string; outcome: string | null; errors: string[] }[];
  }

  it('settles each as queues.settle_with_handler would, in input order, in one statement', async () => {
    const ok = await claimed('many-ok');
    const failing = await claimed('many-error');
    const raising = await claimed('many-raise');
    const errorMode = await claimed('many-error-mode');
    const answers = await settleMany([
      { t: ok, mode: 'success', answer: 'ok' },
      { t: failing, mode: 'success', answer: 'error' },
      { t: raising, mode: 'success', answer: 'raise' },
      { t: errorMode, mode: 'error', answer: 'error' },
    ]);
    expect(answers).toEqual([
      { task_id: ok.taskId, result: 'completed', outcome: 'succeeded', errors: [] },
      {
        task_id: failing.taskId,
        result: 'completed',
        outcome: 'failed',
        errors: ['fixture_swh.handler: mailbox full'],
      },
      {
        task_id: raising.taskId,
        result: 'completed',
        outcome: 'failed',
        errors: ['fixture_swh.handler raised: handler broke'],
      },
      {
        task_id: errorMode.taskId,
        result: 'completed',
        outcome: 'failed',
        errors: ['provider said no', 'fixture_swh.handler: mailbox full'],
      },
    ]);
    expect(await facts(ok.taskId)).toEqual({ outcome: 'succeeded', errors: [], calls: ['ok'], pending: false });
    expect(await facts(failing.taskId)).toEqual({
      outcome: 'failed',
      errors: ['fixture_swh.handler: mailbox full'],
      calls: ['error'],
      pending: false,
    });
    // A raise rolls back that handler's writes only.
    expect(await facts(raising.taskId)).toMatchObject({ outcome: 'failed', calls: [] });
    expect(await facts(errorMode.taskId)).toMatchObject({
      outcome: 'failed',
      errors: ['provider said no', 'fixture_swh.handler: mailbox full'],
      calls: ['error'],
    });
  });

  it('a lost lease commits nothing of its task, handler included; the others commit', async () => {
    const lost = await claimed('many-lost');
    // Its lease is revoked (as when its worker is declared dead).
    await db.query(`select queues.revoke_worker_leases('w-swh')`);
    const before = await claimed('many-before');
    const after = await claimed('many-after');
    const answers = await settleMany([
      { t: before, mode: 'success', answer: 'ok' },
      { t: lost, mode: 'success', answer: 'ok' },
      { t: after, mode: 'error', answer: 'ok' },
    ]);
    expect(answers).toEqual([
      { task_id: before.taskId, result: 'completed', outcome: 'succeeded', errors: [] },
      { task_id: lost.taskId, result: 'lease_lost', outcome: 'succeeded', errors: [] },
      { task_id: after.taskId, result: 'completed', outcome: 'failed', errors: ['provider said no'] },
    ]);
    expect(await facts(lost.taskId)).toEqual({ outcome: null, errors: [], calls: [], pending: true });
    expect(await facts(before.taskId)).toEqual({ outcome: 'succeeded', errors: [], calls: ['ok'], pending: false });
    expect(await facts(after.taskId)).toEqual({
      outcome: 'failed',
      errors: ['provider said no'],
      calls: ['ok'],
      pending: false,
    });
  });

  it('a handler that may not run fails its task as a raise would; the others run', async () => {
    const unrunnable = await claimed('many-unrunnable');
    const ok = await claimed('many-ok-3');
    const answers = await settleMany([
      { t: unrunnable, mode: 'success', answer: 'ok', handler: 'queues.enqueue' },
      { t: ok, mode: 'success', answer: 'ok' },
    ]);
    expect(answers[0]).toMatchObject({ result: 'completed', outcome: 'failed' });
    expect(answers[0].errors[0]).toMatch(
      /^fixture_swh\.handler raised: function queues\.enqueue\(jsonb\) does not exist$/,
    );
    expect(await facts(unrunnable.taskId)).toMatchObject({ outcome: 'failed', calls: [] });
    expect(await facts(ok.taskId)).toMatchObject({ outcome: 'succeeded', calls: ['ok'] });
  });

  it('a serialization failure in one handler records nothing for that task; the others commit', async () => {
    const conflict = await claimed('many-conflict');
    const ok = await claimed('many-ok-2');
    const answers = await settleMany([
      { t: conflict, mode: 'success', answer: 'conflict' },
      { t: ok, mode: 'success', answer: 'ok' },
    ]);
    expect(answers.map((a) => a.result)).toEqual(['transient', 'completed']);
    expect(await facts(conflict.taskId)).toEqual({ outcome: null, errors: [], calls: [], pending: true });
    expect(await facts(ok.taskId)).toMatchObject({ outcome: 'succeeded', calls: ['ok'] });
  });

  it('refuses bad arguments, and other roles', async () => {
    const t = await claimed('many-bad');
    const call = (ids: unknown[], leases: unknown[], modes: string[]) =>
      db.pool('worker').query(
        `select * from queues.settle_with_handlers($1::bigint[], $2::bigint[], '{succeeded}', null, null, null,
                                                     '{fixture_swh.handler}', '{"{}"}', $3::text[], '{x}', null)`,
        [ids, leases, modes],
      );
    await expect(call([t.taskId], [t.leaseId], ['later'])).rejects.toMatchObject({ code: '22023' });
    await expect(call([t.taskId], [null], ['success'])).rejects.toMatchObject({ code: '22004' });
    await expect(call([t.taskId, t.taskId], [t.leaseId], ['success'])).rejects.toMatchObject({ code: '22023' });
    expect(await facts(t.taskId)).toMatchObject({ outcome: null, calls: [], pending: true });
    for (const role of ['app', 'api'] as const)
      await expect(
        db.pool(role).query(
          `select queues.settle_with_handlers('{1}', '{1}', '{succeeded}', null, null, null, '{fixture_swh.handler}',
                                                '{"{}"}', '{success}', '{""}', null)`,
        ),
      ).rejects.toMatchObject({ code: '42501' });
  });
});
