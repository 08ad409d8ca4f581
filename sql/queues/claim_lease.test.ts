// One lease per claim (sql/queues/claim.sql, sql/queues/task_lease_effective.sql): a claim
// writes one queues.claim_lease naming its tasks, which share its lease id; every reading
// of a task's leases (history, worker, suspect, expiry with heartbeats) is the same as
// for a per-task lease, a task's own leases are an index probe, and the lease fences
// completions as before.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  for (const type of ['lease_a', 'lease_b', 'lease_c', 'lease_d', 'lease_e', 'lease_f', 'lease_hist'])
    await db.query(`insert into queues.task_type (task_type) values ($1) on conflict do nothing`, [type]);
});
afterAll(async () => {
  await db?.drop();
});

interface Claimed {
  task_id: string;
  task_lease_id: string;
  expires_at: string;
}

async function enqueue(type: string, n: number): Promise<string[]> {
  const { rows } = await db.query(
    `select queues.enqueue($1, jsonb_build_object('n', g))::text as id from generate_series(1, $2::int) g`,
    [type, n],
  );
  return rows.map((r) => r.id);
}
/** Claims up to `limit` ready tasks of `type` at now() + `seconds`, as `worker` (60 s leases). */
async function claimAt(type: string, seconds: number, worker: string, limit = 1000, maxLeases = 5) {
  const { rows } = await db.query<Claimed>(
    `select task_id::text, task_lease_id::text, expires_at::text
       from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, $3, array[$4], 60, $5)`,
    [seconds, worker, limit, type, maxLeases],
  );
  return rows;
}
const settle = async (ids: string[], leases: string[], outcome = 'succeeded') =>
  new Map(
    (
      await db
        .pool('worker')
        .query(
          `select task_id::text, result from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, null, null, null)`,
          [ids, leases, ids.map(() => outcome)],
        )
    ).rows.map((r) => [r.task_id, r.result]),
  );

describe('a claim', () => {
  it('writes one lease naming its tasks, ascending; every task of it shares the lease id, which fences it', async () => {
    const ids = await enqueue('lease_a', 5);
    const claimed = await claimAt('lease_a', 0, 'w-one');
    expect(claimed.map((c) => c.task_id).sort()).toEqual([...ids].sort());
    const leaseIds = new Set(claimed.map((c) => c.task_lease_id));
    expect(leaseIds.size).toBe(1);
    const [leaseId] = leaseIds;
    const { rows } = await db.query(
      `select task_id::text, task_lease_id::text, task_ids::text[], task_range::text, suspect_task_id,
              (select worker_id from queues.worker_name n where n.worker_key = c.worker_key) as worker_id,
              extract(epoch from expires_at - leased_at)::int as seconds
         from queues.claim_lease c where task_ids && $1::bigint[]`,
      [ids],
    );
    const sorted = [...ids].sort((a, b) => Number(a) - Number(b));
    expect(rows).toEqual([
      {
        task_id: sorted[4],
        task_lease_id: leaseId,
        task_ids: sorted,
        task_range: `[${sorted[0]},${Number(sorted[4]) + 1})`,
        suspect_task_id: null,
        worker_id: 'w-one',
        seconds: 60,
      },
    ]);
    // It is each task's current lease: that is what fences its completion.
    const { rows: current } = await db.query(
      `select queues.current_leases($1::bigint[], array_fill($2::bigint, array[cardinality($1::bigint[])])) as held`,
      [ids, leaseId],
    );
    expect(current).toEqual([{ held: ids.map(() => true) }]);
    // No per-task lease rows.
    const { rows: perTask } = await db.query(
      'select count(*)::int as n from queues.task_lease where task_id = any($1::bigint[])',
      [ids],
    );
    expect(perTask[0].n).toBe(0);
    expect([
      ...(
        await settle(
          ids,
          ids.map(() => leaseId),
        )
      ).values(),
    ]).toEqual(Array(5).fill('completed'));
  });

  it('takes its lease id from the per-task leases sequence: a claim never reuses an id of history', async () => {
    const [old] = await enqueue('lease_hist', 1);
    // A per-task lease as written before claims wrote one lease per claim.
    const { rows: hist } = await db.query(
      `insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
       values ($1, 'w-old', now() - interval '2 hours', now() - interval '1 hour') returning task_lease_id::text`,
      [old],
    );
    const [fresh] = await enqueue('lease_b', 1);
    const claimed = await claimAt('lease_b', 0, 'w-new');
    expect(claimed.map((c) => c.task_id)).toContain(fresh);
    const leaseId = claimed.find((c) => c.task_id === fresh)!.task_lease_id;
    expect(BigInt(leaseId)).toBeGreaterThan(BigInt(hist[0].task_lease_id));
    // Both shapes read alike: the old task's per-task lease and the new task's claim lease.
    const { rows } = await db.query(
      `select l.task_id::text, l.task_lease_id::text, l.worker_id
         from unnest($1::bigint[]) i(id) cross join lateral queues.task_lease_effective_of(i.id) l
        order by l.task_lease_id`,
      [[old, fresh]],
    );
    expect(rows).toEqual([
      { task_id: old, task_lease_id: hist[0].task_lease_id, worker_id: 'w-old' },
      { task_id: fresh, task_lease_id: leaseId, worker_id: 'w-new' },
    ]);
    await settle(
      claimed.map((c) => c.task_id),
      claimed.map((c) => c.task_lease_id),
    );
  });
});

