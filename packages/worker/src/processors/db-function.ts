/**
 * db_function tasks: internal.run_function(payload.db_function, payload).
 *
 * The function's effects and the task's completion commit in one transaction, so a pure
 * SQL step happens exactly once: if the lease was lost meanwhile, the completion is
 * refused and everything rolls back. Outcomes, by the envelope the function returns:
 *   success / status "succeeded"   completed 'succeeded'
 *   other status                   completed 'succeeded', the status logged (descriptive, not fatal)
 *   validation_failure_message     effects kept, error row, completed 'failed' (non-retriable)
 *   error                          effects kept, error row, completed 'failed'
 *   malformed result / exception   rolled back, then error row and completed 'failed'
 *   connection failure             rolled back, nothing recorded: the task runs again
 */
import { dbFunctionPayload } from '@org/handler-types';
import { runFunction, withTransaction } from '@org/queue-client';
import { parseEnvelope } from '@org/handler-types';
import { errorMessage, finish, isLeaseLost, isTransient, LeaseLostError, recordCompletion } from '../completion.js';
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
          const result = await traceStep('queue.handler', { 'queue.handler.name': name }, () => runFunction(tx, name, task.payload));
          const parsed = parseEnvelope(result);
          if (!parsed.ok) throw new RollBack(`${name}: ${parsed.error}`);
          const envelope = parsed.envelope;
          switch (envelope.outcome) {
            case 'succeeded':
              return recordCompletion(tx, task, { outcome: 'succeeded' });
            case 'status':
              return recordCompletion(tx, task, { outcome: 'succeeded', note: `status ${envelope.status}` });
            case 'invalid':
              return recordCompletion(tx, task, {
                outcome: 'failed',
                error: `${name}: validation failure: ${envelope.message}`,
                note: envelope.message,
              });
            case 'error':
              return recordCompletion(tx, task, { outcome: 'failed', error: `${name}: ${envelope.message}` });
          }
        });
      } catch (error) {
        if (isLeaseLost(error)) throw error instanceof LeaseLostError ? error : new LeaseLostError(task);
        // The connection failed, not the step: nothing is recorded, the task runs again.
        if (isTransient(error)) throw error;
        // Rolled back: record why, in a transaction of its own.
        const message = error instanceof RollBack ? error.message : `${name} raised: ${errorMessage(error)}`;
        return finish(pool, task, { outcome: 'failed', error: message });
      }
    },
  };
}
