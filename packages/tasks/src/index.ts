/**
 * @org/tasks: task definitions. One file per task type, exporting a definition:
 *
 *   export default defineTask({
 *     name: 'fax',
 *     payload: z.object({ to: z.string(), pages: z.number().int().positive() }),
 *     maxAttempts: 5,
 *     timeoutMs: 30_000,
 *     run: async ({ to, pages }, ctx) => { ctx.log.info(`faxing ${pages} page(s) to ${to}`); },
 *   });
 *
 * The stock worker (`npm start`, `queue-worker`) loads every definition in the app's task
 * folder (TASKS_DIR, default ./tasks; see ./load.ts) and runs each task of that type with
 * `run`, after validating its payload with the definition's schema. The owner's deploy
 * step registers the types in queues.task_type (`queue-tasks register`, ./cli.ts).
 * `typedEnqueue(definitions)` enqueues with the payload typed by the task type and
 * validated before it reaches the database.
 */
import type { z } from 'zod';
import {
  enqueue,
  QueueError,
  type Id,
  type JsonObject,
  type NewTask,
  type Queryable,
  type TaskDependency,
} from '@org/queue-client';

/** Marks a definition, across copies of this module (a task file may resolve another one). */
export const TASK_DEFINITION: unique symbol = Symbol.for('@org/tasks.definition') as never;

const TASK_TYPE = /^[a-z][a-z0-9_]{0,62}$/;

/** The logger a task gets: pino's, bound to the task (task_id, task_type, worker_id). */
export interface TaskLog {
  debug(message: string): void;
  debug(fields: object, message?: string): void;
  info(message: string): void;
  info(fields: object, message?: string): void;
  warn(message: string): void;
  warn(fields: object, message?: string): void;
  error(message: string): void;
  error(fields: object, message?: string): void;
}

/** What `run` gets beside the payload. */
export interface TaskRunContext {
  taskId: Id;
  taskType: string;
  /** Leases this task has had, this one included (1 on a first run). */
  leaseCount: number;
  /** The task's max_attempts. */
  maxAttempts: number;
  /**
   * Aborted when the run must stop: its `timeoutMs` passed, the task was cancelled (the
   * reason is then a TaskCancelledError of @org/worker), its lease was lost, or shutdown
   * gave up on it. Pass it to fetch() and the like.
   */
  signal: AbortSignal;
  /**
   * Reports how far the run got: `done` out of `total` (left out: unknown) and a note (at
   * most 500 characters), shown on the task page and by `queue tasks show`. Call it as
   * often as you like: at most one report per second is recorded. A bad value throws.
   */
  progress(done: number, total?: number, note?: string): void;
  /**
   * The tasks this one was enqueued to wait for (`dependsOn`), in task id order, each with
   * how it ended and the result it recorded (a task runs only once all succeeded); empty
   * without dependencies. One query per call.
   */
  dependencies(): Promise<TaskDependency[]>;
  log: TaskLog;
}

/** What a run may return: kept as the task's result (queues.task_result), or nothing. */
export type TaskRunResult = JsonObject | void | undefined;

/** What one writes: see defineTask. */
export interface TaskDefinitionInput<Name extends string, Schema extends z.ZodType> {
  /** The task type: a-z, 0-9 and _, starting with a letter, at most 63 characters. */
  name: Name;
  /** Shown on the dashboard (queues.task_type.description). */
  description?: string;
  /** The payload's zod schema, usually z.object({...}): checked at enqueue and before each run. */
  payload: Schema;
  /**
   * Runs allowed (1..100) when a task is enqueued through typedEnqueue without its own
   * maxAttempts. Tasks enqueued otherwise get the queue's default.
   */
  maxAttempts?: number;
  /** A run taking longer fails (and is retried while attempts remain); its signal is aborted. */
  timeoutMs?: number;
  /** Does the work. A throw fails the run with the error's message. */
  run(payload: z.output<Schema>, ctx: TaskRunContext): Promise<TaskRunResult> | TaskRunResult;
}

/** A definition, as defineTask returns it. */
export interface TaskDefinition<Name extends string = string, Schema extends z.ZodType = z.ZodType> extends Readonly<
  TaskDefinitionInput<Name, Schema>
> {
  readonly [TASK_DEFINITION]: true;
}

/** Any definition (what the loader and the worker handle). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the schema's type is each definition's own
export type AnyTaskDefinition = TaskDefinition<string, any>;

/**
 * Defines a task type. Checks the definition at once (an error names the field), so a
 * mistake shows when the worker loads the file, not when a task arrives.
 */
export function defineTask<const Name extends string, Schema extends z.ZodType>(
  input: TaskDefinitionInput<Name, Schema>,
): TaskDefinition<Name, Schema> {
  const problems: string[] = [];
  const where = typeof input?.name === 'string' ? `task ${JSON.stringify(input.name)}` : 'task';
  if (typeof input !== 'object' || input === null) throw new TypeError('defineTask needs an object');
  if (typeof input.name !== 'string' || !TASK_TYPE.test(input.name)) {
    problems.push(
      `name must be a-z, 0-9 and _, starting with a letter, at most 63 characters, got ${JSON.stringify(input.name)}`,
    );
  }
  if (typeof (input.payload as { safeParse?: unknown } | undefined)?.safeParse !== 'function') {
    problems.push('payload must be a zod schema, such as z.object({ ... })');
  }
  if (typeof input.run !== 'function') problems.push('run must be a function (payload, ctx) => ...');
  if (input.description !== undefined && (typeof input.description !== 'string' || input.description.length > 1000)) {
    problems.push('description must be a string of at most 1000 characters');
  }
  if (
    input.maxAttempts !== undefined &&
    !(Number.isInteger(input.maxAttempts) && input.maxAttempts >= 1 && input.maxAttempts <= 100)
  ) {
    problems.push(`maxAttempts must be a whole number from 1 to 100, got ${String(input.maxAttempts)}`);
  }
  if (
    input.timeoutMs !== undefined &&
    !(Number.isInteger(input.timeoutMs) && input.timeoutMs >= 1 && input.timeoutMs <= 2_147_483_647)
  ) {
    problems.push(
      `timeoutMs must be a whole number of milliseconds from 1 to 2147483647, got ${String(input.timeoutMs)}`,
    );
  }
  if (problems.length > 0) throw new TypeError(`invalid ${where}: ${problems.join('; ')}`);
  return Object.freeze({ ...input, [TASK_DEFINITION]: true as const });
}

