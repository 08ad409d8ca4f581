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
 * at once. Returns how many were revoked.
 */
export async function revokeWorkerLeases(db: Queryable, workerId: string): Promise<number> {
  return (await mapErrors(workerRevokeLeases.run({ workerId }, db))).length;
}
