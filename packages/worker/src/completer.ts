/**
 * The completer: the only part of the worker that records a task's end. Processors
 * return an outcome; the completer writes it, fenced by the task's lease, in batches on a
 * connection of its own, so completions go to the database while the worker claims and
 * runs more tasks. Everything asked for while a round trip is under way goes in the next
 * one (up to MAX_BATCH completions): one queues.settle_tasks statement that also marks
 * the tasks about to start (a task runs only once its start is recorded, so the queue
 * knows which claimed tasks were started; see queues.task_lease_started).
 *
 * Completions with effects (writes that commit with the completion) run in the round
 * trip's transaction, each in a savepoint with its own fenced completion: if its lease was
 * lost, its effects roll back and nothing else is disturbed. The batch commits once.
 *
 * Errors: a transient failure (connection, server) rejects the whole round trip and
 * records nothing (its tasks run again); any other failure of a batch is retried one
 * task at a time, so one bad completion cannot sink the others.
 */
import pg from 'pg';
import { settleTasks, type ClaimedTask, type CompletionResult, type Queryable, type Settlement } from '@org/queue-client';
import { errorMessage, isTransient, storableMessage } from './completion.js';
import type { Logger } from './logger.js';
import type { TaskOutcome, TaskReport } from './processor.js';

/** Most completions per round trip (queues.complete_tasks accepts up to 1000). */
export const MAX_BATCH = 500;

/** What the completer made of an outcome. */
export interface Settled {
  result: CompletionResult;
  /** The outcome recorded (effects may have changed it). */
  report: TaskReport;
}

interface PendingStart {
  task: ClaimedTask;
  resolve: (held: boolean) => void;
  reject: (error: unknown) => void;
}

interface PendingCompletion {
  task: ClaimedTask;
  outcome: TaskOutcome;
  resolve: (settled: Settled) => void;
  reject: (error: unknown) => void;
}

class Lane {
  readonly pool: pg.Pool;
  flushing: Promise<void> | undefined;
  scheduled = false;

  constructor(databaseUrl: string, name: string, log: Logger) {
    this.pool = new pg.Pool({ connectionString: databaseUrl, max: 1, application_name: name, keepAlive: true });
    this.pool.on('error', (error) => log.warn({ event: 'pool_error', err: error.message }, `${name}: connection lost`));
    this.pool.on('connect', (client) => client.on('error', () => {}));
  }
}

export class Completer {
  readonly #log: Logger;
  readonly #ends: Lane;
  readonly #startLane: Lane;
  #starts: PendingStart[] = [];
  #completions: PendingCompletion[] = [];

  constructor(databaseUrl: string, log: Logger) {
    this.#log = log;
    this.#ends = new Lane(databaseUrl, 'queue-worker-completer', log);
    this.#startLane = new Lane(databaseUrl, 'queue-worker-starter', log);
  }