/** Whether `value` is a definition made by defineTask (of any copy of this package). */
export function isTaskDefinition(value: unknown): value is AnyTaskDefinition {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[TASK_DEFINITION] === true;
}

/** One problem with a payload: where (`to`, `items[2].sku`, `(payload)`), and what. */
export interface PayloadIssue {
  path: string;
  message: string;
}

/**
 * A payload its task type's schema rejects. A QueueError of kind `invalid_input`, like the
 * queue's own refusals; the message names each field: `invalid fax payload: to: ...`.
 */
export class TaskPayloadError extends QueueError {
  readonly taskType: string;
  readonly issues: PayloadIssue[];

  constructor(taskType: string, issues: PayloadIssue[]) {
    super(`invalid ${taskType} payload: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, 'invalid_input');
    this.name = 'TaskPayloadError';
    this.taskType = taskType;
    this.issues = issues;
  }
}

function pathText(path: readonly PropertyKey[]): string {
  let text = '';
  for (const key of path) {
    if (typeof key === 'number') text += `[${key}]`;
    else text += text === '' ? String(key) : `.${String(key)}`;
  }
  return text === '' ? '(payload)' : text;
}

/** Validates a payload with the definition's schema: the parsed payload, or the error naming each field. */
export function checkPayload<D extends AnyTaskDefinition>(
  definition: D,
  payload: unknown,
): { ok: true; payload: z.output<D['payload']> } | { ok: false; error: TaskPayloadError } {
  const parsed = (definition.payload as z.ZodType).safeParse(payload);
  if (parsed.success) return { ok: true, payload: parsed.data as z.output<D['payload']> };
  const issues = parsed.error.issues.map((issue) => ({ path: pathText(issue.path), message: issue.message }));
  return { ok: false, error: new TaskPayloadError(definition.name, issues) };
}

/** The payload a definition accepts at enqueue (its schema's input type). */
export type PayloadOf<D> = D extends TaskDefinition<string, infer S> ? z.input<S> : never;

/** The definition named `T` among `Defs`. */
export type DefinitionNamed<Defs extends readonly AnyTaskDefinition[], T extends string> = Extract<
  Defs[number],
  { readonly name: T }
>;

/** A new task whose payload type follows its task type. */
export type TypedNewTask<Defs extends readonly AnyTaskDefinition[], T extends Defs[number]['name']> = Omit<
  NewTask,
  'taskType' | 'payload'
> & {
  taskType: T;
  payload: PayloadOf<DefinitionNamed<Defs, T>>;
};

/** What typedEnqueue returns. */
export type TypedEnqueue<Defs extends readonly AnyTaskDefinition[]> = <T extends Defs[number]['name']>(
  db: Queryable,
  task: TypedNewTask<Defs, T>,
) => Promise<Id>;

/**
 * An enqueue typed by the app's definitions: the payload's type follows `taskType`, so a
 * wrong payload fails `tsc`, and at run time it is validated with the definition's schema
 * before anything reaches the database (a TaskPayloadError naming the field). The
 * definition's maxAttempts applies when the task names none. Otherwise it is the queue
 * client's enqueue (same options, same transaction rules):
 *
 *   const enqueueTask = typedEnqueue([fax, resize]);
 *   await enqueueTask(app, { taskType: 'fax', payload: { to: '+15550100', pages: 2 } });
 */
export function typedEnqueue<const Defs extends readonly AnyTaskDefinition[]>(definitions: Defs): TypedEnqueue<Defs> {
  const byName = new Map<string, AnyTaskDefinition>();
  for (const definition of definitions) {
    if (!isTaskDefinition(definition)) throw new TypeError('typedEnqueue takes definitions made by defineTask');
    if (byName.has(definition.name)) throw new TypeError(`two definitions of task ${JSON.stringify(definition.name)}`);
    byName.set(definition.name, definition);
  }
  return async (db, task) => {
    const definition = byName.get(task.taskType);
    if (!definition) {
      throw new QueueError(
        `no definition of task type ${JSON.stringify(task.taskType)} among ${[...byName.keys()].join(', ') || 'none'}`,
        'invalid_input',
      );
    }
    const checked = checkPayload(definition, task.payload);
    if (!checked.ok) throw checked.error;
    const { maxAttempts, ...rest } = task;
    return enqueue(db, {
      ...rest,
      taskType: task.taskType,
      // As given: the worker parses it again (defaults and transforms apply there).
      payload: task.payload,
      maxAttempts: maxAttempts ?? definition.maxAttempts,
    });
  };
}

export { registerTasks } from './register.js';
