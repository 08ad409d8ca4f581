// Tasks in every state, made through the queue's own functions (as the owner), for the
// tests that need a queue with rows: the migration lock check and the legacy upgrade.
import type pg from 'pg';

export interface SeededQueue {
  /** task id -> the state the seed left it in */
  states: Record<
    string,
    'pending' | 'scheduled' | 'leased' | 'heartbeated' | 'released' | 'succeeded' | 'dead-lettered' | 'errored'
  >;
}

/**
 * Enqueues eight db_function tasks (one scheduled a day ahead), claims five and leaves
 * them succeeded, failed for good (a dead letter), leased with an error reported,
 * heartbeated, and released; registers the worker. Every hot queue table gets rows.
 */
export async function seedQueue(client: pg.ClientBase): Promise<SeededQueue> {
  const ids: string[] = [];
  for (let i = 0; i < 8; i++) {
    const { rows } = await client.query<{ id: string }>(
      `select queues.enqueue('db_function', jsonb_build_object('db_function', 'internal.noop', 'n', $1::int),
                             case when $1::int = 7 then now() + interval '1 day' end, $2::int, $3::text, $4::int)::text as id`,
      [i, 10 - i, i === 2 ? `seed:${i}` : null, i === 3 ? 3 : null],
    );
    ids.push(rows[0].id);
  }
  const { rows: claimed } = await client.query<{ task_id: string; task_lease_id: string }>(
    `select task_id::text, task_lease_id::text from queues.claim_tasks('seed-worker', 5, array['db_function'], 300, 5) order by task_id`,
  );
  if (claimed.length !== 5) throw new Error(`the seed claimed ${claimed.length} tasks, not 5`);
  const [done, dead, errored, heartbeated, released] = claimed as [
    { task_id: string; task_lease_id: string },
    ...{ task_id: string; task_lease_id: string }[],
  ];
  await client.query(`select queues.complete_task($1, $2, 'succeeded')`, [done.task_id, done.task_lease_id]);
  await client.query(`select queues.complete_task($1, $2, 'failed')`, [dead.task_id, dead.task_lease_id]);
  await client.query(`select queues.fail_task($1, 'seed: provider refused', $2)`, [
    errored.task_id,
    errored.task_lease_id,
  ]);
  await client.query(`select * from queues.extend_leases(array[$1::bigint], array[$2::bigint], 600)`, [
    heartbeated.task_id,
    heartbeated.task_lease_id,
  ]);
  await client.query(`select * from queues.release_leases(array[$1::bigint], array[$2::bigint])`, [
    released.task_id,
    released.task_lease_id,
  ]);
  await client.query(`select queues.record_worker_heartbeat('seed-worker', array['db_function'])`);

  const states: SeededQueue['states'] = {};
  for (const id of ids) states[id] = id === ids[7] ? 'scheduled' : 'pending';
  states[done.task_id] = 'succeeded';
  states[dead.task_id] = 'dead-lettered';
  states[errored.task_id] = 'errored';
  states[heartbeated.task_id] = 'heartbeated';
  states[released.task_id] = 'released';
  return { states };
}

/** Each task's facts, in task order: what the upgrade must keep. */
export async function queueFacts(client: pg.ClientBase): Promise<unknown[]> {
  // A task's end: queues.task_end where it exists (both shapes of an end); a database of a
  // release before completion rounds has only queues.task_completed.
  // A task's leases: queues.task_leases where it exists (a lease per claim, and per-task
  // leases written before); a database of a release before it has only queues.task_lease.
  const { rows: ends } = await client.query<{ table: string; leases: string; using: string }>(
    `select case when to_regclass('queues.task_end') is null then 'queues.task_completed'
                 else 'queues.task_end' end as table,
            case when to_regclass('queues.task_leases') is null then 'queues.task_lease'
                 else 'queues.task_leases' end as leases,
            case when to_regclass('queues.task_leases') is null then 'task_lease_id'
                 else 'task_id, task_lease_id' end as using`,
  );
  const { rows } = await client.query(
    `select t.task_id::text, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
            (select c.outcome from ${ends[0].table} c where c.task_id = t.task_id) as outcome,
            (select count(*)::int from ${ends[0].leases} l where l.task_id = t.task_id) as leases,
            (select count(*)::int from queues.error e where e.task_id = t.task_id) as errors,
            (select count(*)::int from queues.task_lease_extension x join ${ends[0].leases} l using (${ends[0].using})
              where l.task_id = t.task_id) as extensions,
            (select count(*)::int from queues.task_lease_release r join ${ends[0].leases} l using (${ends[0].using})
              where l.task_id = t.task_id) as releases,
            exists (select 1 from queues.task_pending p where p.task_id = t.task_id) as pending,
            exists (select 1 from queues.dead_letter d where d.task_id = t.task_id) as dead_letter
       from queues.task t order by t.task_id`,
  );
  return rows;
}