  /** Records that `task` starts; resolves false when its lease is no longer held (it must not run). */
  start(task: ClaimedTask): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.#starts.push({ task, resolve, reject });
      this.#schedule(this.#startLane);
    });
  }

  /** Records the task's outcome (its effects, error rows and completion), fenced by its lease. */
  complete(task: ClaimedTask, outcome: TaskOutcome): Promise<Settled> {
    return new Promise((resolve, reject) => {
      this.#completions.push({ task, outcome, resolve, reject });
      this.#schedule(this.#ends);
    });
  }

  /** Resolves when everything asked for so far is recorded (or failed). */
  async drain(): Promise<void> {
    const busy = () => [this.#ends, this.#startLane].find((l) => l.flushing || l.scheduled);
    while (busy() || this.#starts.length > 0 || this.#completions.length > 0) {
      const lane = busy();
      if (lane?.flushing) await lane.flushing;
      else await new Promise((resolve) => setImmediate(resolve));
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.#ends.pool.end(), this.#startLane.pool.end()]);
  }

  #pending(lane: Lane): boolean {
    return lane === this.#startLane ? this.#starts.length > 0 : this.#completions.length > 0;
  }

  #schedule(lane: Lane): void {
    if (lane.scheduled || lane.flushing) return;
    lane.scheduled = true;
    // Everything asked for in this turn of the event loop goes in one round trip.
    setImmediate(() => {
      lane.scheduled = false;
      lane.flushing = this.#flush(lane).finally(() => {
        lane.flushing = undefined;
        if (this.#pending(lane)) this.#schedule(lane);
      });
    });
  }

  async #flush(lane: Lane): Promise<void> {
    while (this.#pending(lane)) {
      const starts = lane === this.#startLane ? this.#starts.splice(0, 1000) : [];
      const completions = lane === this.#ends ? this.#completions.splice(0, MAX_BATCH) : [];
      try {
        await this.#round(lane, starts, completions);
      } catch (error) {
        if (isTransient(error) || starts.length + completions.length === 1) {
          for (const s of starts) s.reject(error);
          for (const c of completions) c.reject(error);
          continue;
        }
        this.#log.warn({ event: 'completion_batch_failed', err: errorMessage(error) }, 'batch refused; recording one task at a time');
        for (const s of starts) await this.#round(lane, [s], []).catch((e: unknown) => s.reject(e));
        for (const c of completions) await this.#round(lane, [], [c]).catch((e: unknown) => c.reject(e));
      }
    }
  }

  /** One round trip: effects in savepoints, then one settle_tasks statement; one commit. */
  async #round(lane: Lane, starts: PendingStart[], completions: PendingCompletion[]): Promise<void> {
    const client = await lane.pool.connect();
    let broken: Error | undefined;
    const withEffects = completions.filter((c) => c.outcome.effects);
    const plain: { pending: PendingCompletion; outcome: TaskOutcome }[] = completions
      .filter((c) => !c.outcome.effects)
      .map((c) => ({ pending: c, outcome: c.outcome }));
    const settledWithEffects: { pending: PendingCompletion; settled: Settled }[] = [];
    try {
      if (withEffects.length > 0) await client.query('begin');
      for (const c of withEffects) {
        await client.query('savepoint effects');
        let outcome: TaskOutcome = c.outcome;
        try {
          const changed = await c.outcome.effects!(client as Queryable);
          if (changed) outcome = changed;
          const { results } = await settleTasks(client, [], [settlement(c.task, outcome)]);
          const result = results[0]!.result;
          // Refused: the effects must not commit either.
          await client.query(accepted(result) ? 'release savepoint effects' : 'rollback to savepoint effects');
          settledWithEffects.push({ pending: c, settled: { result, report: reportOf(outcome) } });
        } catch (error) {
          if (isTransient(error)) throw error;
          await client.query('rollback to savepoint effects');
          const fallback = c.outcome.onEffectsError?.(error) ?? { outcome: 'failed', error: `effects raised: ${errorMessage(error)}` };
          plain.push({ pending: c, outcome: fallback });
        }
      }
      const { lost, results } = await settleTasks(
        client,
        starts.map((s) => ({ taskId: s.task.taskId, taskLeaseId: s.task.taskLeaseId })),
        plain.map((p) => settlement(p.pending.task, p.outcome)),
      );
      if (withEffects.length > 0) await client.query('commit');
      const lostIds = new Set(lost);
      for (const s of starts) s.resolve(!lostIds.has(s.task.taskId));
      plain.forEach((p, i) => p.pending.resolve({ result: results[i]!.result, report: reportOf(p.outcome) }));
      for (const { pending, settled } of settledWithEffects) pending.resolve(settled);
    } catch (error) {
      if (withEffects.length > 0 && !isTransient(error)) {
        await client.query('rollback').catch((e: unknown) => (broken = e as Error));
      } else if (isTransient(error)) {
        broken = error as Error;
      }
      throw error;
    } finally {
      // A connection that failed (or is in an unknown state) is discarded, not reused.
      client.release(broken);
    }
  }
}

function accepted(result: CompletionResult): boolean {
  return result === 'completed' || result === 'retry_scheduled' || result === 'already_completed';
}

function reportOf(outcome: TaskOutcome): TaskReport {
  const report: TaskReport = { outcome: outcome.outcome };
  if (outcome.error !== undefined) report.error = outcome.error;
  if (outcome.note !== undefined) report.note = outcome.note;
  return report;
}

function settlement(task: ClaimedTask, outcome: TaskOutcome): Settlement {
  const errors = [outcome.error, ...(outcome.extraErrors ?? [])]
    .filter((m): m is string => typeof m === 'string' && m.trim() !== '')
    .map(storableMessage);
  return { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: outcome.outcome, errors };
}