describe("a task's leases, read per task", () => {
  it('lease history, worker, suspect and expiry with heartbeats, on the task page and in the views', async () => {
    // Three tasks in one claim; the claim expires; the next claims take them back, the
    // one suspect per claim, named by its lease.
    const ids = await enqueue('lease_c', 3);
    const first = await claimAt('lease_c', 0, 'w-first');
    expect(first).toHaveLength(3);
    const firstLease = first[0].task_lease_id;
    // A heartbeat extends one task's lease only (heartbeats name task and lease).
    const { rows: ext } = await db.query(
      `select task_id::text from queues.extend_leases_at(now() + interval '30 s', $1::bigint[], $2::bigint[], 120)`,
      [[ids[0]], [firstLease]],
    );
    expect(ext).toEqual([{ task_id: ids[0] }]);
    const effective = async (id: string) =>
      (
        await db.query(
          `select task_lease_id::text, worker_id, extensions, suspect,
                  round(extract(epoch from expires_at - leased_at))::int as seconds
             from queues.task_lease_effective_of($1) order by task_lease_id`,
          [id],
        )
      ).rows;
    expect(await effective(ids[0])).toEqual([
      { task_lease_id: firstLease, worker_id: 'w-first', extensions: 1, suspect: false, seconds: 150 },
    ]);
    expect(await effective(ids[1])).toEqual([
      { task_lease_id: firstLease, worker_id: 'w-first', extensions: 0, suspect: false, seconds: 60 },
    ]);
    // The view reads the same, a row per (task, lease).
    const { rows: viewRows } = await db.query(
      `select task_id::text, extensions, round(extract(epoch from expires_at - leased_at))::int as seconds
         from queues.task_lease_effective e where e.task_lease_id = $1 order by e.task_id`,
      [firstLease],
    );
    expect(viewRows).toEqual([
      { task_id: ids[0], extensions: 1, seconds: 150 },
      { task_id: ids[1], extensions: 0, seconds: 60 },
      { task_id: ids[2], extensions: 0, seconds: 60 },
    ]);

    // Past 60 s the two unextended leases expired: the next claim takes one of them as
    // its named suspect (one suspect per claim), the next another.
    const second = await claimAt('lease_c', 70, 'w-second');
    expect(second).toHaveLength(1);
    const third = await claimAt('lease_c', 70, 'w-third');
    expect(third).toHaveLength(1);
    expect(new Set([second[0].task_id, third[0].task_id])).toEqual(new Set([ids[1], ids[2]]));
    const { rows: named } = await db.query(
      `select task_id::text, suspect_task_id::text from queues.claim_lease where task_lease_id = any($1::bigint[])
        order by task_lease_id`,
      [[second[0].task_lease_id, third[0].task_lease_id]],
    );
    expect(named).toEqual([
      { task_id: second[0].task_id, suspect_task_id: second[0].task_id },
      { task_id: third[0].task_id, suspect_task_id: third[0].task_id },
    ]);
    const suspectTask = second[0].task_id;
    expect(await effective(suspectTask)).toEqual([
      { task_lease_id: firstLease, worker_id: 'w-first', extensions: 0, suspect: false, seconds: 60 },
      { task_lease_id: second[0].task_lease_id, worker_id: 'w-second', extensions: 0, suspect: true, seconds: 60 },
    ]);

    // The task page (admin.get_task) lists both leases, the live one marked; the workers
    // page counts the live lease for its worker; the API's view names the newest lease.
    const api = db.pool('api');
    const { rows: page } = await api.query('select admin.get_task($1) as t', [suspectTask]);
    expect(
      page[0].t.leases.map((l: { task_lease_id: number; worker_id: string; live: boolean }) => [
        String(l.task_lease_id),
        l.worker_id,
        l.live,
      ]),
    ).toEqual([
      [firstLease, 'w-first', false],
      [second[0].task_lease_id, 'w-second', true],
    ]);
    const { rows: page0 } = await api.query('select admin.get_task($1) as t', [ids[0]]);
    expect(page0[0].t.heartbeats).toHaveLength(1);
    expect(page0[0].t.heartbeats[0]).toMatchObject({ task_lease_id: Number(firstLease) });
    for (const w of ['w-first', 'w-second'])
      await db.query(`select queues.record_worker_heartbeat($1::text, array['lease_c'], 10000)`, [w]);
    const { rows: workers } = await db.query(
      `select worker_id, tasks_in_flight::int as n from admin.list_workers_at(now() + interval '70 s', 600)
        where worker_id = any(array['w-first', 'w-second']) order by 1`,
    );
    // At 70 s: w-first's heartbeated lease of ids[0] (to 150 s), w-second's of the suspect.
    expect(workers).toEqual([
      { worker_id: 'w-first', n: 1 },
      { worker_id: 'w-second', n: 1 },
    ]);
    const { rows: apiView } = await api.query(
      `select id::text, worker_id, claimed_at = $2::timestamptz as newest from public.worker_tasks where id = $1`,
      [
        suspectTask,
        (
          await db.query('select leased_at::text from queues.claim_lease where task_lease_id = $1', [
            second[0].task_lease_id,
          ])
        ).rows[0].leased_at,
      ],
    );
    expect(apiView).toEqual([{ id: suspectTask, worker_id: 'w-second', newest: true }]);

    // Counts of leases per task (dead letters, the task list) read both: 2 for the suspect.
    const { rows: counted } = await db.query(`select (select count(*)::int from queues.task_leases_of($1)) as n`, [
      suspectTask,
    ]);
    expect(counted[0].n).toBe(2);
    await settle([ids[0]], [firstLease]);
    await settle([second[0].task_id], [second[0].task_lease_id]);
    await settle([third[0].task_id], [third[0].task_lease_id]);
  });

  it('a poison task is abandoned after max_leases expiries of claims that named it, whatever ran beside it', async () => {
    // Two tasks claimed together, expiring together, four times over (max_leases 2):
    // each claim names at most one suspect, and only the named one's expiries count.
    const ids = await enqueue('lease_d', 2);
    let t = 0;
    const seen: Claimed[][] = [];
    for (let i = 0; i < 8; i++) {
      seen.push(await claimAt('lease_d', t, `w-${i}`, 1000, 2));
      t += 61;
    }
    // Abandoned, both, after their named expiries: no task has more than 2 counted
    // expiries plus its first (uncounted) one, and each lease names at most one suspect.
    const { rows: ends } = await db.query(
      `select e.task_id::text, e.outcome from unnest($1::bigint[]) i(id) cross join lateral queues.task_end_of(i.id) e order by 1`,
      [ids],
    );
    expect(ends.map((e) => e.outcome)).toEqual(['abandoned', 'abandoned']);
    for (const id of ids) {
      const { rows } = await db.query(
        `select count(*)::int as leases, count(*) filter (where suspect)::int as named from queues.task_leases_of($1)`,
        [id],
      );
      expect(rows[0], id).toEqual({ leases: 3, named: 2 });
    }
    const { rows: suspects } = await db.query(
      `select count(*)::int as n from queues.claim_lease where task_ids && $1::bigint[] and suspect_task_id is not null`,
      [ids],
    );
    expect(suspects[0].n).toBe(4);
    expect(seen.flat().length).toBe(6);
  });
});

