/**
 * db_function tasks: internal.run_function(payload.db_function, payload).
 *
 * The step runs in the database (queues.run_steps, many steps per call: the worker starts
 * many db_function tasks in one slot, `runsSteps`): its writes and the task's completion
 * commit together, so a pure SQL step happens exactly once: if the lease was lost
 * meanwhile, the completion is refused and the step rolls back. Outcomes, by the envelope
 * the function returns:
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
import type { Processor, TaskContext, TaskOutcome } from '../processor.js';

/** The outcome of a db_function step, or the reason it is not runnable. */
export function dbFunctionStep(task: TaskContext['task']): TaskOutcome {
  const payload = dbFunctionPayload.safeParse(task.payload);
  if (!payload.success) {
    const problem = payload.error.issues.map((i) => `${i.path.join('.') || 'payload'}: ${i.message}`).join('; ');
    return { outcome: 'failed', error: `invalid db_function payload: ${problem}` };
  }
  return { outcome: 'succeeded', step: { functionName: payload.data.db_function } };
}

export function dbFunctionProcessor(): Processor {
  return {
    name: 'db_function',
    runsSteps: true,
    process({ task }: TaskContext): Promise<TaskOutcome> {
      return Promise.resolve(dbFunctionStep(task));
    },
  };
}
