// Heartbeats (lease extensions), releases and poison tasks.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase, endPendingTasks } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

interface Lease {
  task_id: string;
  task_lease_id: string;
  lease_count: number;
}

async function enqueue(): Promise<string> {
  const { rows } = await db
    .pool('owner')
    .query(`select queues.enqueue('db_function', '{"db_function": "internal.noop"}') as id`);
  return rows[0].id;
}

/**
 * Claims as the owner at now + `seconds` (to move time), with max_leases `maxLeases`.
 * Nothing marks a start: the suspect accounting does not depend on one.
 */
async function claimAt(seconds: number, worker = 'w', maxLeases = 5, suspects = 'any'): Promise<Lease[]> {
  const { rows } = await db.query<Lease>(
    `select task_id, task_lease_id, lease_count
       from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, 100, null, 60, $3, $4)`,
    [seconds, worker, maxLeases, suspects],
  );
  return rows;
}

async function extendAt(seconds: number, leases: Lease[], leaseSeconds = 60) {
  const { rows } = await db.query(
    `select task_id, task_lease_id from queues.extend_leases_at(now() + make_interval(secs => $1), $2::bigint[], $3::bigint[], $4)`,
    [seconds, leases.map((l) => l.task_id), leases.map((l) => l.task_lease_id), leaseSeconds],
  );
  return rows;
}

