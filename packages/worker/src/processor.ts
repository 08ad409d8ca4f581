/**
 * Processors run one claimed task each. The worker picks a processor by task_type from a
 * ProcessorRegistry; apps register their own beside the built-in ones:
 *
 *   registry.register('fax', handlerTaskProcessor(myFaxProvider));
 *
 * A processor MUST complete the task it is given (through `finish`), success or failure:
 * lease expiry is only for crashed workers. The worker completes it as failed if the
 * processor throws.
 */
import type pg from 'pg';
import type { ClaimedTask, CompletionOutcome, JsonObject } from '@org/queue-client';
import type { Logger } from './logger.js';

export interface TaskContext {
  task: ClaimedTask;
  pool: pg.Pool;
  log: Logger;
  /** Aborted when the lease is lost or shutdown gives up on the task. */
  signal: AbortSignal;
}

/** What happened to a task, for logs and metrics. */
export interface TaskReport {
  outcome: CompletionOutcome;
  /** The recorded error, when there was one. */
  error?: string;
  /** A descriptive non-success status or validation message from SQL, logged. */
  note?: string;
  /**
   * A failure no retry can mend (a validation failure): completed 'failed' even when the
   * task has attempts left (max_attempts).
   */
  final?: boolean;
  /** Kept as the run's result (queues.task_result), in the completion's transaction. */
  result?: JsonObject;
}

export interface Processor {
  /** For logs: "db_function", "handler:resend", ... */
  readonly name: string;
  process(context: TaskContext): Promise<TaskReport>;
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
