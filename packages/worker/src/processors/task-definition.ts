/**
 * Tasks defined with @org/tasks' defineTask: the payload is validated with the
 * definition's zod schema, then `run(payload, ctx)` does the work.
 *
 *   payload the schema rejects  failed, final (a validation failure: never retried,
 *                               whatever max_attempts), "invalid fax payload: to: ..."
 *   run resolves                succeeded; an object it returns is kept as the result
 *   run throws                  failed with the message (retried while attempts remain);
 *                               a transient database error interrupts the run instead
 *   run throws a ThrottledError  not a failure: the worker records the throttle and gives
 *                               the task back; it runs again once the throttle ends
 *   timeoutMs passes            failed, "fax timed out after 30000 ms" (retried while
 *                               attempts remain); the run's signal is aborted
 */
import { checkPayload, type AnyTaskDefinition, type TaskRunContext } from '@org/tasks';
import type { JsonObject } from '@org/queue-client';
import { isThrottledError } from '@org/contracts/throttled';
import { errorMessage, isTransient, sanitizeMessage } from '../error-class.js';
import type { Processor, ProcessorRegistry, TaskContext, TaskOutcome } from '../processor.js';

class TaskTimeout extends Error {
  constructor(taskType: string, timeoutMs: number) {
    super(`${taskType} timed out after ${timeoutMs} ms`);
    this.name = 'TaskTimeout';
  }
}

export function taskDefinitionProcessor(definition: AnyTaskDefinition): Processor {
  return {
    name: `task:${definition.name}`,
    async process(context: TaskContext): Promise<TaskOutcome> {
      const { task } = context;
      const checked = checkPayload(definition, task.payload);
      if (!checked.ok) return { outcome: 'failed', error: sanitizeMessage(checked.error.message), final: true };

      const controller = new AbortController();
      const stopRun = () => controller.abort(context.signal.reason);
      if (context.signal.aborted) stopRun();
      else context.signal.addEventListener('abort', stopRun, { once: true });
      let timer: NodeJS.Timeout | undefined;
      const timedOut =
        definition.timeoutMs === undefined
          ? null
          : new Promise<never>((_, reject) => {
              timer = setTimeout(() => {
                const error = new TaskTimeout(definition.name, definition.timeoutMs!);
                controller.abort(error);
                reject(error);
              }, definition.timeoutMs);
            });
      const ctx: TaskRunContext = {
        taskId: task.taskId,
        taskType: task.taskType,
        leaseCount: task.leaseCount,
        maxAttempts: task.maxAttempts,
        signal: controller.signal,
        progress: (done, total, note) => context.progress(done, total, note),
        dependencies: () => context.dependencies(),
        get log() {
          return context.log;
        },
      };
      try {
        const running = Promise.resolve().then(() => definition.run(checked.payload, ctx) as unknown);
        const value = timedOut ? await Promise.race([running, timedOut]) : await running;
        return isJsonObject(value) ? { outcome: 'succeeded', result: value } : { outcome: 'succeeded' };
      } catch (error) {
        if (!(error instanceof TaskTimeout) && isTransient(error)) throw error;
        // Back-pressure: the worker records the throttle and gives the task back (throttle.ts).
        if (isThrottledError(error)) throw error;
        return { outcome: 'failed', error: errorMessage(error) };
      } finally {
        clearTimeout(timer);
        context.signal.removeEventListener('abort', stopRun);
      }
    },
  };
}

function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Registers a processor for each definition; a name already registered (a built-in type) is an error. */
export function registerTaskDefinitions(
  registry: ProcessorRegistry,
  definitions: readonly AnyTaskDefinition[],
): ProcessorRegistry {
  for (const definition of definitions) {
    if (registry.get(definition.name)) {
      throw new Error(
        `task ${definition.name}: a built-in processor already handles this task type; choose another name`,
      );
    }
    registry.register(definition.name, taskDefinitionProcessor(definition));
  }
  return registry;
}