describe('heartbeats', () => {
  it('an extended lease is not claimable past its first expiry; each extension is a fact', async () => {
    const id = await enqueue();
    const leases = await claimAt(0, 'slow');
    expect(leases.map((l) => l.task_id)).toEqual([id]);
    // Heartbeats at 40 s and 80 s, each for 60 s: the lease now runs to 140 s.
    expect(await extendAt(40, leases)).toHaveLength(1);
    expect(await extendAt(80, leases)).toHaveLength(1);
    expect(await claimAt(100, 'thief')).toEqual([]);
    expect(await claimAt(139, 'thief')).toEqual([]);
    const { rows } = await db.query(
      `select extensions, round(extract(epoch from expires_at - leased_at))::int as seconds
         from queues.task_lease_effective where task_lease_id = $1`,
      [leases[0].task_lease_id],
    );
    expect(rows).toEqual([{ extensions: 2, seconds: 140 }]);
    expect((await claimAt(141, 'next')).map((l) => l.task_id)).toEqual([id]);
  });

  it('a lost lease is not extended: the worker learns it from the result', async () => {
    await enqueue();
    const [stale] = await claimAt(0, 'stale');
    const [fresh] = await claimAt(61, 'fresh');
    expect(fresh.task_id).toBe(stale.task_id);
    expect(await extendAt(62, [stale])).toEqual([]);
    expect(await extendAt(62, [fresh])).toHaveLength(1);
    // The worker role extends through the public function, at the server's clock.
    const { rows } = await db
      .pool('worker')
      .query('select task_id from queues.extend_leases($1::bigint[], $2::bigint[], 30)', [
        [stale.task_id],
        [stale.task_lease_id],
      ]);
    expect(rows).toEqual([]);
  });

  it('a heartbeat never waits for a row: a lease whose completion is in flight is returned unchanged, the others extended', async () => {
    // Two tasks in one claim (their claim lease holds them without a row: the ready set),
    // then a third in a claim of its own.
    await enqueue();
    await enqueue();
    const leases = await claimAt(0, 'beating');
    expect(leases).toHaveLength(2);
    await enqueue();
    const [apart] = await claimAt(0, 'beating');
    const [completing, sibling] = leases as [Lease, Lease];
    const all = [completing, sibling, apart];
    const completer = await db.client('worker');
    const heart = await db.client('worker');
    const beat = (which: Lease[]) =>
      heart.query<{ task_id: string; seconds: number }>(
        `select task_id, round(extract(epoch from expires_at - now()))::int as seconds
           from queues.extend_leases($1::bigint[], $2::bigint[], 600) order by task_id`,
        [which.map((l) => l.task_id), which.map((l) => l.task_lease_id)],
      );
    try {
      // The completion holds its lease's lock until it commits; a heartbeat that waited
      // for it without a bound would hit this lock_timeout.
      await heart.query(`set lock_timeout = '2s'`);
      await completer.query('begin');
      const { rows: done } = await completer.query(
        'select result from queues.complete_tasks(array[$1]::bigint[], array[$2]::bigint[])',
        [completing.task_id, completing.task_lease_id],
      );
      expect(done).toEqual([{ result: 'completed' }]);
      const held = await beat(all);
      expect(held.rows.map((r) => r.task_id)).toEqual(all.map((l) => l.task_id).sort());
      const seconds = Object.fromEntries(held.rows.map((r) => [r.task_id, r.seconds]));
      // The tasks of the lease being completed are left as claimed (a 60-second lease);
      // the task of the other claim is extended to 600 s.
      expect(seconds[completing.task_id]).toBeLessThanOrEqual(60);
      expect(seconds[sibling.task_id]).toBeLessThanOrEqual(60);
      expect(seconds[apart.task_id]).toBeGreaterThan(590);
      await completer.query('commit');
      // Once the completion committed, its task's lease is gone, and the next heartbeat
      // extends the sibling.
      const after = await beat(all);
      expect(after.rows.map((r) => r.task_id)).toEqual([sibling.task_id, apart.task_id].sort());
      expect(Math.min(...after.rows.map((r) => r.seconds))).toBeGreaterThan(590);
      const { rows: facts } = await db.query(
        'select task_id, count(*)::int as n from queues.task_lease_extension where task_id = any($1::bigint[]) group by 1 order by 1',
        [all.map((l) => l.task_id)],
      );
      expect(facts).toEqual(
        [
          { task_id: sibling.task_id, n: 1 },
          { task_id: apart.task_id, n: 2 },
        ].sort((a, b) => Number(a.task_id) - Number(b.task_id)),
      );
    } finally {
      await completer.query('rollback').catch(() => undefined);
      await completer.end();
      await heart.end();
    }
  });

  it('a heartbeat waits for a completion of its claim lease in flight that commits meanwhile, then extends the rest', async () => {
    await enqueue();
    await enqueue();
    const leases = await claimAt(0, 'waiting-beat');
    expect(leases).toHaveLength(2);
    const [completing, sibling] = leases as [Lease, Lease];
    const completer = await db.client('worker');
    const heart = await db.client('worker');
    try {
      await completer.query('begin');
      await completer.query('select * from queues.complete_tasks(array[$1]::bigint[], array[$2]::bigint[])', [
        completing.task_id,
        completing.task_lease_id,
      ]);
      // The heartbeat waits up to its session's lock_timeout for the lease's lock.
      await heart.query(`set lock_timeout = '30s'`);
      const { rows: pid } = await heart.query('select pg_backend_pid() as pid');
      const root = await db.client('root');
      const beating = heart.query<{ task_id: string; seconds: number }>(
        `select task_id, round(extract(epoch from expires_at - now()))::int as seconds
           from queues.extend_leases($1::bigint[], $2::bigint[], 600) order by task_id`,
        [leases.map((l) => l.task_id), leases.map((l) => l.task_lease_id)],
      );
      // The heartbeat waits on the lease's lock; the completion then commits.
      let settled = false;
      void beating.finally(() => (settled = true)).catch(() => undefined);
      // (A heartbeat that does not wait settles first; the assertions below then fail.)
      while (!settled) {
        const { rows } = await root.query(`select wait_event from pg_stat_activity where pid = $1`, [pid[0].pid]);
        if (rows[0]?.wait_event === 'advisory') break;
        await new Promise((r) => setTimeout(r, 5));
      }
      await root.end();
      await completer.query('commit');
      const { rows } = await beating;
      expect(rows.map((r) => r.task_id)).toEqual([sibling.task_id]);
      expect(rows[0].seconds).toBeGreaterThan(590);
    } finally {
      await completer.query('rollback').catch(() => undefined);
      await completer.end();
      await heart.end();
    }
  });

  it('rejects mismatched or oversized arguments', async () => {
    const worker = db.pool('worker');
    await expect(worker.query(`select * from queues.extend_leases('{1,2}', '{1}')`)).rejects.toMatchObject({
      code: '22023',
      message: 'task_ids and task_lease_ids must have the same length (2 and 1)',
    });
    await expect(worker.query(`select * from queues.extend_leases('{1}', '{1}', 0)`)).rejects.toMatchObject({
      code: '22023',
    });
    await expect(worker.query(`select * from queues.release_leases(null, '{1}')`)).rejects.toMatchObject({
      code: '22004',
    });
  });
});

