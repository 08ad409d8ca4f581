/**
 * The `queue` commands. Every command but `migrate` connects as the api database user
 * (DATABASE_URL, or --database-url) and goes through the same typed queries as the REST
 * API (`Store` of @org/web), so the CLI can do what the API can and nothing more.
 * `migrate` connects as the owner and installs or upgrades the queue's core and business
 * domains (`migrateQueue` of @org/queue-schema, the same as `queue-schema migrate`).
 *
 * Every change (enqueue, cancel, run-now, redrive, pause, resume, schedules enable and
 * disable) is recorded in the audit trail as the API records its own (admin.api_change,
 * method CLI, user `cli:<OS user>`), in the change's transaction: no change without its
 * fact, and a refused change leaves none.
 */
import { randomUUID } from 'node:crypto';
import { userInfo } from 'node:os';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import pg from 'pg';
// The store alone, not the web server (Fastify, the routes): a command starts in a fraction of the time.
import { recordedChange, Store, TASK_STATES, type ActionResult, type ChangeMade } from '@org/web/store';
import { json, record, table, type Io } from './output.js';

/** Exit codes (also in `queue help`). */
export const EXIT = {
  ok: 0,
  /** The database could not be reached, or something unexpected failed. */
  error: 1,
  /** Bad arguments, or input the database refused as invalid (a wrong payload, a bad id). */
  usage: 2,
  /** Not done: no such task or schedule, not allowed, or an action that did not apply to every task named. */
  refused: 3,
} as const;

export const HELP = `queue: operate the task queue from a terminal.

Usage: queue <command> [options]

  status                          counts per task type (scheduled, ready, running, retrying),
                                  pauses, and capacity (tasks per busy worker-hour, hours to drain)
  tasks list [--type T] [--state S] [--limit N] [--before ID]
                                  newest first; S is one of ${TASK_STATES.join(', ')}
  tasks show ID                   one task with its leases, errors, latest progress and results
  enqueue TYPE [--payload JSON] [--scheduled-at ISO] [--priority N] [--max-attempts N] [--resource-key K]
                                  prints the new task's id
  cancel ID... [--reason TEXT]    cancels tasks, pending or running (a running one is aborted by its worker)
  run-now ID...                   runs scheduled or retrying tasks now
  redrive ID...                   enqueues a dead letter again as a new task
  pause TYPE [--reason TEXT]      stops every worker's claims of TYPE
  resume TYPE
  workers                         workers with their heartbeats and tasks in flight
  schedules list
  schedules enable NAME
  schedules disable NAME
  migrate [--domains a,b]         installs or upgrades the queue's core and the business
                                  domains installed before, adding the ones named
                                  (queue-schema migrate; DATABASE_URL is the owner's URL;
                                  DATABASE_WORKER, DATABASE_APP and DATABASE_API name the
                                  database users the migrations grant to)
  help

Options:
  --json                          print JSON instead of a table (every command)
  --database-url URL              instead of DATABASE_URL: the api database user's URL
                                  (queue_api_user), the owner's for migrate

Exit codes:
  0  done
  1  the database could not be reached, or an unexpected error
  2  bad arguments, or input the database refused as invalid
  3  refused: no such task or schedule, not allowed, or an action that did not apply to
     every task named (each task's answer is printed)
`;

class UsageError extends Error {}

const OPTIONS = {
  json: { type: 'boolean' },
  'database-url': { type: 'string' },
  type: { type: 'string' },
  state: { type: 'string' },
  limit: { type: 'string' },
  before: { type: 'string' },
  payload: { type: 'string' },
  'scheduled-at': { type: 'string' },
  priority: { type: 'string' },
  'max-attempts': { type: 'string' },
  'resource-key': { type: 'string' },
  reason: { type: 'string' },
  domains: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} satisfies ParseArgsConfig['options'];

type Options = ReturnType<typeof parse>['values'];

