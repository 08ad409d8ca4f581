/**
 * Runs db_function steps in the database, many per call (queues.run_steps: each step and
 * its completion in a subtransaction of their own, fenced by the lease). Steps started in
 * the same turn of the event loop go together, split into chunks that run in parallel on
 * the worker's pool: a chunk holds about 10 ms of steps, judged from the time steps took
 * so far (one step per call while they are slow, up to 500 while they are fast), so cheap
 * supervisor steps share a round trip and a commit while slow steps keep their
 * parallelism. A call that fails (the connection died) records nothing for its steps: they
 * run again.
 */
import type pg from 'pg';
import { runSteps, type ClaimedTask } from '@org/queue-client';
import type { Settled } from './completer.js';
import type { TaskReport } from './processor.js';

interface PendingStep {
  task: ClaimedTask;
  functionName: string;
  resolve: (settled: Settled) => void;
  reject: (error: unknown) => void;
}

/** Target time of one call, and the most steps in one. */
const CALL_BUDGET_MS = 10;
const MAX_STEPS_PER_CALL = 500;

export class StepRunner {
  #pending: PendingStep[] = [];
  #scheduled = false;
  /** Moving average of a step's time in a call, ms (starts pessimistic: one per call). */
  #stepMs = CALL_BUDGET_MS;

  constructor(private readonly pool: pg.Pool) {}

  run(task: ClaimedTask, functionName: string): Promise<Settled> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ task, functionName, resolve, reject });
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#scheduled = false;
    const size = Math.max(1, Math.min(MAX_STEPS_PER_CALL, Math.floor(CALL_BUDGET_MS / Math.max(this.#stepMs, 0.01))));
    while (this.#pending.length > 0) void this.#call(this.#pending.splice(0, size));
  }

  async #call(steps: PendingStep[]): Promise<void> {
    const started = performance.now();
    try {
      const results = await runSteps(
        this.pool,
        steps.map((s) => ({ taskId: s.task.taskId, taskLeaseId: s.task.taskLeaseId, functionName: s.functionName, payload: s.task.payload })),
      );
      const perStep = (performance.now() - started) / steps.length;
      this.#stepMs = 0.7 * this.#stepMs + 0.3 * perStep;
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
    } catch (error) {
      for (const s of steps) s.reject(error);
    }
  }
}