describe('releases', () => {
  it('a released task is claimable at once, and releases do not count towards abandoning', async () => {
    const id = await enqueue();
    for (let i = 0; i < 3; i++) {
      const leases = (await claimAt(0, `w${i}`, 1)).filter((l) => l.task_id === id);
      expect(leases).toHaveLength(1);
      const { rows } = await db
        .pool('worker')
        .query('select task_id from queues.release_leases($1::bigint[], $2::bigint[])', [
          [id],
          [leases[0].task_lease_id],
        ]);
      expect(rows).toEqual([{ task_id: id }]);
    }
    const { rows } = await db.query(
      'select count(*)::int as n from queues.task_lease_release r join queues.task_leases l using (task_id, task_lease_id) where l.task_id = $1',
      [id],
    );
    expect(rows[0].n).toBe(3);
    // Even with max_leases 1 the task is claimed, not abandoned.
    expect((await claimAt(0, 'last', 1)).map((l) => l.task_id)).toContain(id);
  });

  it('a released lease is no longer held: completing, failing or extending with it is refused', async () => {
    const id = await enqueue();
    const [lease] = (await claimAt(0, 'leaving')).filter((l) => l.task_id === id);
    const worker = db.pool('worker');
    await worker.query('select * from queues.release_leases($1::bigint[], $2::bigint[])', [
      [id],
      [lease.task_lease_id],
    ]);
    await expect(worker.query('select queues.complete_task($1, $2)', [id, lease.task_lease_id])).rejects.toMatchObject({
      code: '55000',
    });
    await expect(
      worker.query('select queues.fail_task($1, $2, $3)', [id, 'late', lease.task_lease_id]),
    ).rejects.toMatchObject({ code: '55000' });
    expect(await extendAt(1, [lease])).toEqual([]);
    expect((await db.query('select count(*)::int as n from queues.task_end where task_id = $1', [id])).rows[0].n).toBe(
      0,
    );
  });

  it('releasing a lease that is no longer current does nothing', async () => {
    await endPendingTasks(db);
    const id = await enqueue();
    const [old] = (await claimAt(0, 'old')).filter((l) => l.task_id === id);
    await claimAt(61, 'new');
    const { rows } = await db
      .pool('worker')
      .query('select * from queues.release_leases($1::bigint[], $2::bigint[])', [[id], [old.task_lease_id]]);
    expect(rows).toEqual([]);
    expect(await claimAt(62, 'third')).toEqual([]);
  });
});

