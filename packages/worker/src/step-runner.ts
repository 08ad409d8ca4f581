/**
 * Runs db_function steps in the database, many per call (queues.run_steps: each step's
 * writes and its completion commit together or not at all, fenced by the lease).
 *
 * The worker hands over the steps of one slot together (`batch`: the tasks it took from its
 * local queue for that slot, see producer.ts): they go in one call, on one connection. How
 * many a slot takes is `batchSize`: the local queue spread over the slots, or more, up to
 * about CALL_BUDGET_MS of steps at the pace calls had so far, up to MAX_STEPS_PER_CALL. So
 * slow steps keep their parallelism, and cheap ones share a round trip and a commit by the
 * hundred. Steps without a batch (a processor that returns a `step` without declaring
 * `runsSteps`) that are asked for in the same turn of the event loop share calls of the
 * same budget, run in parallel on the worker's pool.
 *
 * A call that fails as a whole (its connection died, the statement timed out) records
 * nothing for its steps; its error tells whether another server process's crash cut it
 * short (crash-notice.ts). A transient failure is every step's (they run again); any other
 * failure of a call of several steps (one step blocked past the statement timeout) sends
 * each of its steps again in a call of its own, so one slow step cannot fail the others.
 */
import type pg from 'pg';
import { runSteps, type ClaimedTask } from '@org/queue-client';
import type { Settled } from './completer.js';
import { noteCrash, noteNotRun } from './crash-notice.js';
import { isTransient } from './error-class.js';
import type { TaskReport } from './processor.js';
import { activeTraceparent } from './tracing.js';

interface PendingStep {
  task: ClaimedTask;
  functionName: string;
  /** The step's span (tracing on): the trace context of the tasks it enqueues. */
  traceparent: string | undefined;
  resolve: (settled: Settled) => void;
  reject: (error: unknown) => void;
}

/** Target time of one call, and the most steps in one call. */
export const CALL_BUDGET_MS = 200;
export const MAX_STEPS_PER_CALL = 500;

export class StepRunner {
  /** Steps asked for in this turn, by batch (undefined: no batch). */
  #pending = new Map<object | undefined, PendingStep[]>();
  #scheduled = false;
  /** Moving average of a step's share of its call's time, ms (starts pessimistic: one per call). */
  #stepMs = CALL_BUDGET_MS;

  constructor(private readonly pool: pg.Pool) {}

  /**
   * How many of `waiting` step tasks one of `slots` slots should take: at least its share,
   * and as many as fit in CALL_BUDGET_MS at the pace of the calls so far.
   */
  batchSize(waiting: number, slots: number): number {
    const byTime = Math.floor(CALL_BUDGET_MS / Math.max(this.#stepMs, 0.01));
    return Math.max(1, Math.min(MAX_STEPS_PER_CALL, waiting, Math.max(Math.ceil(waiting / slots), byTime)));
  }

  /**
   * Runs the step; steps of one `batch` go in one call. With tracing on, the active span
   * (the step's) is the trace context of the tasks the step enqueues (queues.run_steps).
   */
  run(task: ClaimedTask, functionName: string, batch?: object): Promise<Settled> {
    const traceparent = activeTraceparent();
    return new Promise((resolve, reject) => {
      const steps = this.#pending.get(batch);
      const step = { task, functionName, traceparent, resolve, reject };
      if (steps) steps.push(step);
      else this.#pending.set(batch, [step]);
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#scheduled = false;
    const pending = this.#pending;
    this.#pending = new Map();
    for (const [batch, steps] of pending) {
      if (batch !== undefined) {
        for (let i = 0; i < steps.length; i += MAX_STEPS_PER_CALL)
          void this.#call(steps.slice(i, i + MAX_STEPS_PER_CALL));
        continue;
      }
      const size = this.batchSize(steps.length, steps.length);
      for (let i = 0; i < steps.length; i += size) void this.#call(steps.slice(i, i + size));
    }
  }

  async #call(steps: PendingStep[], timed = true): Promise<void> {
    const started = performance.now();
    let results;
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      // No connection: none of the steps ran.
      for (const s of steps) s.reject(noteNotRun(error));
      return;
    }
    try {
      results = await runSteps(
        client,
        steps.map((s) => ({
          taskId: s.task.taskId,
          taskLeaseId: s.task.taskLeaseId,
          functionName: s.functionName,
          payload: s.task.payload,
          ...(s.traceparent === undefined ? {} : { traceparent: s.traceparent }),
        })),
      );
      client.release();
    } catch (error) {
      // Cut short by another server process's crash, or not (see crash-notice.ts).
      noteCrash(error, client);
      client.release(isTransient(error) ? (error as Error) : undefined);
      if (steps.length > 1 && !isTransient(error)) {
        // Nothing of the call was recorded: each step again, alone.
        for (const s of steps) await this.#call([s], false);
        return;
      }
      for (const s of steps) s.reject(error);
      return;
    }
    if (timed) {
      const perStep = (performance.now() - started) / steps.length;
      this.#stepMs = 0.7 * this.#stepMs + 0.3 * perStep;
    }
    steps.forEach((s, i) => {
      const r = results[i]!;
      if (r.result === 'transient') {
        s.reject(Object.assign(new Error(r.error ?? 'step rolled back'), { code: '40001' }));
        return;
      }
      const report: TaskReport = { outcome: r.outcome ?? 'failed' };
      if (r.error !== null) report.error = r.error;
      if (r.note !== null) report.note = r.note;
      s.resolve({ result: r.result, report });
    });
  }
}
