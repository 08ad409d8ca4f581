/**
 * db_function tasks: internal.run_function(payload.db_function, payload).
 *
 * The function's effects and the task's completion commit in one transaction, so a pure
 * SQL step happens exactly once: if the lease was lost meanwhile, the completion is
 * refused and everything rolls back. Outcomes, by the envelope the function returns:
 *   success / status "succeeded"   completed 'succeeded'
 *   other status                   completed 'succeeded', the status logged (descriptive, not fatal)
 *   validation_failure_message     effects kept, error row, completed 'failed', never retried
 *                                  (even with attempts left)
 *   error                          effects kept, error row, completed 'failed'
 *   malformed result / exception   rolled back, then error row and completed 'failed'
 *   transient error (connection,   rolled back, the run is interrupted (counted, the task runs
 *   deadlock, serialization)       again after a backoff, abandoned once it keeps happening)
 *   any other SQLSTATE, 55000      rolled back, then error row and completed 'failed': task
 *   included                       code cannot make the worker believe its lease was lost
 */
import { dbFunctionPayload } from '@org/handler-types';
import { runFunction, withTransaction, type JsonObject } from '@org/queue-client';
import { parseEnvelope } from '@org/handler-types';
import { finish, recordCompletion } from '../completion.js';
import { classifyError, errorMessage } from '../error-class.js';
import { traceStep } from '../tracing.js';
import type { Processor, TaskContext, TaskReport } from '../processor.js';

class RollBack extends Error {}

export function dbFunctionProcessor(): Processor {
  return {
    name: 'db_function',
    async process({ task, pool }: TaskContext): Promise<TaskReport> {
      const payload = dbFunctionPayload.safeParse(task.payload);
      if (!payload.success) {
        const problem = payload.error.issues.map((i) => `${i.path.join('.') || 'payload'}: ${i.message}`).join('; ');
        return finish(pool, task, { outcome: 'failed', error: `invalid db_function payload: ${problem}` });
      }
      const name = payload.data.db_function;
      try {
        return await withTransaction(pool, async (tx) => {
          const result = await traceStep('queue.handler', { 'queue.handler.name': name }, () =>
            runFunction(tx, name, task.payload),
          );
          const parsed = parseEnvelope(result);
          if (!parsed.ok) throw new RollBack(`${name}: ${parsed.error}`);
          const envelope = parsed.envelope;
          // The function's envelope is kept as the run's result (queues.task_result).
          const kept = result as JsonObject;
          switch (envelope.outcome) {
            case 'succeeded':
              return recordCompletion(tx, task, { outcome: 'succeeded', result: kept });
            case 'status':
              return recordCompletion(tx, task, {
                outcome: 'succeeded',
                note: `status ${envelope.status}`,
                result: kept,
              });
            case 'invalid':
              return recordCompletion(tx, task, {
                outcome: 'failed',
                error: `${name}: validation failure: ${envelope.message}`,
                note: envelope.message,
                final: true,
                result: kept,
              });
            case 'error':
              return recordCompletion(tx, task, {
                outcome: 'failed',
                error: `${name}: ${envelope.message}`,
                result: kept,
              });
          }
        });
      } catch (error) {
        // Lease lost (the queue said so), or the run was cut short (the worker interrupts it).
        if (classifyError(error) !== 'task') throw error;
        // Rolled back: record why, in a transaction of its own.
        const message = error instanceof RollBack ? error.message : `${name} raised: ${errorMessage(error)}`;
        return finish(pool, task, { outcome: 'failed', error: message });
      }
    },
  };
}
