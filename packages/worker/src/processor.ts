/**
 * Processors run one claimed task each and return what happened; they never record it.
 * The worker hands the result to its completer, which records it (error rows, then the
 * completion, fenced by the lease) in batches on its own connection. The worker picks a
 * processor by task_type from a ProcessorRegistry; apps register their own beside the
 * built-in ones:
 *
 *   registry.register('fax', channelTaskProcessor(myFaxProvider));
 *
 * A processor that throws is recorded as failed ('worker error: ...'), unless the error
 * is a lost connection (the task runs again) or a lost lease (nothing is recorded).
 */
import type pg from 'pg';
import type {
  ClaimedTask,
  HandlerCall,
  CompletionOutcome,
  JsonObject,
  Queryable,
  TaskDependency,
} from '@org/queue-client';
import type { Logger } from './logger.js';

export interface TaskContext {
  task: ClaimedTask;
  /** For reads and for calls outside the completion's transaction (a before_handler). */
  pool: pg.Pool;
  log: Logger;
  /**
   * Aborted when the lease is lost, the task is cancelled (reason: a TaskCancelledError),
   * or shutdown gives up on the task.
   */
  signal: AbortSignal;
  /**
   * Reports how far the run got: `done` out of `total` (left out: unknown) and a note. Call
   * it as often as you like; at most one report per second reaches the database
   * (queues.task_progress, progress.ts). Throws a RangeError for a bad value.
   */
  progress(done: number, total?: number, note?: string): void;
  /**
   * The tasks this one was enqueued to wait for (`dependsOn`), in task id order, each with
   * its outcome and the result it recorded; empty without dependencies (dependencies.ts).
   */
  dependencies(): Promise<TaskDependency[]>;
}

/** What happened to a task, for logs and metrics. */
export interface TaskReport {
  outcome: CompletionOutcome;
  /** The recorded error, when there was one. */
  error?: string;
  /** A descriptive non-success status or validation message from SQL, logged. */
  note?: string;
  /**
   * A failure no retry can mend (a validation failure, outcome 'validation_failed'): final
   * even when the task has attempts left (max_attempts).
   */
  final?: boolean;
  /** Kept as the run's result (queues.task_result), in the completion's transaction. */
  result?: JsonObject;
}

/** What a processor returns: the completion to record, with its error rows. */
export interface TaskOutcome extends TaskReport {
  /** More error rows, recorded after `error`. */
  extraErrors?: string[];
  /**
   * Writes that must commit together with the completion (a processor's own SQL): run by
   * the completer in the completion's transaction, just before the completion. (Channel
   * tasks use `handler`, db_function tasks `step`.) They may return a different outcome. If the
   * completion is refused (the lease was lost) they are rolled back.
   */
  effects?: (tx: Queryable) => Promise<TaskOutcome | void>;
  /**
   * A pure SQL step to run in the database instead of `effects`
   * (internal.run_function(functionName, the task's payload)): many steps run in one
   * queues.run_steps call, each step's writes committing with its completion; the step's
   * envelope decides the outcome recorded (see db-function.ts).
   */
  step?: { functionName: string };
  /**
   * A handler to run with the completion instead of `effects`, in the database in one
   * statement (queues.settle_with_handlers with the round's other handler completions,
   * or queues.settle_with_handler: no transaction open across round trips): its
   * envelope decides the outcome and errors recorded (see HandlerCall).
   */
  handler?: HandlerCall;
  /**
   * The outcome to record instead when `effects` raise (their writes are rolled back).
   * Default: failed, with the error message.
   */
  onEffectsError?: (error: unknown) => TaskOutcome;
}

export interface Processor {
  /** For logs: "db_function", "channel:resend", ... */
  readonly name: string;
  /**
   * Every outcome of this processor is a `step` (or a failure found without I/O, such as a
   * malformed payload): its tasks do nothing outside the database. The worker then starts
   * many of them in one slot and runs their steps in one queues.run_steps call.
   */
  readonly runsSteps?: boolean;
  process(context: TaskContext): Promise<TaskOutcome>;
}

export class ProcessorRegistry {
  readonly #processors = new Map<string, Processor>();

  register(taskType: string, processor: Processor): this {
    if (!/^[a-z][a-z0-9_]{0,62}$/.test(taskType)) throw new Error(`invalid task type ${JSON.stringify(taskType)}`);
    if (this.#processors.has(taskType)) throw new Error(`a processor for ${taskType} is already registered`);
    this.#processors.set(taskType, processor);
    return this;
  }

  get(taskType: string): Processor | undefined {
    return this.#processors.get(taskType);
  }

  taskTypes(): string[] {
    return [...this.#processors.keys()].sort();
  }

  /** The task types a worker with these roles claims (null: all); throws for a role with no processor. */
  claimable(roles: string[] | null): string[] {
    const registered = this.taskTypes();
    const unknown = (roles ?? []).filter((r) => !registered.includes(r));
    if (unknown.length > 0) {
      throw new Error(
        `no processor for role(s) ${unknown.join(', ')}; registered task types: ${registered.join(', ')}`,
      );
    }
    return roles ?? registered;
  }
}
