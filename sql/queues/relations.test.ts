// The hot facts have no foreign keys (migrations/committed/000003, file 120-hotpath.sql, says why): the
// queue's security-definer functions are their only writers, and they must never leave a
// fact pointing at a task or lease that does not exist. A concurrent workload of
// claims, starts, completions (fenced, some failed and retried), heartbeats, releases and
// expiries, then every relation the dropped keys enforced is checked.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const ORPHANS: [string, string][] = [
  [
    'task_pending -> task',
    'select count(*) from queues.task_pending p where not exists (select 1 from queues.task t where t.task_id = p.task_id)',
  ],
  [
    'task_lease -> task',
    'select count(*) from queues.task_leases l where not exists (select 1 from queues.task t where t.task_id = l.task_id)',
  ],
  [
    'task_completed -> task',
    'select count(*) from queues.task_end c where not exists (select 1 from queues.task t where t.task_id = c.task_id)',
  ],
  [
    'task_completed.task_type = its task type',
    `select count(*) from queues.task_end c
      where c.task_type is distinct from (select t.task_type from queues.task t where t.task_id = c.task_id)`,
  ],
  [
    'task_completed -> task_lease of the same task',
    `select count(*) from queues.task_end c where c.task_lease_id is not null
      and not exists (select 1 from queues.task_leases l where l.task_lease_id = c.task_lease_id and l.task_id = c.task_id)`,
  ],
  [
    'one end per task (a task_completed row or a place in one completion round)',
    'select count(*) from (select e.task_id from queues.task_end e group by e.task_id having count(*) > 1) x',
  ],
  [
    'task_lease_started -> task_lease of the same task',
    `select count(*) from queues.task_lease_started s
      where not exists (select 1 from queues.task_leases l where l.task_lease_id = s.task_lease_id and l.task_id = s.task_id)`,
  ],
  [
    'task_lease_extension -> task_lease',
    'select count(*) from queues.task_lease_extension x where not exists (select 1 from queues.task_leases l where l.task_lease_id = x.task_lease_id and l.task_id = x.task_id)',
  ],
  [
    'task_lease_release -> task_lease',
    'select count(*) from queues.task_lease_release r where not exists (select 1 from queues.task_leases l where l.task_lease_id = r.task_lease_id and l.task_id = r.task_id)',
  ],
  [
    'error -> task_lease of the same task',
    `select count(*) from queues.error e where e.task_lease_id is not null
      and not exists (select 1 from queues.task_leases l where l.task_lease_id = e.task_lease_id and l.task_id = e.task_id)`,
  ],
  [
    'task_attempt_failed -> task_lease',
    `select count(*) from queues.task_attempt_failed a where a.task_lease_id is not null
      and not exists (select 1 from queues.task_leases l where l.task_lease_id = a.task_lease_id and l.task_id = a.task_id)`,
  ],
  [
    'task_interruption -> task_lease of the same task',
    `select count(*) from queues.task_interruption i
      where not exists (select 1 from queues.task_leases l where l.task_lease_id = i.task_lease_id and l.task_id = i.task_id)`,
  ],
  [
    'task_pending.current_lease_id -> task_lease of the same task',
    `select count(*) from queues.task_pending p where p.current_lease_id is not null
      and not exists (select 1 from queues.task_leases l where l.task_lease_id = p.current_lease_id and l.task_id = p.task_id)`,
  ],
];

it('no orphan facts after a concurrent workload of claims, starts, completions, retries, heartbeats, releases and expiries', async () => {
  // db_function is worker-only (queues.assert_may_enqueue_many): the owner enqueues
  // through the core, as its own SQL does.
  await db.query(
    `select count(*) from queues.enqueue_tasks((select jsonb_agg(jsonb_build_object('task_type', 'db_function',
        'payload', jsonb_build_object('n', i), 'max_attempts', 1 + i % 3)) from generate_series(1, 3000) i))`,
  );
  const worker = db.pool('worker');
  const claimer = async (w: number) => {
    for (let round = 0; round < 40; round++) {
      const { rows } = await worker.query(
        `select task_id, task_lease_id from queues.claim_tasks($1, 50, null, 60, 5)`,
        [`w${w}`],
      );
      if (rows.length === 0) break;
      const ids = rows.map((r) => r.task_id);
      const leases = rows.map((r) => r.task_lease_id);
      const third = Math.ceil(rows.length / 3);
      // Two thirds run: a heartbeat marks them started; of those, complete some (some
      // failed, each with its start), extend and release others.
      await worker.query('select * from queues.mark_started($1::bigint[], $2::bigint[])', [
        ids.slice(0, 2 * third),
        leases.slice(0, 2 * third),
      ]);
      await worker.query(
        `select * from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, $4::bigint[], $5::text[],
                                           array_fill((extract(epoch from now()) * 1000000)::bigint, array[cardinality($1::bigint[])]))`,
        [
          ids.slice(0, third),
          leases.slice(0, third),
          ids.slice(0, third).map((_, i) => (i % 4 === 0 ? 'failed' : 'succeeded')),
          ids.slice(0, third).filter((_, i) => i % 4 === 0),
          ids
            .slice(0, third)
            .filter((_, i) => i % 4 === 0)
            .map(() => 'failed on purpose'),
        ],
      );
      await worker.query('select * from queues.extend_leases($1::bigint[], $2::bigint[], 60)', [
        ids.slice(third, 2 * third),
        leases.slice(third, 2 * third),
      ]);
      await worker.query('select * from queues.release_leases($1::bigint[], $2::bigint[])', [
        ids.slice(2 * third),
        leases.slice(2 * third),
      ]);
      // A late completion with a lease that was released: refused, writes nothing.
      await worker.query('select * from queues.complete_tasks($1::bigint[], $2::bigint[])', [
        ids.slice(2 * third, 2 * third + 1),
        leases.slice(2 * third, 2 * third + 1),
      ]);
    }
  };
  await Promise.all(Array.from({ length: 6 }, (_, w) => claimer(w)));
  // Leases left to expire, then claimed and completed by the owner's clock (abandonments too).
  for (let i = 1; i <= 6; i++) {
    await db.query(
      `select * from queues.claim_tasks_at(now() + make_interval(mins => $1 * 2), 'late', 1000, null, 60, 2)`,
      [i],
    );
  }
  for (const [name, sql] of ORPHANS) {
    const { rows } = await db.query(sql);
    expect({ relation: name, orphans: Number(rows[0].count) }).toEqual({ relation: name, orphans: 0 });
  }
  // The workload did reach every kind of fact.
  const { rows } = await db.query(`select
      (select count(*) from queues.task_end)::int as completed,
      (select count(*) from queues.task_attempt_failed)::int as retried,
      (select count(*) from queues.task_lease_release)::int as released,
      (select count(*) from queues.task_lease_extension)::int as extended,
      (select count(*) from queues.task_lease_started)::int as started,
      (select count(*) from queues.error)::int as errors`);
  for (const [kind, n] of Object.entries(rows[0])) expect(n, kind).toBeGreaterThan(0);
});

it('truncating queues.task truncates the facts that no longer have keys to it', async () => {
  await db.query('truncate queues.task cascade');
  const { rows } = await db.query(`select
      (select count(*) from queues.task_pending) + (select count(*) from queues.task_leases) + (select count(*) from queues.task_end)
      + (select count(*) from queues.task_lease_started) + (select count(*) from queues.task_lease_extension)
      + (select count(*) from queues.task_lease_release) + (select count(*) from queues.error) as n`);
  expect(Number(rows[0].n)).toBe(0);
});