describe('fencing by the claim lease', () => {
  it('a late holder can neither complete nor fail a task re-claimed after its lease expired; the other tasks of its claim are still its own', async () => {
    const ids = await enqueue('lease_e', 2);
    const first = await claimAt('lease_e', 0, 'w-late');
    const late = first[0].task_lease_id;
    // One task is heartbeated past the expiry, the other is not and is taken over.
    await db.query(`select * from queues.extend_leases_at(now() + interval '50 s', $1::bigint[], $2::bigint[], 600)`, [
      [ids[0]],
      [late],
    ]);
    const again = await claimAt('lease_e', 70, 'w-thief');
    expect(again.map((c) => c.task_id)).toEqual([ids[1]]);
    const results = await settle(ids, [late, late]);
    expect(results.get(ids[0])).toBe('completed');
    expect(results.get(ids[1])).toBe('lease_lost');
    // The late holder's error is refused as well: the lease is not the task's current one.
    await expect(
      db.pool('worker').query('select queues.fail_task($1, $2, $3)', [ids[1], 'late', late]),
    ).rejects.toMatchObject({ code: '55000', constraint: 'task_lease_current' });
    expect([...(await settle([ids[1]], [again[0].task_lease_id])).values()]).toEqual(['completed']);
  });

  it('32 concurrent claimers: each task is in exactly one claim lease, and no two claimers share a task', async () => {
    const ids = await enqueue('lease_f', 3000);
    const clients = await Promise.all(Array.from({ length: 32 }, () => db.client('worker')));
    try {
      const got = await Promise.all(
        clients.map(async (c, i) => {
          const mine: { task_id: string; task_lease_id: string }[] = [];
          for (;;) {
            const { rows } = await c.query(
              `select task_id::text, task_lease_id::text from queues.claim_tasks($1, 37, array['lease_f'], 300, 5)`,
              [`racer-${i}`],
            );
            if (rows.length === 0) return mine;
            mine.push(...rows);
          }
        }),
      );
      const all = got.flat();
      expect(all).toHaveLength(ids.length);
      expect(new Set(all.map((r) => r.task_id)).size).toBe(ids.length);
      // A lease id belongs to one claimer.
      const owner = new Map<string, number>();
      got.forEach((rows, i) =>
        rows.forEach((r) => {
          expect(owner.get(r.task_lease_id) ?? i).toBe(i);
          owner.set(r.task_lease_id, i);
        }),
      );
      const { rows } = await db.query(
        `select (select count(*)::int from queues.task_leases where task_id = any($1::bigint[])) as leases,
                (select count(distinct task_id)::int from queues.task_leases where task_id = any($1::bigint[])) as tasks,
                (select count(*)::int from queues.claim_lease a join queues.claim_lease b
                    on a.task_lease_id < b.task_lease_id and a.task_ids && b.task_ids
                  where a.task_ids && $1::bigint[]) as shared`,
        [ids],
      );
      expect(rows[0]).toEqual({ leases: ids.length, tasks: ids.length, shared: 0 });
      // Every claim's lease names exactly the tasks it returned.
      const byLease = new Map<string, string[]>();
      for (const r of all) byLease.set(r.task_lease_id, [...(byLease.get(r.task_lease_id) ?? []), r.task_id]);
      const { rows: leases } = await db.query(
        `select task_lease_id::text, task_ids::text[] from queues.claim_lease where task_ids && $1::bigint[]`,
        [ids],
      );
      expect(leases).toHaveLength(byLease.size);
      for (const l of leases)
        expect(l.task_ids).toEqual(byLease.get(l.task_lease_id)!.sort((a, b) => Number(a) - Number(b)));
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it('is append-only: a claim lease is never updated, on the parent or a partition', async () => {
    await expect(db.query('update queues.claim_lease set expires_at = now()')).rejects.toMatchObject({
      code: '55000',
    });
    await expect(db.query('update queues.claim_lease_default set expires_at = now()')).rejects.toMatchObject({
      code: '55000',
    });
  });

  it('refuses a malformed claim lease', async () => {
    await expect(
      db.query(
        `insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range)
         values (5, 1, now(), now() + interval '1 minute', '{5,3}', int8range(5, 5, '[]'))`,
      ),
    ).rejects.toMatchObject({ code: '23514', constraint: 'claim_lease_shape' });
  });
});

describe("a task's leases are an index probe", () => {
  it('of each shape, not a scan of the claim leases', async () => {
    // 2,000 claim leases of 100 tasks each (ids far above the real ones), and per-task
    // leases in the same set.
    await db.query(`
      insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range)
      select r * 100 + 1000099, 1, now(), now() + interval '1 minute',
             array(select r * 100 + 1000000 + g from generate_series(0, 99) g),
             int8range(r * 100 + 1000000, r * 100 + 1000099, '[]')
        from generate_series(0, 1999) r`);
    await db.query(`
      insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
      select 1500000 + g, 'w', now(), now() + interval '1 minute' from generate_series(0, 19999) g`);
    await db.query('analyze queues.claim_lease, queues.task_lease');
    type Node = {
      'Node Type'?: string;
      'Relation Name'?: string;
      'Index Name'?: string;
      'Actual Rows'?: number;
      'Actual Loops'?: number;
      'Rows Removed by Filter'?: number;
      'Rows Removed by Index Recheck'?: number;
      Plans?: Node[];
    };
    const root = await db.client('root');
    try {
      for (const sql of [
        'select * from queues.task_leases_of(1100050)',
        'select * from queues.task_lease_effective_of(1100050)',
        `select * from queues.task_lease_at(1100050, ${(await root.query('select task_lease_id from queues.claim_lease where task_id = 1100099')).rows[0].task_lease_id})`,
      ]) {
        const { rows } = await root.query(`explain (analyze, buffers, format json) ${sql}`);
        const plan = rows[0]['QUERY PLAN'][0].Plan as Node;
        const nodes: Node[] = [];
        const walk = (n: Node) => {
          nodes.push(n);
          (n.Plans ?? []).forEach(walk);
        };
        walk(plan);
        const onClaims = nodes.filter(
          (n) => (n['Relation Name'] ?? '').startsWith('claim_lease') && n['Node Type'] !== 'Seq Scan',
        );
        expect(onClaims.length, sql).toBeGreaterThan(0);
        // No scan of a partition that holds claim leases (an empty one costs nothing),
        // except the subquery that finds the lease id of the third statement by its
        // primary key.
        expect(
          nodes.filter(
            (n) =>
              n['Node Type'] === 'Seq Scan' &&
              (n['Relation Name'] ?? '').match(/^(claim_lease|task_lease)/) &&
              Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0) > 0,
          ),
          sql,
        ).toEqual([]);
        expect(
          nodes.some((n) => (n['Index Name'] ?? '').match(/task_range|task_lease_id_idx/)),
          sql,
        ).toBe(true);
        expect(
          nodes.some(
            (n) => (n['Index Name'] ?? '').startsWith('task_lease') && (n['Index Name'] ?? '').includes('pkey'),
          ),
          sql,
        ).toBe(true);
        // The probe reads the claim that names the task, not 2,000.
        const claimRows = nodes
          .filter((n) => (n['Relation Name'] ?? '').startsWith('claim_lease') && n['Node Type'] !== 'Seq Scan')
          .reduce(
            (s, n) =>
              s +
              (Number(n['Actual Rows'] ?? 0) +
                Number(n['Rows Removed by Filter'] ?? 0) +
                Number(n['Rows Removed by Index Recheck'] ?? 0)) *
                Number(n['Actual Loops'] ?? 1),
            0,
          );
        expect(claimRows, sql).toBeLessThanOrEqual(3);
      }
      const { rows: one } = await root.query('select count(*)::int as n from queues.task_leases_of(1100050)');
      expect(one[0].n).toBe(1);
    } finally {
      await root.end();
    }
  });
});