function parse(argv: string[]) {
  try {
    return parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

/** A whole number option or argument in [min, max], or a usage error naming it. */
function whole(name: string, text: string | undefined, min: number, max: number): number | undefined {
  if (text === undefined) return undefined;
  if (!/^-?\d+$/.test(text) || Number(text) < min || Number(text) > max)
    throw new UsageError(`${name} must be a whole number from ${min} to ${max}, got '${text}'`);
  return Number(text);
}

/** Task ids from positional arguments: at least one, each a positive whole number. */
function taskIds(args: string[]): number[] {
  if (args.length === 0) throw new UsageError('name at least one task id');
  return args.map((a) => whole('a task id', a, 1, Number.MAX_SAFE_INTEGER)!);
}

function one(args: string[], what: string): string {
  if (args.length !== 1) throw new UsageError(`expected one ${what}, got ${args.length}`);
  return args[0]!;
}

interface TaskDetail {
  task: Record<string, unknown>;
  leases?: Record<string, unknown>[];
  errors?: Record<string, unknown>[];
  completion?: Record<string, unknown> | null;
  results?: Record<string, unknown>[];
  /** The latest progress report (queues.task_progress), when the run reported any. */
  progress?: Record<string, unknown> | null;
}

/** A change refused by a check inside its transaction: rolled back, no fact, exit 3. */
class Refusal extends Error {}

interface Context {
  store: () => Store;
  /** Runs `run` and records its audit fact in one transaction; resolves to its answer. */
  change: <T>(command: string, action: string, run: (tx: Store) => Promise<ChangeMade<T>>) => Promise<T>;
  options: Options;
  io: Io;
}

/** Prints each task's answer; EXIT.refused unless every one is `expected`. */
function actionAnswers(ctx: Context, results: ActionResult[], expected: string): number {
  ctx.io.stdout(ctx.options.json ? json(results) : table(results as never, Object.keys(results[0] ?? {})));
  return results.every((r) => r.result === expected) ? EXIT.ok : EXIT.refused;
}

const COMMANDS: Record<string, (ctx: Context, args: string[]) => Promise<number>> = {
  async status(ctx, args) {
    if (args.length > 0) throw new UsageError(`status takes no arguments, got '${args.join(' ')}'`);
    const store = ctx.store();
    const [queues, capacity] = await Promise.all([store.queues(), store.capacity()]);
    if (ctx.options.json) ctx.io.stdout(json({ queues, capacity }));
    else
      ctx.io.stdout(
        table(queues, ['task_type', 'scheduled', 'ready', 'running', 'retrying', 'paused', 'workers']) +
          '\n' +
          table(capacity, [
            'task_type',
            'pending_tasks',
            'active_workers',
            'tasks_per_worker_hour',
            'estimated_hours_to_drain',
          ]),
      );
    return EXIT.ok;
  },

  async 'tasks list'(ctx, args) {
    if (args.length > 0) throw new UsageError(`tasks list takes options only, got '${args.join(' ')}'`);
    const state = ctx.options.state;
    if (state !== undefined && !(TASK_STATES as readonly string[]).includes(state))
      throw new UsageError(`--state must be one of ${TASK_STATES.join(', ')}, got '${state}'`);
    const tasks = await ctx.store().listTasks({
      taskType: ctx.options.type,
      state,
      limit: whole('--limit', ctx.options.limit, 1, 500),
      before: whole('--before', ctx.options.before, 1, Number.MAX_SAFE_INTEGER),
    });
    ctx.io.stdout(
      ctx.options.json
        ? json(tasks)
        : table(tasks, ['task_id', 'task_type', 'state', 'priority', 'lease_count', 'enqueued_at', 'completed_at']),
    );
    return EXIT.ok;
  },

  async 'tasks show'(ctx, args) {
    const [taskId] = taskIds([one(args, 'task id')]);
    // admin.get_task: { task, leases, errors, completion }, plus results; no such task
    // raises 23503 (exit 3).
    const detail = (await ctx.store().getTask(taskId!)) as TaskDetail;
    if (ctx.options.json) ctx.io.stdout(json(detail));
    else {
      const parts = [record(detail.task)];
      const list = (title: string, rows: Record<string, unknown>[] | undefined) => {
        if (rows && rows.length > 0) parts.push(`\n${title}:\n${table(rows, Object.keys(rows[0]!))}`);
      };
      list('leases', detail.leases);
      list('errors', detail.errors);
      if (detail.progress) parts.push(`\nprogress:\n${record(detail.progress)}`);
      if (detail.completion) parts.push(`\ncompletion:\n${record(detail.completion)}`);
      list('results', detail.results);
      ctx.io.stdout(parts.join(''));
    }
    return EXIT.ok;
  },

  async enqueue(ctx, args) {
    const taskType = one(args, 'task type');
    let payload: unknown = {};
    if (ctx.options.payload !== undefined) {
      try {
        payload = JSON.parse(ctx.options.payload);
      } catch (error) {
        throw new UsageError(`--payload must be JSON: ${(error as Error).message}`);
      }
      if (typeof payload !== 'object' || payload === null || Array.isArray(payload))
        throw new UsageError('--payload must be a JSON object');
    }
    const scheduledAt = ctx.options['scheduled-at'];
    if (scheduledAt !== undefined && Number.isNaN(Date.parse(scheduledAt)))
      throw new UsageError(`--scheduled-at must be an ISO 8601 time, got '${scheduledAt}'`);
    const task = {
      task_type: taskType,
      payload: payload as Record<string, unknown>,
      scheduled_at: scheduledAt,
      priority: whole('--priority', ctx.options.priority, -1000, 1000),
      max_attempts: whole('--max-attempts', ctx.options['max-attempts'], 1, 100),
      resource_key: ctx.options['resource-key'],
    };
    const taskId = await ctx.change('queue enqueue', 'create_task', async (tx) => {
      const id = await tx.createTask(task);
      // The payload stays out of the audit trail (it may hold personal data), as the API's does.
      const { payload: _payload, ...input } = task;
      return { answer: id, taskIds: [id], taskType, input };
    });
    ctx.io.stdout(ctx.options.json ? json({ task_id: taskId }) : `${taskId}\n`);
    return EXIT.ok;
  },

  async cancel(ctx, args) {
    const ids = taskIds(args);
    const results = await ctx.change('queue cancel', 'cancel_tasks', async (tx) => {
      const answer = await tx.cancel(ids, ctx.options.reason);
      return { answer, taskIds: ids, input: { task_ids: ids, reason: ctx.options.reason } };
    });
    return actionAnswers(ctx, results, 'cancelled');
  },

  async 'run-now'(ctx, args) {
    const ids = taskIds(args);
    const results = await ctx.change('queue run-now', 'run_tasks_now', async (tx) => ({
      answer: await tx.runNow(ids),
      taskIds: ids,
      input: { task_ids: ids },
    }));
    return actionAnswers(ctx, results, 'run_now');
  },

  async redrive(ctx, args) {
    const ids = taskIds(args);
    const results = await ctx.change('queue redrive', 'redrive_tasks', async (tx) => {
      const answer = await tx.redriveMany(ids);
      const made = answer.flatMap((r) => (r.new_task_id ? [r.new_task_id] : []));
      return { answer, taskIds: [...ids, ...made], input: { task_ids: ids } };
    });
    return actionAnswers(ctx, results, 'redriven');
  },

  async pause(ctx, args) {
    const taskType = one(args, 'task type');
    const pauseId = await ctx.change('queue pause', 'pause_task_type', async (tx) => ({
      answer: await tx.pause(taskType, ctx.options.reason),
      taskType,
      input: { reason: ctx.options.reason },
    }));
    ctx.io.stdout(ctx.options.json ? json({ task_type: taskType, pause_id: pauseId }) : `paused ${taskType}\n`);
    return EXIT.ok;
  },

  async resume(ctx, args) {
    const taskType = one(args, 'task type');
    const resumed = await ctx.change('queue resume', 'resume_task_type', async (tx) => ({
      answer: await tx.resume(taskType),
      taskType,
    }));
    ctx.io.stdout(
      ctx.options.json
        ? json({ task_type: taskType, resumed })
        : resumed
          ? `resumed ${taskType}\n`
          : `${taskType} was not paused\n`,
    );
    return EXIT.ok;
  },

  async workers(ctx, args) {
    if (args.length > 0) throw new UsageError(`workers takes no arguments, got '${args.join(' ')}'`);
    const workers = await ctx.store().workers();
    ctx.io.stdout(
      ctx.options.json
        ? json(workers)
        : table(workers, [
            'worker_id',
            'status',
            'task_types',
            'tasks_in_flight',
            'heartbeat_age_seconds',
            'started_at',
          ]),
    );
    return EXIT.ok;
  },

  async 'schedules list'(ctx, args) {
    if (args.length > 0) throw new UsageError(`schedules list takes no arguments, got '${args.join(' ')}'`);
    const schedules = await ctx.store().schedules();
    ctx.io.stdout(
      ctx.options.json
        ? json(schedules)
        : table(schedules, ['name', 'cron', 'task_type', 'enabled', 'last_fire_at', 'next_fire_at']),
    );
    return EXIT.ok;
  },

  async 'schedules enable'(ctx, args) {
    return setSchedule(ctx, one(args, 'schedule name'), true);
  },

  async 'schedules disable'(ctx, args) {
    return setSchedule(ctx, one(args, 'schedule name'), false);
  },
};

async function setSchedule(ctx: Context, name: string, enabled: boolean): Promise<number> {
  const word = enabled ? 'enabled' : 'disabled';
  await ctx.change(`queue schedules ${enabled ? 'enable' : 'disable'}`, `${word.slice(0, -1)}_schedule`, async (tx) => {
    const refusal = await tx.setScheduleEnabled(name, enabled);
    // No such schedule: nothing changed, so no fact (the transaction rolls back).
    if (refusal) throw new Refusal(refusal);
    return { answer: { name, enabled }, scheduleName: name };
  });
  ctx.io.stdout(ctx.options.json ? json({ name, enabled }) : `${word} ${name}\n`);
  return EXIT.ok;
}

async function migrate(env: NodeJS.ProcessEnv, url: string, io: Io, domains?: string): Promise<number> {
  const missing = ['DATABASE_WORKER', 'DATABASE_APP', 'DATABASE_API'].filter((name) => !env[name]);
  if (missing.length > 0)
    throw new UsageError(`set ${missing.join(', ')} (the database user names the migrations grant to)`);
  // Loaded here: the migrator (graphile-migrate) is not needed by the other commands.
  const { migrateQueue, QueueSchemaError } = await import('@org/queue-schema');
  try {
    await migrateQueue({
      connectionString: url,
      roles: { worker: env.DATABASE_WORKER!, app: env.DATABASE_APP!, api: env.DATABASE_API! },
      domains: (domains ?? '')
        .split(',')
        .map((d) => d.trim())
        .filter((d) => d !== ''),
      log: (line) => io.stdout(`${line}\n`),
    });
  } catch (error) {
    if (error instanceof QueueSchemaError) throw new UsageError(error.message);
    throw error;
  }
  io.stdout(`migrated ${redactUrl(url)}\n`);
  return EXIT.ok;
}

/** The URL with its password masked, for output. */
function redactUrl(url: string): string {
  const u = new URL(url);
  if (u.password) u.password = '***';
  return u.toString();
}

/** The exit code for an error the database raised (sql/CONVENTIONS.md errcodes). */
function databaseExit(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return undefined;
  if (code.startsWith('22') || code === '54000') return EXIT.usage;
  if (code === '23503' || code === '42501' || code === '55000' || code === '23505') return EXIT.refused;
  return undefined;
}

/** Runs one command line; resolves to its exit code. */
export async function runCli(argv: string[], env: NodeJS.ProcessEnv, io: Io): Promise<number> {
  let pool: pg.Pool | undefined;
  try {
    const { values: options, positionals } = parse(argv);
    const words = positionals;
    if (options.help || words.length === 0 || words[0] === 'help') {
      io.stdout(HELP);
      return words.length === 0 && !options.help ? EXIT.usage : EXIT.ok;
    }
    // "tasks list", "schedules enable": the longest command the words begin with.
    const two = words.slice(0, 2).join(' ');
    const name = COMMANDS[two] ? two : words[0]!;
    const url = options['database-url'] ?? env.DATABASE_URL;
    if (name === 'migrate') {
      if (words.length > 1) throw new UsageError(`migrate takes no arguments, got '${words.slice(1).join(' ')}'`);
      if (!url) throw new UsageError("set DATABASE_URL (or --database-url) to the owner database user's URL");
      return await migrate(env, url, io, options.domains);
    }
    const command = COMMANDS[name];
    if (!command) {
      const known = [...Object.keys(COMMANDS), 'migrate', 'help'].join(', ');
      throw new UsageError(`unknown command '${words.slice(0, 2).join(' ')}'; commands: ${known}`);
    }
    if (!url) throw new UsageError("set DATABASE_URL (or --database-url) to the api database user's URL");
    const connected = () => (pool ??= new pg.Pool({ connectionString: url, max: 2, application_name: 'queue-cli' }));
    const store = () => new Store(connected());
    const user = `cli:${env.USER ?? env.LOGNAME ?? userInfo().username}`.slice(0, 100);
    const change: Context['change'] = (command, action, run) =>
      recordedChange(
        connected(),
        { userName: user, userLevel: 'operator', requestId: randomUUID(), method: 'CLI', route: command },
        action,
        run,
      );
    return await command({ store, change, options, io }, words.slice(name.split(' ').length));
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr(`queue: ${error.message}\nRun 'queue help' for the commands.\n`);
      return EXIT.usage;
    }
    if (error instanceof Refusal) {
      io.stderr(`queue: ${error.message}\n`);
      return EXIT.refused;
    }
    const exit = databaseExit(error);
    io.stderr(`queue: ${error instanceof Error ? error.message : String(error)}\n`);
    return exit ?? EXIT.error;
  } finally {
    await pool?.end();
  }
}
