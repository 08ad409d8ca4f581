/** The worker registry: workers report in on every heartbeat tick, and when they stop. */
import { workerHeartbeat, workerStopped } from './queries/worker.queries.js';
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
