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
 *   validation_failure_message     effects kept, error row, completed 'validation_failed': final,
 *                                  never retried (even with attempts left), not a dead letter
 *   error                          effects kept, error row, completed 'failed'
 *   malformed result / exception   rolled back, then error row and completed 'failed'
 *   transient error (connection,   rolled back, the run is interrupted (counted, the task runs
 *   deadlock, serialization)       again after a backoff, abandoned once it keeps happening)
 *   any other SQLSTATE, 55000      rolled back, then error row and completed 'failed': task
 *   included                       code cannot make the worker believe its lease was lost
 *
 * `"repeat": true` in the payload: work done in short transactions (history maintenance,
 * queues.maintain_history_step). The function is called on the worker's pool, outside the
 * completion's transaction, each call a transaction of its own, again while its
 * envelope's payload says `"more": true` (at most MAX_REPEAT_CALLS calls; the loop stops
 * when the lease is lost or the worker stops), then the task completes: 'succeeded' with
 * `{calls, last}` as its result, or 'failed' with the first envelope that was not a
 * success (an error or malformed; 'validation_failed' for a validation failure). Not exactly once: a call that
 * committed stays committed even if the completion is refused, so such a function must
 * be safe to run again, and twice at once.
 */
import { runFunction, type JsonObject } from '@org/queue-client';
import type { Processor, TaskContext, TaskOutcome } from '../processor.js';
import { contracts } from '../contracts.js';
import { activeTraceparent, traceChild } from '../tracing.js';

/** The most calls of a repeated function per task. */
export const MAX_REPEAT_CALLS = 1000;

/** The outcome of a db_function step, or the reason it is not runnable. */
export async function dbFunctionStep(task: TaskContext['task']): Promise<TaskOutcome> {
  const { dbFunctionPayload } = await contracts();
  const payload = dbFunctionPayload.safeParse(task.payload);
  if (!payload.success) {
    const problem = payload.error.issues.map((i) => `${i.path.join('.') || 'payload'}: ${i.message}`).join('; ');
    return { outcome: 'failed', error: `invalid db_function payload: ${problem}` };
  }
  return { outcome: 'succeeded', step: { functionName: payload.data.db_function } };
}

/**
 * Calls `functionName` again while its envelope says more, each call its own transaction
 * on `pool` (see "repeat" above).
 */
async function repeatCalls(
  { pool, signal }: TaskContext,
  functionName: string,
  payload: JsonObject,
): Promise<TaskOutcome> {
  const { parseEnvelope } = await contracts();
  let calls = 0;
  let last: unknown;
  let note: string | undefined;
  while (calls < MAX_REPEAT_CALLS && !signal.aborted) {
    const result = await traceChild('queue.handler', { 'queue.handler.name': functionName }, () =>
      runFunction(pool, functionName, payload, activeTraceparent()),
    );
    calls++;
    const parsed = parseEnvelope(result);
    if (!parsed.ok) return { outcome: 'failed', error: `${functionName}: ${parsed.error}` };
    const envelope = parsed.envelope;
    if (envelope.outcome === 'error') return { outcome: 'failed', error: `${functionName}: ${envelope.message}` };
    if (envelope.outcome === 'invalid') {
      return {
        outcome: 'validation_failed',
        error: `${functionName}: validation failure: ${envelope.message}`,
        note: envelope.message,
        final: true,
      };
    }
    if (envelope.outcome === 'status') note = `status ${envelope.status}`;
    last = envelope.payload ?? null;
    const more = typeof last === 'object' && last !== null && (last as { more?: unknown }).more === true;
    if (!more) break;
  }
  const outcome: TaskOutcome = { outcome: 'succeeded', result: { success: true, payload: { calls, last } } };
  if (calls >= MAX_REPEAT_CALLS) note = `stopped after ${calls} calls of ${functionName}`;
  if (note !== undefined) outcome.note = note;
  return outcome;
}

export function dbFunctionProcessor(): Processor {
  return {
    name: 'db_function',
    runsSteps: true,
    async process(context: TaskContext): Promise<TaskOutcome> {
      const outcome = await dbFunctionStep(context.task);
      // dbFunctionStep checked the payload: repeat is a boolean when there is a step.
      if (!outcome.step || context.task.payload.repeat !== true) return outcome;
      return repeatCalls(context, outcome.step.functionName, context.task.payload);
    },
  };
}
