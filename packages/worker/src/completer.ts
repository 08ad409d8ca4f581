/**
 * The completer: the only part of the worker that records a task's end. Processors
 * return an outcome; the completer writes it, fenced by the task's lease, in batches on a
 * connection of its own, so completions go to the database while the worker claims and
 * runs more tasks. Everything asked for while a round trip is under way goes in the next
 * one (up to MAX_BATCH completions): one queues.settle_tasks statement. A task's start
 * is recorded with its completion (its run's start time, which the worker knows): nothing
 * is written when a task starts.
 *
 * Steps (db_function tasks) end in the database: the completer hands them to its step
 * runner (step-runner.ts), which runs many in one queues.run_steps call, each step's
 * writes with its completion in a subtransaction. The completer is thus the one place a
 * task's end is recorded, whatever the task.
 *
 * Completions with effects (writes that commit with the completion) run each in a short
 * transaction of its own with its fenced completion: if its lease was lost, its effects
 * roll back. (One transaction for a whole batch of effects would hold the row locks of
 * its first completions until its last effects ran, and a heartbeat that must extend those
 * leases would wait for it.) Completions with handlers (a channel task's success or
 * error handler) run the handler and the completion together in one statement: all those
 * of a round in one queues.settle_with_handlers (each handler in a subtransaction, one
 * completion statement and one commit for the round; a refused completion commits nothing
 * of its task), a lone one in queues.settle_with_handler. No transaction stays open
 * between round trips. They run on connections of their own (EFFECT_CONNECTIONS) beside
 * the completions with effects: one after another on one connection, each commit's wait
 * for the disk capped a worker at about 90 email completions a second.
 *
 * Errors: a transient failure (connection, server) rejects the whole round trip and
 * records nothing (its tasks run again); a statement PostgreSQL refused because a
 * migration changed its result columns (nothing ran) is sent again once, prepared anew;
 * any other failure of a batch is retried one task at a time, so one bad completion
 * cannot sink the others.
 */
import pg from 'pg';
import {
  QueueError,
  isResultTypeChange,
  recordTaskResult,
  settleTasks,
  settleWithHandler,
  settleWithHandlers,
  type ClaimedTask,
  type CompletionResult,
  type Settlement,
} from '@org/queue-client';
import { errorMessage, isTransient, sanitizeMessage } from './error-class.js';
import { noteCrash, watchCrashNotice } from './crash-notice.js';
import type { Logger } from './logger.js';
import type { TaskOutcome, TaskReport } from './processor.js';
import { StepRunner } from './step-runner.js';
import { activeTraceparent } from './tracing.js';

/** Most completions per round trip (queues.complete_tasks accepts up to 1000). */
export const MAX_BATCH = 500;
/**
 * The most handler completions in one queues.settle_with_handlers statement: each runs in a
 * subtransaction, and past PostgreSQL's 64 cached per backend every snapshot taken while
 * the transaction runs reads pg_subtrans.
 */
export const MAX_HANDLERS_PER_STATEMENT = 50;
/** Connections that record completions with effects side by side, each its own transaction. */
export const EFFECT_CONNECTIONS = 4;

/** What the completer made of an outcome. */
export interface Settled {
  result: CompletionResult;
  /** The outcome recorded (effects may have changed it). */
  report: TaskReport;
}

/**
 * Who is told how a completion went: the executor, which ends the run there and then
 * (executor.ts), or the resolvers of the promise `complete` returns. A completion waits
 * for its round trip (a few ms, with hundreds of others), so it holds only its task, its
 * outcome and these two references: no promise and no closures per task.
 */
export interface CompletionSink<R> {
  settled(run: R, settled: Settled): void;
  failed(run: R, error: unknown): void;
}

class PendingCompletion {
  readonly task: ClaimedTask;
  readonly outcome: TaskOutcome;
  /** When the run started (Date.now() ms); undefined when it did not run in the worker. */
  readonly startedAt: number | undefined;
  /** The span the completion was asked for in (tracing on): the context of what its handler enqueues. */
  readonly traceparent: string | undefined;
  readonly #sink: CompletionSink<unknown>;
  readonly #run: unknown;
  /** Answered (its effects committed): never recorded again, even if its round fails later. */
  answered = false;

