/**
 * Cancelled runs. A task cancelled while this worker runs it (queues.cancel_tasks,
 * admin.cancel_tasks: it ends `cancelled` at once) drops out of the heartbeat's answer like
 * any lost lease; the worker then asks which of its lost tasks were cancelled, and aborts
 * those runs' signals with a TaskCancelledError carrying the reason, so the processor can
 * tell a cancel from a lease taken over (`ctx.signal.reason`). Nothing of the run is
 * recorded: its completion would be refused (lease_lost).
 */
import type pg from 'pg';
import { cancelledTasks, type ClaimedTask } from '@org/queue-client';
import { errorMessage } from './error-class.js';
import type { Logger } from './logger.js';

/** The reason a cancelled run's signal is aborted with. */
export class TaskCancelledError extends Error {
  readonly taskId: string;
  /** The cancel's reason ('' when none was given). */
  readonly reason: string;

  constructor(taskId: string, reason: string) {
    super(reason === '' ? `task ${taskId} was cancelled` : `task ${taskId} was cancelled: ${reason}`);
    this.name = 'TaskCancelledError';
    this.taskId = taskId;
    this.reason = reason;
  }
}

/**
 * The abort reason for each task whose lease the heartbeat found lost: a
 * TaskCancelledError for a cancelled one, `lease lost` for the others (also when the
 * question fails: the run stops either way).
 */
export async function lostLeaseReasons(
  pool: pg.Pool,
  tasks: ClaimedTask[],
  log: Logger,
): Promise<Map<ClaimedTask, Error>> {
  const reasons = new Map<ClaimedTask, Error>();
  let cancelled = new Map<string, string>();
  try {
    const rows = await cancelledTasks(
      pool,
      tasks.slice(0, 1000).map((t) => t.taskId),
    );
    cancelled = new Map(rows.map((r) => [r.taskId, r.reason]));
  } catch (error) {
    log.warn({ event: 'cancel_lookup_failed', err: errorMessage(error) }, 'could not ask why leases were lost');
  }
  for (const task of tasks) {
    const reason = cancelled.get(task.taskId);
    reasons.set(task, reason === undefined ? new Error('lease lost') : new TaskCancelledError(task.taskId, reason));
  }
  return reasons;
}
