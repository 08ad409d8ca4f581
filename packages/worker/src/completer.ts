/**
 * The completer: the only part of the worker that records a task's end. Processors
 * return an outcome; the completer writes it, fenced by the task's lease, in batches on a
 * connection of its own, so completions go to the database while the worker claims and
 * runs more tasks. Everything asked for while a round trip is under way goes in the next
 * one (up to MAX_BATCH completions): one queues.settle_tasks statement that also marks
 * the tasks about to start (a task runs only once its start is recorded, so the queue
 * knows which claimed tasks were started; see queues.task_lease_started).
 *
 * Steps (db_function tasks) of a round run in the database in one queues.run_steps call,
 * each with its completion in a subtransaction.
 *
 * Completions with effects (writes that commit with the completion) run each in a short
 * transaction of its own with its fenced completion: if its lease was lost, its effects
 * roll back. (One transaction for a whole batch of effects would hold the row locks of
 * its first completions until its last effects ran, and a heartbeat that must extend those
 * leases would wait for it.)
 *
 * Errors: a transient failure (connection, server) rejects the whole round trip and
 * records nothing (its tasks run again); any other failure of a batch is retried one
 * task at a time, so one bad completion cannot sink the others.
 */
import pg from 'pg';
import { runSteps, settleTasks, type ClaimedTask, type CompletionResult, type Queryable, type Settlement } from '@org/queue-client';
import { errorMessage, isTransient, sanitizeMessage } from './completion.js';
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
  /** Answered (its effects committed): never recorded again, even if its round fails later. */
  answered?: boolean;
  resolve: (settled: Settled) => void;
  reject: (error: unknown) => void;
}

class Lane {
  readonly pool: pg.Pool;
  flushing: Promise<void> | undefined;
  scheduled = false;

  constructor(databaseUrl: string, name: string, log: Logger, statementTimeoutMs: number) {
    this.pool = new pg.Pool({
      connectionString: databaseUrl,
      max: 1,
      application_name: name,
      keepAlive: true,
      statement_timeout: statementTimeoutMs,
    });
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

  constructor(databaseUrl: string, log: Logger, statementTimeoutMs = 300_000) {
    this.#log = log;
    this.#ends = new Lane(databaseUrl, 'queue-worker-completer', log, statementTimeoutMs);
    this.#startLane = new Lane(databaseUrl, 'queue-worker-starter', log, statementTimeoutMs);
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
        for (const c of completions.filter((x) => !x.answered)) await this.#round(lane, [], [c]).catch((e: unknown) => c.reject(e));
      }
    }
  }

  /** One round trip: effects in savepoints, then one settle_tasks statement; one commit. */
  async #round(lane: Lane, starts: PendingStart[], completions: PendingCompletion[]): Promise<void> {
    const client = await lane.pool.connect();
    let broken: Error | undefined;
    const steps = completions.filter((c) => c.outcome.step);
    const withEffects = completions.filter((c) => !c.outcome.step && c.outcome.effects);
    const plain: { pending: PendingCompletion; outcome: TaskOutcome }[] = completions
      .filter((c) => !c.outcome.step && !c.outcome.effects)
      .map((c) => ({ pending: c, outcome: c.outcome }));
    const ranSteps: { pending: PendingCompletion; settled?: Settled; transient?: Error }[] = [];
    try {
      for (const c of withEffects) {
        await client.query('begin');
        let outcome: TaskOutcome = c.outcome;
        try {
          const changed = await c.outcome.effects!(client as Queryable);
          if (changed) outcome = changed;
          const { results } = await settleTasks(client, [], [settlement(c.task, outcome)]);
          const result = results[0]!.result;
          // Refused: the effects must not commit either.
          await client.query(accepted(result) ? 'commit' : 'rollback');
          c.answered = true;
          c.resolve({ result, report: reportOf(outcome) });
        } catch (error) {
          if (isTransient(error)) throw error;
          await client.query('rollback');
          const fallback = c.outcome.onEffectsError?.(error) ?? { outcome: 'failed', error: `effects raised: ${errorMessage(error)}` };
          plain.push({ pending: c, outcome: fallback });
        }
      }
      if (steps.length > 0) {
        const results = await runSteps(
          client,
          steps.map((c) => ({
            taskId: c.task.taskId,
            taskLeaseId: c.task.taskLeaseId,
            functionName: c.outcome.step!.functionName,
            payload: c.task.payload,
          })),
        );
        steps.forEach((c, i) => {
          const r = results[i]!;
          if (r.result === 'transient') {
            ranSteps.push({ pending: c, transient: Object.assign(new Error(r.error ?? 'step rolled back'), { code: '40001' }) });
            return;
          }
          const report: TaskReport = { outcome: r.outcome ?? c.outcome.outcome };
          if (r.error !== null) report.error = r.error;
          if (r.note !== null) report.note = r.note;
          ranSteps.push({ pending: c, settled: { result: r.result, report } });
        });
        // Committed with the call: answered now, whatever happens to the rest of the round.
        for (const { pending, settled, transient } of ranSteps.splice(0)) {
          pending.answered = true;
          if (settled) pending.resolve(settled);
          else pending.reject(transient);
        }
      }
      const { lost, results } = await settleTasks(
        client,
        starts.map((s) => ({ taskId: s.task.taskId, taskLeaseId: s.task.taskLeaseId })),
        plain.map((p) => settlement(p.pending.task, p.outcome)),
      );
      const lostIds = new Set(lost);
      for (const s of starts) s.resolve(!lostIds.has(s.task.taskId));
      plain.forEach((p, i) => p.pending.resolve({ result: results[i]!.result, report: reportOf(p.outcome) }));
      for (const { pending, settled, transient } of ranSteps) {
        if (settled) pending.resolve(settled);
        else pending.reject(transient);
      }
    } catch (error) {
      if (isTransient(error)) {
        broken = error as Error;
      } else {
        // Whatever was left open is rolled back (already-committed effects stay).
        await client.query('rollback').catch((e: unknown) => (broken = e as Error));
      }
      throw error;
    } finally {
      // A connection that failed (or is in an unknown state) is discarded, not reused.
      client.release(broken);
    }
  }
}

/** Effects commit only when this very call completed the task or scheduled its retry. */
function accepted(result: CompletionResult): boolean {
  return result === 'completed' || result === 'retry_scheduled';
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
    .map(sanitizeMessage);
  const settlement: Settlement = { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: outcome.outcome, errors };
  // A failure no retry can mend: no retry even with attempts left.
  if (outcome.final) settlement.retry = false;
  return settlement;
}
