// The worker registry, stale leases and their recovery.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

describe('worker registry', () => {
  it('heartbeats upsert the worker; a clean stop is recorded', async () => {
    const worker = db.pool('worker');
    await worker.query(`select queues.record_worker_heartbeat('w-a', array['email', 'sms'])`);
    await worker.query(`select queues.record_worker_heartbeat('w-a', array['email'])`);
    await worker.query(`select queues.record_worker_stopped('w-a')`);
    const { rows } = await db.query(
      `select task_types, stopped_at is not null as stopped from queues.worker where worker_id = 'w-a'`,
    );
    expect(rows).toEqual([{ task_types: ['email'], stopped: true }]);
    await expect(worker.query(`select queues.record_worker_heartbeat('', array['email'])`)).rejects.toMatchObject({
      code: '22023',
    });
    await expect(worker.query(`select queues.record_worker_heartbeat('w-b', '{}')`)).rejects.toMatchObject({
      code: '22023',
    });
  });

  it('leases of a worker silent for longer than the threshold are stale, and recovery revokes them', async () => {
    const app = db.pool('owner'); // db_function is enqueued by the owner's SQL only
    const worker = db.pool('worker');
    const [dead, alive] = await Promise.all([
      app.query(`select queues.enqueue('db_function', '{"n": 1}') as id`),
      app.query(`select queues.enqueue('db_function', '{"n": 2}') as id`),
    ]).then((r) => r.map((x) => x.rows[0].id as string));
    await worker.query(`select queues.record_worker_heartbeat('dead-worker', array['db_function'])`);
    await worker.query(`select queues.record_worker_heartbeat('live-worker', array['db_function'])`);
    const [deadLease] = (
      await worker.query(`select task_id, task_lease_id from queues.claim_tasks('dead-worker', 1, null, 3600)`)
    ).rows;
    const [liveLease] = (
      await worker.query(`select task_id, task_lease_id from queues.claim_tasks('live-worker', 1, null, 3600)`)
    ).rows;
    expect([deadLease.task_id, liveLease.task_id].sort()).toEqual([dead, alive].sort());
    // The dead worker was last seen 15 minutes ago.
    await db.query(
      `update queues.worker set last_seen_at = now() - interval '15 minutes' where worker_id = 'dead-worker'`,
    );
    const stale = await db.query('select task_id, worker_id from queues.stale_lease');
    expect(stale.rows).toEqual([{ task_id: deadLease.task_id, worker_id: 'dead-worker' }]);

    const recovered = await db.query('select * from queues.recover_stale_leases()');
    expect(recovered.rows).toEqual([
      { task_id: deadLease.task_id, task_lease_id: deadLease.task_lease_id, worker_id: 'dead-worker' },
    ]);
    // Claimable at once, though its hour-long lease has not expired; the live one is not.
    const next = await worker.query(`select task_id from queues.claim_tasks('rescuer', 10)`);
    expect(next.rows).toEqual([{ task_id: deadLease.task_id }]);
    // The revoked worker is fenced off.
    await expect(
      worker.query('select queues.complete_task($1, $2)', [deadLease.task_id, deadLease.task_lease_id]),
    ).rejects.toMatchObject({ code: '55000' });
    await expect(
      worker.query('select queues.fail_task($1, $2, $3)', [deadLease.task_id, 'late', deadLease.task_lease_id]),
    ).rejects.toMatchObject({ code: '55000' });
    expect((await db.query('select count(*)::int as n from queues.task_lease_revocation')).rows[0].n).toBe(1);
    expect((await db.query('select * from queues.recover_stale_leases()')).rows).toEqual([]);
  });

  it('rejects a bad threshold', async () => {
    await expect(db.query('select * from queues.recover_stale_leases(0)')).rejects.toMatchObject({ code: '22023' });
  });
});
