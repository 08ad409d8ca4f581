/**
 * A task's logger (`task_id`, `task_type`, `task_lease_id` bound), made only when a line
 * is written at an enabled level or a processor uses it otherwise.
 *
 * The worker gives every task its own child logger. Made eagerly, that is a pino child
 * per task (its bindings serialized, redacted and kept while the task runs) even when the
 * level drops every line the task would write (LOG_LEVEL=warn and a task that succeeds);
 * with thousands of tasks a second that garbage and the objects held across garbage
 * collections raise the worker's resident memory. Here a call at a disabled level costs
 * nothing, and anything else (a line at an enabled level, `child`, `bindings`, `level`,
 * ...) goes to the real child, made on first use.
 */
import type { ClaimedTask } from '@org/queue-client';
import type { Logger } from './logger.js';

const LEVELS = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace']);
const noop = (): void => {};

interface Lazy {
  parent: Logger;
  task: ClaimedTask;
  child: Logger | undefined;
}

function real(lazy: Lazy): Logger {
  lazy.child ??= lazy.parent.child({
    task_id: lazy.task.taskId,
    task_type: lazy.task.taskType,
    task_lease_id: lazy.task.taskLeaseId,
  });
  return lazy.child;
}

const handler: ProxyHandler<Lazy> = {
  get(lazy, property) {
    if (typeof property === 'string' && LEVELS.has(property) && !lazy.child && !lazy.parent.isLevelEnabled(property)) {
      return noop;
    }
    const child = real(lazy);
    const value: unknown = Reflect.get(child, property, child);
    return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(child) : value;
  },
  set(lazy, property, value) {
    return Reflect.set(real(lazy), property, value);
  },
  has(lazy, property) {
    return Reflect.has(real(lazy), property);
  },
};

/** `parent.child({ task_id, task_type, task_lease_id })`, made on first use. */
export function taskLogger(parent: Logger, task: ClaimedTask): Logger {
  return new Proxy<Lazy>({ parent, task, child: undefined }, handler) as unknown as Logger;
}