describe('poison tasks', () => {
  it('a task whose leases keep expiring is abandoned, with an error, after max_leases counted expiries', async () => {
    await endPendingTasks(db);
    const id = await enqueue();
    const maxLeases = 3;
    // The first expiry makes it a suspect, uncounted (it may only have waited in a dead
    // worker's local queue); each later lease names it the claim's suspect and counts.
    for (let i = 0; i <= maxLeases; i++) {
      const claimed = await claimAt(61 * i, `crasher-${i}`, maxLeases);
      expect(claimed.map((l) => [l.task_id, l.lease_count])).toEqual([[id, i + 1]]);
    }
    const { rows: named } = await db.query(
      'select suspect from queues.task_leases where task_id = $1 order by task_lease_id',
      [id],
    );
    expect(named.map((r) => r.suspect)).toEqual([false, true, true, true]);
    // The third counted lease expires: the next claim abandons the task instead of leasing it.
    expect(await claimAt(61 * (maxLeases + 1), 'next', maxLeases)).toEqual([]);
    const { rows } = await db.query(
      `select c.outcome, e.error_message
         from queues.task_end c join queues.error e using (task_id) where c.task_id = $1`,
      [id],
    );
    expect(rows).toEqual([
      { outcome: 'abandoned', error_message: 'abandoned: 3 leases expired without completion (max_leases 3)' },
    ]);
    expect(
      (await db.query('select count(*)::int as n from queues.task_leases where task_id = $1', [id])).rows[0].n,
    ).toBe(maxLeases + 1);
    expect(await claimAt(86_400, 'later', maxLeases)).toEqual([]);
  });

  it('abandoning one task does not stop the others in the same claim', async () => {
    await endPendingTasks(db);
    const poison = await enqueue();
    await claimAt(0, 'crasher', 1);
    // Back as the named suspect of the next claim; that lease's expiry counts.
    expect((await claimAt(61, 'crasher', 1)).map((l) => l.task_id)).toEqual([poison]);
    const healthy = await enqueue();
    const claimed = await claimAt(122, 'w', 1);
    expect(claimed.map((l) => l.task_id)).toEqual([healthy]);
    const { rows } = await db.query('select outcome from queues.task_end where task_id = $1', [poison]);
    expect(rows).toEqual([{ outcome: 'abandoned' }]);
  });

  it('tasks whose lease expired come back one per claim, not all into one worker', async () => {
    await endPendingTasks(db);
    const crashed = [await enqueue(), await enqueue(), await enqueue()];
    expect((await claimAt(0, 'dies')).map((l) => l.task_id).sort()).toEqual([...crashed].sort());
    const fresh = await enqueue();
    // After the crashed worker's leases expire: one suspect per claim, beside fresh work.
    const first = await claimAt(61, 'w1');
    expect(first.map((l) => l.task_id).sort()).toEqual([crashed[0], fresh].sort());
    expect((await claimAt(61, 'w2')).map((l) => l.task_id)).toEqual([crashed[1]]);
    expect((await claimAt(61, 'w3')).map((l) => l.task_id)).toEqual([crashed[2]]);
  });

  it("the expiry of a lease that did not name the task its suspect (a dead worker's local queue) is not counted", async () => {
    await endPendingTasks(db);
    const queued = [await enqueue(), await enqueue(), await enqueue()];
    const maxLeases = 2;
    // Claimed together, the worker dying: none of the three was its lease's suspect.
    expect(await claimAt(0, 'queue', maxLeases)).toHaveLength(3);
    // Suspects now, one per claim, and not abandoned: the expiry did not count.
    for (const worker of ['w1', 'w2', 'w3']) expect(await claimAt(61, worker, maxLeases)).toHaveLength(1);
    // Each named suspect's lease expires: counted once, still under max_leases.
    for (const worker of ['x1', 'x2', 'x3']) expect(await claimAt(122, worker, maxLeases)).toHaveLength(1);
    const completed = async () =>
      (
        await db.query(
          `select count(*)::int as n from queues.task_end where outcome = 'abandoned' and task_id = any($1::bigint[])`,
          [queued],
        )
      ).rows[0].n;
    expect(await completed()).toBe(0);
    // Rebuilding the claim index from the facts keeps the counts and the named suspects.
    const snapshot = async () =>
      (
        await db.query(
          `select task_id, lease_count, uncounted_count, suspect_lease, released_count, failed_attempts
             from queues.task_pending where task_id = any($1::bigint[]) order by task_id`,
          [queued],
        )
      ).rows;
    const before = await snapshot();
    expect(before.map((r) => [r.lease_count, r.uncounted_count, r.suspect_lease])).toEqual([
      [3, 1, true],
      [3, 1, true],
      [3, 1, true],
    ]);
    await db.query('select queues.rebuild_task_pending()');
    expect(await snapshot()).toEqual(before);
    // The second counted expiry reaches max_leases: all three are abandoned by one claim.
    // (The rebuild brought back the earlier tests' unfinished tasks: set aside again.)
    await db.query('delete from queues.task_pending where task_id <> all($1::bigint[])', [queued]);
    expect(await claimAt(183, 'next', maxLeases)).toEqual([]);
    expect(await completed()).toBe(3);
  });

  it("a dead worker process's leases are revoked at once: its unnamed tasks are claimable at once, its named suspect waits for its lease's expiry", async () => {
    await endPendingTasks(db);
    const suspect = await enqueue();
    await claimAt(0, 'died-0');
    const others = [await enqueue(), await enqueue()];
    // The suspect comes back named by the claim, beside two fresh tasks.
    const leases = await claimAt(61, 'died-1');
    expect(leases.map((l) => l.task_id).sort()).toEqual([suspect, ...others].sort());
    await expect(db.pool('worker').query('select * from queues.revoke_worker_leases($1)', [''])).rejects.toMatchObject({
      code: '22023',
    });
    const { rows } = await db
      .pool('worker')
      .query('select task_id from queues.revoke_worker_leases($1) order by task_id', ['died-1']);
    expect(rows.map((r) => r.task_id)).toEqual([suspect, ...others].sort());
    // Every lease is fenced at once: the dead process's completions are refused.
    const suspectLease = leases.find((l) => l.task_id === suspect)!;
    const { rows: fenced } = await db
      .pool('worker')
      .query('select result from queues.complete_tasks($1::bigint[], $2::bigint[], array[$3])', [
        [suspect],
        [suspectLease.task_lease_id],
        'succeeded',
      ]);
    expect(fenced[0].result).toBe('lease_lost');
    // The two others are claimable at once (the 60 s leases have not expired), now as
    // suspects, one per claim; the named suspect is not claimable before its lease would
    // have expired, so a task that kills its process does not kill the next one at once.
    const first = await claimAt(62, 'next-1');
    const second = await claimAt(62, 'next-2');
    expect([...first, ...second].map((l) => l.task_id).sort()).toEqual([...others].sort());
    expect(await claimAt(100, 'next-3')).toEqual([]);
    expect((await claimAt(121, 'next-3')).map((l) => l.task_id)).toEqual([suspect]);
    // The others' revocation was not counted; the named suspect's was.
    const { rows: counts } = await db.query(
      `select task_id, lease_count - released_count - failed_attempts - uncounted_count - 1 as counted
         from queues.task_pending where task_id = any($1::bigint[]) order by task_id`,
      [[suspect, ...others]],
    );
    expect(counts.map((c) => [c.task_id, c.counted])).toEqual(
      [suspect, ...others].sort().map((id) => [id, id === suspect ? 1 : 0]),
    );
    // Nothing is left to revoke.
    expect((await db.pool('worker').query('select * from queues.revoke_worker_leases($1)', ['died-1'])).rows).toEqual(
      [],
    );
  });

  it("a dead process's revocation with the tasks it was starting: those are marked started and blamed, the others are not; the rebuild agrees", async () => {
    await endPendingTasks(db);
    const tasks = [await enqueue(), await enqueue(), await enqueue()];
    const leases = await claimAt(0, 'died-s');
    expect(leases.map((l) => l.task_id).sort()).toEqual([...tasks].sort());
    const [ran, queued1, queued2] = tasks;
    const startedAt = Date.UTC(2026, 0, 2, 3, 4, 5, 678);
    // The lists must pair up.
    await expect(
      db.pool('worker').query('select * from queues.revoke_worker_leases($1, $2::bigint[], null)', ['died-s', [ran]]),
    ).rejects.toMatchObject({
      code: '22023',
      message: expect.stringMatching(/^started and started_us must both be null/),
    });
    // A task of another worker in the list is not touched; the dead process's others are revoked unblamed.
    const { rows } = await db
      .pool('worker')
      .query('select task_id from queues.revoke_worker_leases($1, $2::bigint[], $3::bigint[]) order by task_id', [
        'died-s',
        [ran, ran, '999999999'],
        [startedAt * 1000, startedAt * 1000, startedAt * 1000],
      ]);
    expect(rows.map((r) => r.task_id)).toEqual([...tasks].sort());
    const { rows: marks } = await db.query(
      `select task_id, task_lease_id, started_at from queues.task_lease_started where task_id = any($1::bigint[])`,
      [tasks],
    );
    const ranLease = leases.find((l) => l.task_id === ran)!.task_lease_id;
    expect(marks).toEqual([{ task_id: ran, task_lease_id: ranLease, started_at: new Date(startedAt) }]);
    const counted = async () =>
      (
        await db.query(
          `select task_id, lease_count - released_count - failed_attempts - uncounted_count as counted
             from queues.task_pending where task_id = any($1::bigint[]) order by task_id`,
          [tasks],
        )
      ).rows.map((c) => [c.task_id, c.counted]);
    const expected = [...tasks].sort().map((id) => [id, id === ran ? 1 : 0]);
    expect(await counted()).toEqual(expected);
    // The facts say the same: the rebuilt claim index counts the same.
    const before = (
      await db.query('select * from queues.task_pending where task_id = any($1::bigint[]) order by task_id', [tasks])
    ).rows;
    await db.query('select queues.rebuild_task_pending()');
    await db.query('delete from queues.task_pending where task_id <> all($1::bigint[])', [tasks]);
    expect((await db.query('select * from queues.task_pending order by task_id')).rows).toEqual(before);
    // The blamed task is a repeat suspect at once: only a quarantine takes it. The others
    // are first-time suspects (one per claim), unblamed until a lease names them.
    const work = [...(await claimAt(1, 'next-w1', 5, 'no_repeat')), ...(await claimAt(1, 'next-w2', 5, 'no_repeat'))];
    expect(work.map((l) => l.task_id).sort()).toEqual([queued1, queued2].sort());
    expect(await claimAt(1, 'next-w3', 5, 'no_repeat')).toEqual([]);
    expect((await claimAt(1, 'next-q', 5, 'repeat')).map((l) => l.task_id)).toEqual([ran]);
  });

  it('failed attempts of a retried task are not expired leases: no abandonment for them', async () => {
    await endPendingTasks(db);
    const { rows } = await db
      .pool('owner')
      .query(`select queues.enqueue('db_function', '{"n": "retried"}', null, null, null, 6) as id`);
    const id = rows[0].id as string;
    await db.query(
      `insert into internal.setting (name, value) values ('backoff_scale', '0.0001') on conflict (name) do update set value = excluded.value`,
    );
    for (let attempt = 1; attempt <= 5; attempt++) {
      const claimed = (await claimAt(attempt * 10, 'w', 2)).filter((l) => l.task_id === id);
      expect(claimed, `attempt ${attempt}`).toHaveLength(1);
      const { rows: result } = await db
        .pool('worker')
        .query(`select result from queues.complete_tasks($1::bigint[], $2::bigint[], array['failed'])`, [
          [id],
          [claimed[0].task_lease_id],
        ]);
      expect(result[0].result).toBe('retry_scheduled');
    }
    expect((await db.query('select count(*)::int as n from queues.task_end where task_id = $1', [id])).rows[0].n).toBe(
      0,
    );
    await db.query(`delete from internal.setting where name = 'backoff_scale'`);
  });

  it('rejects max_leases outside 1..100', async () => {
    await expect(
      db.pool('worker').query(`select * from queues.claim_tasks('w', 1, null, 60, 0)`),
    ).rejects.toMatchObject({
      code: '22023',
      message: 'max_leases must be between 1 and 100, got 0',
    });
  });
});

describe('rebuild', () => {
  it('rebuilding the claim index keeps heartbeats, releases and counts', async () => {
    await endPendingTasks(db);
    await db.query('truncate queues.task cascade');
    await enqueue();
    await enqueue();
    const leases = await claimAt(0, 'w');
    await extendAt(30, [leases[0]], 300);
    await db
      .pool('worker')
      .query('select * from queues.release_leases($1::bigint[], $2::bigint[])', [
        [leases[1].task_id],
        [leases[1].task_lease_id],
      ]);
    const snapshot = async () =>
      (
        await db.query(
          'select task_id, available_at, current_lease_id, lease_count, released_count from queues.task_pending order by task_id',
        )
      ).rows;
    const before = await snapshot();
    await db.query('select queues.rebuild_task_pending()');
    expect(await snapshot()).toEqual(before);
  });
});