  constructor(
    task: ClaimedTask,
    outcome: TaskOutcome,
    startedAt: number | undefined,
    sink: CompletionSink<unknown>,
    run: unknown,
  ) {
    this.task = task;
    this.outcome = outcome;
    this.startedAt = startedAt;
    this.traceparent = activeTraceparent();
    this.#sink = sink;
    this.#run = run;
  }

  resolve(settled: Settled): void {
    this.#sink.settled(this.#run, settled);
  }

  reject(error: unknown): void {
    this.#sink.failed(this.#run, error);
  }
}

/** The sink of `complete`: the run is the promise's resolvers. */
const PROMISE_SINK: CompletionSink<{ resolve: (settled: Settled) => void; reject: (error: unknown) => void }> = {
  settled: (run, settled) => run.resolve(settled),
  failed: (run, error) => run.reject(error),
};

class Lane {
  readonly pool: pg.Pool;
  flushing: Promise<void> | undefined;
  scheduled = false;

  constructor(databaseUrl: string, name: string, log: Logger, statementTimeoutMs: number, connections = 1) {
    this.pool = new pg.Pool({
      connectionString: databaseUrl,
      max: connections,
      application_name: name,
      keepAlive: true,
      statement_timeout: statementTimeoutMs,
      // A lane's few connections stay open while the worker is idle (the driver closes an
      // idle one after 10 s by default): the first completion after a quiet spell would
      // otherwise wait for a new connection and plan its statements again, about 40 ms
      // (tools/bench/probes/after-idle.mjs).
      idleTimeoutMillis: 0,
    });
    this.pool.on('error', (error) => log.warn({ event: 'pool_error', err: error.message }, `${name}: connection lost`));
    this.pool.on('connect', (client) => {
      client.on('error', () => {});
      watchCrashNotice(client);
    });
  }
}

export class Completer {
  readonly #log: Logger;
  readonly #ends: Lane;
  /** The connections of completions with effects (EFFECT_CONNECTIONS). */
  readonly #effects: pg.Pool;
  readonly #steps: StepRunner;
  #completions: PendingCompletion[] = [];

  /**
   * `stepPool`: the connections steps run on (the worker's: a step holds one while it runs
   * in the database); default, the completer's own connections for effects.
   */
  constructor(databaseUrl: string, log: Logger, statementTimeoutMs = 300_000, options: { stepPool?: pg.Pool } = {}) {
    this.#log = log;
    this.#ends = new Lane(databaseUrl, 'queue-worker-completer', log, statementTimeoutMs);
    this.#effects = new Lane(databaseUrl, 'queue-worker-effects', log, statementTimeoutMs, EFFECT_CONNECTIONS).pool;
    this.#steps = new StepRunner(options.stepPool ?? this.#effects);
  }

  /** How many of `waiting` step tasks one of `slots` slots should take (StepRunner.batchSize). */
  stepBatchSize(waiting: number, slots: number): number {
    return this.#steps.batchSize(waiting, slots);
  }

  /**
   * Records the task's outcome (its effects, error rows and completion, with `startedAt`,
   * when its run started, Date.now() ms), fenced by its lease; a step's outcome runs the
   * step (see StepRunner), with the other steps of `stepBatch`.
   */
  complete(task: ClaimedTask, outcome: TaskOutcome, startedAt?: number, stepBatch?: object): Promise<Settled> {
    // A step ends in the database, with its run (steps of one `stepBatch` in one call).
    if (outcome.step) return this.#steps.run(task, outcome.step.functionName, stepBatch);
    return new Promise((resolve, reject) => this.record(task, outcome, startedAt, PROMISE_SINK, { resolve, reject }));
  }

  /**
   * As `complete` for an outcome that is not a step, answered through `sink` with `run`
   * (in the round that recorded it, not in a later microtask): `sink.settled` with what
   * the completer made of the outcome, or `sink.failed`.
   */
  record<R>(
    task: ClaimedTask,
    outcome: TaskOutcome,
    startedAt: number | undefined,
    sink: CompletionSink<R>,
    run: R,
  ): void {
    this.#completions.push(new PendingCompletion(task, outcome, startedAt, sink, run));
    this.#schedule(this.#ends);
  }

