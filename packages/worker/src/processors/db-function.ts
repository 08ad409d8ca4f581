/**
 * db_function tasks: internal.run_function(payload.db_function, payload).
 *
 * The step runs as the completion's effects, so its writes and the task's completion
 * commit in one transaction and a pure SQL step happens exactly once: if the lease was
 * lost meanwhile, the completion is refused and the step rolls back. Outcomes, by the
 * envelope the function returns:
 *   success / status "succeeded"   completed 'succeeded'
 *   other status                   completed 'succeeded', the status logged (descriptive, not fatal)
 *   validation_failure_message     effects kept, error row, completed 'failed' (non-retriable)
 *   error                          effects kept, error row, completed 'failed'
 *   malformed result / exception   rolled back, then error row and completed 'failed'
 *   connection failure             rolled back, nothing recorded: the task runs again
 */
import { dbFunctionPayload, parseEnvelope } from '@org/handler-types';
import { runFunction } from '@org/queue-client';
import { errorMessage } from '../completion.js';
import type { Processor, TaskContext, TaskOutcome } from '../processor.js';

class RollBack extends Error {}

/** The outcome of a db_function step, or the reason it is not runnable. */
export function dbFunctionStep(task: TaskContext['task']): TaskOutcome {
  const payload = dbFunctionPayload.safeParse(task.payload);
  if (!payload.success) {
    const problem = payload.error.issues.map((i) => `${i.path.join('.') || 'payload'}: ${i.message}`).join('; ');
    return { outcome: 'failed', error: `invalid db_function payload: ${problem}` };
  }
  const name = payload.data.db_function;
  return {
    outcome: 'succeeded',
    async effects(tx): Promise<TaskOutcome> {
      const parsed = parseEnvelope(await runFunction(tx, name, task.payload));
      if (!parsed.ok) throw new RollBack(`${name}: ${parsed.error}`);
      const envelope = parsed.envelope;
      switch (envelope.outcome) {
        case 'succeeded':
          return { outcome: 'succeeded' };
        case 'status':
          return { outcome: 'succeeded', note: `status ${envelope.status}` };
        case 'invalid':
          return { outcome: 'failed', error: `${name}: validation failure: ${envelope.message}`, note: envelope.message };
        case 'error':
          return { outcome: 'failed', error: `${name}: ${envelope.message}` };
      }
    },
    // Rolled back: record why.
    onEffectsError: (error) => ({
      outcome: 'failed',
      error: error instanceof RollBack ? error.message : `${name} raised: ${errorMessage(error)}`,
    }),
  };
}

export function dbFunctionProcessor(): Processor {
  return {
    name: 'db_function',
    async process({ task }: TaskContext): Promise<TaskOutcome> {
      return dbFunctionStep(task);
    },
  };
}
