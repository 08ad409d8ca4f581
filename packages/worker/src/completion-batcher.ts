/**
 * Completions without an error to record, batched: every completion asked for in the same
 * turn of the event loop goes to the database in one queues.complete_tasks call, so a
 * worker finishing ten tasks at once pays one round trip and one commit, not ten. Each
 * caller still gets its own task's answer (a lost lease rejects only that task).
 */
import type pg from 'pg';
import { completeTasks, type ClaimedTask, type CompletionOutcome, type CompletionResult } from '@org/queue-client';

interface Waiting {
  task: ClaimedTask;
  outcome: CompletionOutcome;
  resolve: (result: CompletionResult) => void;
  reject: (error: unknown) => void;
}

/** Most completions per call (queues.complete_tasks accepts up to 1000). */
const MAX_BATCH = 500;

export class CompletionBatcher {
  #waiting: Waiting[] = [];
  #scheduled = false;

  constructor(private readonly pool: pg.Pool) {}

  complete(task: ClaimedTask, outcome: CompletionOutcome): Promise<CompletionResult> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ task, outcome, resolve, reject });
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => void this.#flush());
      }
    });
  }

  async #flush(): Promise<void> {
    this.#scheduled = false;
    while (this.#waiting.length > 0) {
      const batch = this.#waiting.splice(0, MAX_BATCH);
      try {
        const results = await completeTasks(
          this.pool,
          batch.map((w) => ({ taskId: w.task.taskId, taskLeaseId: w.task.taskLeaseId, outcome: w.outcome })),
        );
        batch.forEach((w, i) => w.resolve(results[i]!.result));
      } catch (error) {
        for (const w of batch) w.reject(error);
      }
    }
  }
}

const batchers = new WeakMap<pg.Pool, CompletionBatcher>();

/** The batcher of a pool (one per pool, made on first use). */
export function batcherFor(pool: pg.Pool): CompletionBatcher {
  let batcher = batchers.get(pool);
  if (!batcher) {
    batcher = new CompletionBatcher(pool);
    batchers.set(pool, batcher);
  }
  return batcher;
}
