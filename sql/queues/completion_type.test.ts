// A completion names its task's type (queues.task_completed.task_type), whichever path
// completes the task, so the dashboard's windows count completions by type without
// reading queues.task. Completions written before the column existed have none; the
// windows read their type from queues.task (admin.completions_between).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`insert into queues.task_type (task_type) values ('kind_a'), ('kind_b') on conflict do nothing`);
});
afterAll(async () => {
  await db?.drop();
});

const TYPES = ['kind_a', 'kind_b'];

async function enqueue(taskType: string): Promise<string> {
  const { rows } = await db.query(`select queues.enqueue($1, '{}'::jsonb, _max_attempts => 1) as id`, [taskType]);
  return rows[0].id as string;
}

/** Claims the given tasks (and whatever else is due of the two types) at now() + `seconds`. */
async function claimAt(seconds: number, maxLeases = 5): Promise<Map<string, string>> {
  const { rows } = await db.query<{ task_id: string; task_lease_id: string }>(
    `select task_id, task_lease_id from queues.claim_tasks_at(now() + make_interval(secs => $1), 'w', 100, $2, 60, $3)`,
    [seconds, TYPES, maxLeases],
  );
  return new Map(rows.map((r) => [r.task_id, r.task_lease_id]));
}

async function completions(ids: string[]) {
  const { rows } = await db.query<{ task_id: string; outcome: string; task_type: string | null; own_type: string }>(
    `select c.task_id, c.outcome, c.task_type, t.task_type as own_type
       from queues.task_end c join queues.task t using (task_id)
      where c.task_id = any ($1::bigint[]) order by c.task_id`,
    [ids],
  );
  return rows;
}

describe('every path that completes a task names its type', () => {
  it('complete_tasks (success and final failure), cancel, an interruption past its bound, and a claim abandoning a poison task', async () => {
    const succeeded = await enqueue('kind_a');
    const failed = await enqueue('kind_b');
    const interrupted = await enqueue('kind_a');
    const cancelled = await enqueue('kind_b');
    let leases = await claimAt(0);
    const worker = db.pool('worker');
    await worker.query(`select * from queues.complete_tasks($1::bigint[], $2::bigint[], $3::text[])`, [
      [succeeded, failed],
      [leases.get(succeeded), leases.get(failed)],
      ['succeeded', 'failed'],
    ]);
    const { rows: interruption } = await worker.query(
      `select queues.interrupt_task($1, $2, 'deadlock detected', 1) as r`,
      [interrupted, leases.get(interrupted)],
    );
    expect(interruption[0].r).toBe('abandoned');
    // Claimed: a held task is not cancelled; release it first.
    await worker.query(`select * from queues.release_leases($1::bigint[], $2::bigint[])`, [
      [cancelled],
      [leases.get(cancelled)],
    ]);
    const { rows: cancel } = await db.query(`select * from admin.cancel_tasks($1::bigint[], 'not wanted')`, [
      [cancelled],
    ]);
    expect(cancel[0].result).toBe('cancelled');

    // A poison task: its lease expires (uncounted), it comes back as the next lease's named
    // suspect, that lease expires too; the next claim (max_leases 1) abandons it.
    const poison = await enqueue('kind_b');
    leases = await claimAt(0, 1);
    expect(leases.has(poison)).toBe(true);
    leases = await claimAt(120, 1);
    expect(leases.has(poison)).toBe(true);
    leases = await claimAt(240, 1);
    expect(leases.has(poison)).toBe(false);

    const rows = await completions([succeeded, failed, interrupted, cancelled, poison]);
    expect(rows.map((r) => [r.task_id, r.outcome, r.task_type])).toEqual([
      [succeeded, 'succeeded', 'kind_a'],
      [failed, 'failed', 'kind_b'],
      [interrupted, 'abandoned', 'kind_a'],
      [cancelled, 'cancelled', 'kind_b'],
      [poison, 'abandoned', 'kind_b'],
    ]);
    for (const r of rows) expect(r.task_type).toBe(r.own_type);
  });

  it('a completion without its type is refused', async () => {
    const id = await enqueue('kind_a');
    await expect(
      db.query(`insert into queues.task_completed (task_id, outcome) values ($1, 'succeeded')`, [id]),
    ).rejects.toMatchObject({ code: '23514', constraint: 'task_completed_task_type_named' });
    expect(await completions([id])).toEqual([]);
  });
});

describe('completions written before the column', () => {
  it('count under their task type in every window of the dashboard', async () => {
    const NOW = '2031-06-01T12:00:00Z';
    const owner = await db.client('owner');
    try {
      await owner.query('begin');
      // As a database migrated from before the column holds them: no type, no check.
      await owner.query('alter table queues.task_completed drop constraint task_completed_task_type_named');
      const { rows } = await owner.query(
        `insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
         select t, '{}', $1::timestamptz - interval '10 minutes', $1::timestamptz - interval '10 minutes'
           from unnest(array['kind_a', 'kind_b', 'kind_b']) t
         returning task_id, task_type`,
        [NOW],
      );
      await owner.query(
        `insert into queues.task_completed (task_id, completed_at, outcome)
         select unnest($1::bigint[]), $2::timestamptz - interval '5 minutes', 'succeeded'`,
        [rows.map((r) => r.task_id), NOW],
      );
      const counts = async (sql: string) =>
        Object.fromEntries(
          (await owner.query<{ task_type: string; n: number }>(sql, [NOW])).rows
            .filter((r) => TYPES.includes(r.task_type))
            .map((r) => [r.task_type, Number(r.n)]),
        );
      const expected = { kind_a: 1, kind_b: 2 };
      expect(
        await counts(`select task_type, sum(completed) as n from admin.throughput_at($1, 3600, 60) group by 1`),
      ).toEqual(expected);
      expect(
        await counts(`select task_type, count as n from admin.task_counts_at($1, 3600) where state = 'succeeded'`),
      ).toEqual(expected);
      expect(
        await counts(`select task_type, completed_in_window as n from admin.capacity_at($1, null, 3600, 600)`),
      ).toEqual(expected);
      // Enqueued 10 and completed 5 minutes before NOW: pending 7 minutes before, not 3
      // (tasks of the other tests are pending at both).
      expect(
        await counts(
          `select task_type, sum(case when bucket_end = $1::timestamptz - interval '7 minutes' then depth else -depth end) as n
             from admin.queue_depth_at($1, 600, 60)
            where bucket_end in ($1::timestamptz - interval '7 minutes', $1::timestamptz - interval '3 minutes')
            group by 1`,
        ),
      ).toEqual(expected);
    } finally {
      await owner.query('rollback');
      await owner.end();
    }
  });
});
