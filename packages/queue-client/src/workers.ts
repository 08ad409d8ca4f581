/** The worker registry: workers report in on every heartbeat tick, and when they stop. */
import { workerHeartbeat, workerRevokeLeases, workerStopped } from './queries/worker.queries.js';
import type { Queryable } from './connection.js';
import { mapErrors } from './errors.js';

/**
 * Records that `workerId` is alive and claims `taskTypes`, heartbeating every
 * `heartbeatIntervalMs` (stale recovery waits three intervals before taking it for dead).
 */
export async function recordWorkerHeartbeat(
  db: Queryable,
  workerId: string,
  taskTypes: string[],
  heartbeatIntervalMs?: number,
): Promise<void> {
  await mapErrors(workerHeartbeat.run({ workerId, taskTypes, heartbeatIntervalMs }, db));
}

/** Records that `workerId` stopped cleanly (so it is not taken for dead). */
export async function recordWorkerStopped(db: Queryable, workerId: string): Promise<void> {
  await mapErrors(workerStopped.run({ workerId }, db));
}

/**
 * Revokes every lease `workerId` still holds (its process died): the tasks are claimable
 * at once. `started`: the tasks the process said it was starting before it started them,
 * with when (ms since the epoch); those it still held are marked started and blamed for
 * the death (queues.revoke_worker_leases). Omitted: not known. Returns how many were revoked.
 */
export async function revokeWorkerLeases(
  db: Queryable,
  workerId: string,
  started?: ReadonlyMap<string, number>,
): Promise<number> {
  const ids = started ? [...started.keys()] : null;
  const us = started ? [...started.values()].map((ms) => String(Math.round(ms * 1000))) : null;
  return (await mapErrors(workerRevokeLeases.run({ workerId, started: ids, startedUs: us }, db))).length;
}
