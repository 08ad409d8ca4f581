/**
 * Delivery modes of channel tasks (internal.channel_delivery_mode, sql/internal/delivery.sql).
 * Just before a provider call the worker asks internal.start_provider_call, in its own
 * committed statement (for an at-least-once task with a before_handler, the same statement
 * as the handler: internal.run_before_provider_call, HandlerInvoker.callBefore):
 *   at_least_once  nothing is recorded; the call is made (again on a later lease: the
 *                  provider deduplicates on the idempotency key).
 *   at_most_once   the start of the call is recorded under this lease before it is made;
 *                  a later lease that finds a started call without an outcome does not
 *                  call again and fails the task with an "unknown outcome" error instead.
 */
import type { ClaimedTask } from '@org/queue-client';
import { failureOf, type HandlerInvoker, type HandlerResult } from '../handler-invoker.js';

export const START_PROVIDER_CALL = 'internal.start_provider_call';

export type ProviderCallStart = { proceed: true } | { proceed: false; error: string };

/** Records (or checks) the start of the provider call; raises what the database raises. */
export async function startProviderCall(
  invoker: HandlerInvoker,
  task: Pick<ClaimedTask, 'taskId' | 'taskLeaseId'>,
): Promise<ProviderCallStart> {
  return providerCallAnswer(
    await invoker.call(START_PROVIDER_CALL, { task_id: task.taskId, task_lease_id: task.taskLeaseId }),
  );
}

/**
 * The answer of internal.start_provider_call as a decision, whether the worker asked for it
 * alone (startProviderCall) or with the before_handler (HandlerInvoker.callBefore).
 */
export function providerCallAnswer(answer: HandlerResult): ProviderCallStart {
  if (!answer.ok) return { proceed: false, error: answer.error };
  const failure = failureOf(START_PROVIDER_CALL, answer.envelope);
  if (failure) return { proceed: false, error: failure };
  const payload = (answer.envelope as { payload?: { proceed?: unknown; error?: unknown } }).payload;
  if (payload?.proceed === true) return { proceed: true };
  return {
    proceed: false,
    error: typeof payload?.error === 'string' ? payload.error : `${START_PROVIDER_CALL}: no answer`,
  };
}