  /** Resolves when everything asked for so far is recorded (or failed). */
  async drain(): Promise<void> {
    const lane = this.#ends;
    while (lane.flushing !== undefined || lane.scheduled || this.#completions.length > 0) {
      if (lane.flushing) await lane.flushing;
      else await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /**
   * Opens the completions' connection before the first round needs it, so the first
   * tasks' completions do not wait for a new connection. (Not a completion: a call that
   * the one-lease statement of queues.complete_tasks cannot decide would also plan the
   * general statement, which a drain never runs.) A failure is only logged: the first
   * round connects again.
   */
  async warm(): Promise<void> {
    try {
      const client = await this.#ends.pool.connect();
      client.release();
    } catch (error) {
      this.#log.warn(
        { event: 'completer_warm_failed', err: errorMessage(error) },
        'could not open the completions connection',
      );
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.#ends.pool.end(), this.#effects.end()]);
  }

  #pending(): boolean {
    return this.#completions.length > 0;
  }

  #schedule(lane: Lane): void {
    if (lane.scheduled || lane.flushing) return;
    lane.scheduled = true;
    // Everything asked for in this turn of the event loop goes in one round trip.
    setImmediate(() => {
      lane.scheduled = false;
      lane.flushing = this.#flush(lane).finally(() => {
        lane.flushing = undefined;
        if (this.#pending()) this.#schedule(lane);
      });
    });
  }

  async #flush(lane: Lane): Promise<void> {
    while (this.#pending()) {
      const completions = this.#completions.splice(0, MAX_BATCH);
      try {
        await this.#round(lane, completions);
      } catch (error) {
        if (isResultTypeChange(error)) {
          // A migration changed a statement's result columns, and PostgreSQL refused the
          // statement this connection had prepared, before it ran: the round again, its
          // statements prepared anew (see queue-client's prepared.ts), rather than
          // interrupting tasks that succeeded.
          const left = completions.filter((c) => !c.answered);
          await this.#round(lane, left).catch((again: unknown) => {
            for (const c of left.filter((x) => !x.answered)) c.reject(again);
          });
          continue;
        }
        if (isTransient(error) || completions.length === 1) {
          for (const c of completions) c.reject(error);
          continue;
        }
        this.#log.warn(
          { event: 'completion_batch_failed', err: errorMessage(error) },
          'batch refused; recording one task at a time',
        );
        for (const c of completions.filter((x) => !x.answered))
          await this.#round(lane, [c]).catch((e: unknown) => c.reject(e));
      }
    }
  }

  /**
   * One completion with effects: its effects, its result and its fenced completion in one
   * transaction on `client`, committed only if the completion is accepted. Effects that
   * raise roll back, and the task's failure joins `plain`.
   */
  async #withEffects(client: pg.PoolClient, c: PendingCompletion, plain: PlainCompletions): Promise<void> {
    await client.query('begin');
    let outcome: TaskOutcome = c.outcome;
    try {
      if (c.outcome.effects) {
        const changed = await c.outcome.effects(client);
        if (changed) outcome = changed;
      }
      const kept = outcome.result ?? c.outcome.result;
      if (kept) {
        // Fenced like the completion, and recorded before it: only the current lease
        // records a result; a lost lease refuses the completion and rolls back.
        try {
          await recordTaskResult(client, { taskId: c.task.taskId, taskLeaseId: c.task.taskLeaseId, result: kept });
        } catch (error) {
          if (error instanceof QueueError && error.kind === 'lease_lost') {
            await client.query('rollback');
            c.answered = true;
            c.resolve({ result: 'lease_lost', report: reportOf(outcome) });
            return;
          }
          throw error;
        }
      }
      const { result } = (await settleTasks(client, [settlement(c, outcome)]))[0]!;
      // Refused: the effects must not commit either.
      await client.query(accepted(result) ? 'commit' : 'rollback');
      c.answered = true;
      c.resolve({ result, report: reportOf(outcome) });
    } catch (error) {
      if (isTransient(error)) throw error;
      await client.query('rollback');
      const fallback = c.outcome.onEffectsError?.(error) ?? {
        outcome: 'failed',
        error: `effects raised: ${errorMessage(error)}`,
      };
      plain.add(c, fallback);
    }
  }

  /**
   * One completion with its handler, in one statement on `client`
   * (queues.settle_with_handler): the handler's writes and the fenced completion commit
   * together or not at all, and no transaction stays open between round trips. A failure
   * of the statement itself (not of the handler, which it records) fails the task.
   */
  async #withHandler(client: pg.PoolClient, c: PendingCompletion, plain: PlainCompletions): Promise<void> {
    const handler = c.outcome.handler!;
    try {
      const { result, outcome, errors } = await settleWithHandler(
        client,
        {
          ...settlement(c, c.outcome),
          taskLeaseId: c.task.taskLeaseId,
          outcome: handlerOutcome(c),
        },
        handler,
        c.traceparent,
      );
      c.answered = true;
      const report: TaskReport = { outcome };
      if (errors[0] !== undefined) report.error = errors[0];
      c.resolve({ result, report });
    } catch (error) {
      if (isTransient(error)) throw error;
      plain.add(c, {
        outcome: 'failed',
        error: `${handler.functionName} with the completion raised: ${errorMessage(error)}`,
      });
    }
  }

  /**
   * The completions with handlers of a round, on one connection of their own: one
   * statement for all of them (queues.settle_with_handlers: each handler in a
   * subtransaction, one completion statement, one commit), or queues.settle_with_handler
   * for a single one. A statement that fails as a whole for another reason than a
   * transient one sends each completion again in a statement of its own, so one bad
   * completion cannot fail the others.
   */
  async #withHandlers(completions: PendingCompletion[], plain: PlainCompletions): Promise<void> {
    const client = await this.#effects.connect();
    let lost: Error | undefined;
    try {
      if (completions.length === 1) {
        await this.#withHandler(client, completions[0]!, plain);
        return;
      }
      let answers;
      try {
        answers = await settleWithHandlers(
          client,
          completions.map((c) => ({
            completion: { ...settlement(c, c.outcome), taskLeaseId: c.task.taskLeaseId, outcome: handlerOutcome(c) },
            handler: c.outcome.handler!,
            ...(c.traceparent === undefined ? {} : { traceparent: c.traceparent }),
          })),
        );
      } catch (error) {
        if (isTransient(error)) throw error;
        for (const c of completions) await this.#withHandler(client, c, plain);
        return;
      }
      completions.forEach((c, i) => {
        const { result, outcome, errors } = answers[i]!;
        c.answered = true;
        if (result === 'transient') {
          // Its handler met a serialization failure or a deadlock: nothing recorded, it runs again.
          c.reject(Object.assign(new Error(errors[0] ?? 'handler rolled back'), { code: '40001' }));
          return;
        }
        const report: TaskReport = { outcome: outcome ?? handlerOutcome(c) };
        if (errors[0] !== undefined) report.error = errors[0];
        c.resolve({ result, report });
      });
    } catch (error) {
      noteCrash(error, client);
      // Whatever state the connection is in, it is not reused.
      lost = error as Error;
      throw error;
    } finally {
      client.release(lost);
    }
  }

  /**
   * One round: completions with effects (side by side, each its own transaction), then one
   * settle_tasks statement for the rest.
   */
  async #round(lane: Lane, completions: PendingCompletion[]): Promise<void> {
    const client = await lane.pool.connect();
    let broken: Error | undefined;
    // A result to keep (queues.task_result) is recorded in the completion's transaction.
    const ownTransaction = (c: PendingCompletion) => c.outcome.handler || c.outcome.effects || c.outcome.result;
    const withEffects = completions.filter(ownTransaction);
    const plain = new PlainCompletions();
    for (const c of completions) if (!ownTransaction(c)) plain.add(c);
    try {
      // Each on its own transaction, EFFECT_CONNECTIONS at a time (one connection would
      // pay every commit's wait for the disk one after another).
      // Completions with handlers: one statement for all of them, beside the others.
      const handled = withEffects.filter((c) => c.outcome.handler);
      const queue = withEffects.filter((c) => !c.outcome.handler);
      const lanes = Array.from({ length: Math.min(EFFECT_CONNECTIONS, queue.length) }, async () => {
        const effectsClient = await this.#effects.connect();
        let lost: Error | undefined;
        try {
          for (let c = queue.shift(); c !== undefined; c = queue.shift()) {
            await this.#withEffects(effectsClient, c, plain);
          }
        } catch (error) {
          noteCrash(error, effectsClient);
          // Whatever state the connection is in, it is not reused.
          lost = error as Error;
          throw error;
        } finally {
          effectsClient.release(lost);
        }
      });
      if (handled.length > 0)
        lanes.push(
          (async () => {
            // A subtransaction per handler: statements of at most MAX_HANDLERS_PER_STATEMENT.
            for (let i = 0; i < handled.length; i += MAX_HANDLERS_PER_STATEMENT)
              await this.#withHandlers(handled.slice(i, i + MAX_HANDLERS_PER_STATEMENT), plain);
          })(),
        );
      // Every lane ends before the round goes on or fails: a completion still in flight
      // is answered by its own lane, never also rejected with the round.
      const failed = (await Promise.allSettled(lanes)).find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
      const { pending } = plain;
      const results = await settleTasks(
        client,
        pending.map((c) => settlement(c, plain.outcomeOf(c))),
      );
      pending.forEach((c, i) => c.resolve({ result: results[i]!.result, report: reportOf(plain.outcomeOf(c)) }));
    } catch (error) {
      noteCrash(error, client);
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

/**
 * The completions a round records in its one settle_tasks statement: those without effects
 * or a handler, and those whose effects or handler raised, with the failure each records
 * instead of its outcome.
 */
class PlainCompletions {
  readonly pending: PendingCompletion[] = [];
  #instead: Map<PendingCompletion, TaskOutcome> | undefined;

  add(c: PendingCompletion, instead?: TaskOutcome): void {
    this.pending.push(c);
    if (instead) (this.#instead ??= new Map()).set(c, instead);
  }

  /** The outcome `c` records. */
  outcomeOf(c: PendingCompletion): TaskOutcome {
    return this.#instead?.get(c) ?? c.outcome;
  }
}

/** Effects commit only when this very call completed the task or scheduled its retry. */
function accepted(result: CompletionResult): boolean {
  return result === 'completed' || result === 'retry_scheduled';
}

/** The outcome a handler completes its task with. */
function handlerOutcome(c: PendingCompletion): 'succeeded' | 'failed' | 'validation_failed' {
  return c.outcome.outcome === 'succeeded' || c.outcome.outcome === 'validation_failed' ? c.outcome.outcome : 'failed';
}

const NO_ERRORS: string[] = [];

function reportOf(outcome: TaskOutcome): TaskReport {
  const report: TaskReport = { outcome: outcome.outcome };
  if (outcome.error !== undefined) report.error = outcome.error;
  if (outcome.note !== undefined) report.note = outcome.note;
  return report;
}

function settlement({ task, startedAt }: PendingCompletion, outcome: TaskOutcome): Settlement {
  // Most outcomes carry no error: no arrays made for them.
  const errors =
    outcome.error === undefined && outcome.extraErrors === undefined
      ? NO_ERRORS
      : [outcome.error, ...(outcome.extraErrors ?? [])]
          .filter((m): m is string => typeof m === 'string' && m.trim() !== '')
          .map(sanitizeMessage);
  const settlement: Settlement = {
    taskId: task.taskId,
    taskLeaseId: task.taskLeaseId,
    outcome: outcome.outcome,
    errors,
  };
  if (startedAt !== undefined) settlement.startedAt = new Date(startedAt);
  // A failure no retry can mend: no retry even with attempts left.
  if (outcome.final) settlement.retry = false;
  return settlement;
}
