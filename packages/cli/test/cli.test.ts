// `queue`, the built binary, run as a child process against a real test database: each
// command's output, its effect in the database, and its exit code for good input, bad
// arguments, input the database refuses, and actions that do not apply.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `queue args...` with `env` (PATH only, plus what is given); never rejects. */
function queue(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8' },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

let db: TestDatabase;
let api: Record<string, string>;
beforeAll(async () => {
  db = await createTestDatabase();
  api = { DATABASE_URL: db.url('api') };
  await db.query(
    `insert into queues.task_type (task_type, description) values ('cli_test', 'for the CLI test'), ('cli_dead', 'dead letters')`,
  );
});
afterAll(async () => {
  await db?.drop();
});

const ids = async (sql: string, params: unknown[] = []) =>
  (await db.query<{ id: string }>(sql, params)).rows.map((r) => Number(r.id));

async function enqueue(extra: string[] = []): Promise<number> {
  const run = await queue(['enqueue', 'cli_test', '--payload', '{"n": 1}', '--json', ...extra], api);
  expect(run.code, run.stderr).toBe(0);
  return JSON.parse(run.stdout).task_id;
}

describe('queue', () => {
  it('help: every command listed, exit 0; no command: the help and exit 2; an unknown command: exit 2 naming it', async () => {
    const help = await queue(['help']);
    expect(help.code).toBe(0);
    for (const command of ['status', 'tasks list', 'tasks show', 'enqueue', 'cancel', 'redrive', 'pause', 'resume'])
      expect(help.stdout).toContain(command);
    expect(help.stdout).toMatch(/Exit codes:/);
    expect((await queue([])).code).toBe(2);
    const unknown = await queue(['launch'], api);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command 'launch'/);
    const option = await queue(['status', '--colour'], api);
    expect(option.code).toBe(2);
    expect(option.stderr).toMatch(/--colour/);
  });

  it('a command loads the store, not the web server nor the pgtyped parser', async () => {
    // The packages a run of a command loaded, by the process's module cache at its exit.
    const probe = `
      import { createRequire } from 'node:module';
      process.argv = [process.argv[0], ${JSON.stringify(CLI)}, 'tasks', 'list'];
      process.on('exit', () => {
        const names = Object.keys(createRequire(${JSON.stringify(CLI)}).cache);
        const loaded = ['fastify', 'antlr4ts', '@pgtyped/parser', 'pg'].filter((p) =>
          names.some((n) => n.includes('/node_modules/' + p + '/')),
        );
        process.stderr.write(' loaded ' + JSON.stringify(loaded));
      });
      await import(${JSON.stringify(CLI)});
    `;
    const run = await new Promise<Run>((resolve) =>
      execFile(
        process.execPath,
        ['--input-type=module', '-e', probe],
        { env: { PATH: process.env.PATH ?? '' }, encoding: 'utf8' },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stdout, stderr }),
      ),
    );
    // (no database URL: exit 2, after the command's modules loaded)
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('loaded ["pg"]');
  });

  it('without a database URL: exit 2 saying what to set; an unreachable database: exit 1', async () => {
    const missing = await queue(['status']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/set DATABASE_URL/);
    const down = await queue(['status'], { DATABASE_URL: 'postgres://nobody:x@127.0.0.1:1/nothing' });
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/ECONNREFUSED/);
  });

  it('enqueue: prints the id of a task with the payload and options given', async () => {
    const run = await queue(
      ['enqueue', 'cli_test', '--payload', '{"to": "a"}', '--priority', '7', '--max-attempts', '3'],
      api,
    );
    expect(run.code, run.stderr).toBe(0);
    const id = Number(run.stdout.trim());
    const { rows } = await db.query(`select payload, priority, max_attempts from queues.task where task_id = $1`, [id]);
    expect(rows).toEqual([{ payload: { to: 'a' }, priority: 7, max_attempts: 3 }]);
  });

  it('enqueue refuses bad arguments (exit 2), a worker-only type (exit 3) and an unknown type, and writes nothing', async () => {
    const before = await ids(`select count(*) as id from queues.task`);
    for (const args of [
      ['enqueue', 'cli_test', '--payload', '{not json'],
      ['enqueue', 'cli_test', '--payload', '[1, 2]'],
      ['enqueue', 'cli_test', '--priority', 'high'],
      ['enqueue', 'cli_test', '--priority', '5000'],
      ['enqueue', 'cli_test', '--scheduled-at', 'tomorrow'],
      ['enqueue'],
    ]) {
      const run = await queue(args, api);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toMatch(/^queue: /);
    }
    const internal = await queue(['enqueue', 'email', '--payload', '{}'], api);
    expect(internal.code).toBe(3);
    expect(internal.stderr).toMatch(/email/);
    const unknown = await queue(['enqueue', 'no_such_type'], api);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/no_such_type/);
    expect(await ids(`select count(*) as id from queues.task`)).toEqual(before);
  });

  it('tasks list and tasks show: the task with its state; a bad state exit 2; a missing task exit 3', async () => {
    const id = await enqueue();
    const list = await queue(['tasks', 'list', '--type', 'cli_test', '--state', 'ready', '--json'], api);
    expect(list.code, list.stderr).toBe(0);
    const listed = JSON.parse(list.stdout) as { task_id: number; state: string }[];
    expect(listed.find((t) => t.task_id === id)?.state).toBe('ready');
    expect(listed.every((t) => t.state === 'ready')).toBe(true);
    const text = await queue(['tasks', 'list', '--type', 'cli_test'], api);
    expect(text.stdout.split('\n')[0]).toMatch(/^TASK_ID\s+TASK_TYPE\s+STATE/);
    expect(text.stdout).toMatch(new RegExp(`^${id}\\s+cli_test\\s+ready`, 'm'));

    const show = await queue(['tasks', 'show', String(id), '--json'], api);
    expect(show.code, show.stderr).toBe(0);
    expect(JSON.parse(show.stdout)).toMatchObject({
      task: { task_id: id, task_type: 'cli_test', payload: { n: 1 }, state: 'ready' },
      leases: [],
      completion: null,
    });
    const shown = await queue(['tasks', 'show', String(id)], api);
    expect(shown.stdout).toMatch(new RegExp(`^task_id\\s+${id}$`, 'm'));
    expect(shown.stdout).toMatch(/^state\s+ready$/m);
    const missing = await queue(['tasks', 'show', '987654321'], api);
    expect(missing.code).toBe(3);
    expect(missing.stderr).toMatch(/task 987654321 does not exist/);
    expect((await queue(['tasks', 'list', '--state', 'pending'], api)).code).toBe(2);
    expect((await queue(['tasks', 'show', 'x1'], api)).code).toBe(2);
  });

  it('cancel: cancels a pending task (exit 0); a second cancel answers already_completed with exit 3', async () => {
    const id = await enqueue();
    const first = await queue(['cancel', String(id), '--reason', 'not needed'], api);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(new RegExp(`${id}\\s+cancelled`));
    const { rows } = await db.query(`select outcome from queues.task_end where task_id = $1`, [id]);
    expect(rows).toEqual([{ outcome: 'cancelled' }]);
    const again = await queue(['cancel', String(id), '--json'], api);
    expect(again.code).toBe(3);
    expect(JSON.parse(again.stdout)).toEqual([{ task_id: id, result: 'already_completed' }]);
  });

  it('redrive: a dead letter becomes a new task (exit 0); a live task is not a dead letter (exit 3)', async () => {
    const live = await enqueue();
    // One attempt: the failure below ends it (the default retries it).
    const run0 = await queue(['enqueue', 'cli_dead', '--max-attempts', '1', '--json'], api);
    const dead = JSON.parse(run0.stdout).task_id as number;
    const worker = db.pool('worker');
    // The only cli_dead task: claimed, then failed with no error handler (a dead letter).
    const { rows } = await worker.query(
      `select task_id, task_lease_id from queues.claim_tasks('w1', 1, '{cli_dead}', 60)`,
    );
    expect(rows.map((r) => Number(r.task_id))).toEqual([dead]);
    await worker.query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[dead], [rows[0].task_lease_id]]);
    const run = await queue(['redrive', String(dead), '--json'], api);
    expect(run.code, run.stderr).toBe(0);
    const [answer] = JSON.parse(run.stdout);
    expect(answer).toMatchObject({ task_id: dead, result: 'redriven' });
    const copy = await db.query(`select task_type, payload from queues.task where task_id = $1`, [answer.new_task_id]);
    expect(copy.rows).toEqual([{ task_type: 'cli_dead', payload: {} }]);
    const refused = await queue(['redrive', String(live)], api);
    expect(refused.code).toBe(3);
    expect(refused.stdout).toMatch(/not_a_dead_letter/);
  });

  it('pause and resume: status shows the pause; resume of a running type says it was not paused', async () => {
    await enqueue();
    const pause = await queue(['pause', 'cli_test', '--reason', 'maintenance'], api);
    expect(pause.code, pause.stderr).toBe(0);
    const status = await queue(['status', '--json'], api);
    expect(status.code, status.stderr).toBe(0);
    const { queues, capacity } = JSON.parse(status.stdout);
    const row = queues.find((q: { task_type: string }) => q.task_type === 'cli_test');
    expect(row.paused).toBe(true);
    expect(row.ready).toBeGreaterThan(0);
    expect(Array.isArray(capacity)).toBe(true);
    expect((await queue(['resume', 'cli_test'], api)).stdout).toBe('resumed cli_test\n');
    expect((await queue(['resume', 'cli_test'], api)).stdout).toBe('cli_test was not paused\n');
    const text = await queue(['status'], api);
    expect(text.stdout).toMatch(/^TASK_TYPE\s+SCHEDULED\s+READY/);
    expect(text.stdout).toMatch(/^cli_test\s+\d+\s+[1-9]\d*\s+\d+\s+\d+\s+false/m);
  });

  it('workers: a worker that reported in is listed', async () => {
    await db.pool('worker').query(`select queues.record_worker_heartbeat('cli-worker-1', '{cli_test}', 1000)`);
    const run = await queue(['workers', '--json'], api);
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout).map((w: { worker_id: string }) => w.worker_id)).toContain('cli-worker-1');
  });

  it('schedules: list, disable and enable one; an unknown schedule exit 3', async () => {
    await db
      .pool('api')
      .query(`select * from schedules.upsert_schedule('cli.nightly', '0 2 * * *', 'cli_test', '{}'::jsonb)`);
    const disable = await queue(['schedules', 'disable', 'cli.nightly'], api);
    expect(disable.code, disable.stderr).toBe(0);
    const list = await queue(['schedules', 'list', '--json'], api);
    const schedule = JSON.parse(list.stdout).find((s: { name: string }) => s.name === 'cli.nightly');
    expect(schedule).toMatchObject({ cron: '0 2 * * *', task_type: 'cli_test', enabled: false });
    expect((await queue(['schedules', 'enable', 'cli.nightly'], api)).code).toBe(0);
    const again = JSON.parse((await queue(['schedules', 'list', '--json'], api)).stdout);
    expect(again.find((s: { name: string }) => s.name === 'cli.nightly').enabled).toBe(true);
    const unknown = await queue(['schedules', 'enable', 'no.such.schedule'], api);
    expect(unknown.code).toBe(3);
    expect(unknown.stderr).toMatch(/no.such.schedule/);
  });

  it('every change leaves one audit fact naming the OS user and the command; a refused change leaves none', async () => {
    const facts = async () =>
      (
        await db.query<{ user_name: string; method: string; route: string; action: string; task_ids: string[] }>(
          `select user_name, method, route, action, task_ids from admin.api_change order by api_change_id`,
        )
      ).rows;
    const before = (await facts()).length;
    const env = { ...api, USER: 'alice' };
    const made = await queue(['enqueue', 'cli_test', '--payload', '{"email": "a@example.com"}'], env);
    const id = Number(made.stdout.trim());
    expect((await queue(['cancel', String(id)], env)).code).toBe(0);
    expect((await queue(['pause', 'cli_test'], env)).code).toBe(0);
    expect((await queue(['resume', 'cli_test'], env)).code).toBe(0);
    expect((await queue(['schedules', 'disable', 'no.such.schedule'], env)).code).toBe(3);
    expect((await queue(['enqueue', 'email'], env)).code).toBe(3);
    const after = (await facts()).slice(before);
    expect(after.map((f) => [f.user_name, f.method, f.route, f.action])).toEqual([
      ['cli:alice', 'CLI', 'queue enqueue', 'create_task'],
      ['cli:alice', 'CLI', 'queue cancel', 'cancel_tasks'],
      ['cli:alice', 'CLI', 'queue pause', 'pause_task_type'],
      ['cli:alice', 'CLI', 'queue resume', 'resume_task_type'],
    ]);
    expect(after[0]?.task_ids.map(Number)).toEqual([id]);
    // The payload (personal data) stays out of the trail.
    const { rows } = await db.query(`select input::text from admin.api_change where route = 'queue enqueue'`);
    expect(rows.every((r) => !String(r.input).includes('a@example.com'))).toBe(true);
  });

  it('migrate: installs the core on an empty database as the owner, again without change, a domain by --domains', async () => {
    const empty = await createTestDatabase({ empty: true });
    try {
      const env = {
        DATABASE_URL: empty.url('owner'),
        DATABASE_WORKER: empty.dbUsers.worker,
        DATABASE_APP: empty.dbUsers.app,
        DATABASE_API: empty.dbUsers.api,
      };
      const first = await queue(['migrate'], env);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stdout).toMatch(/migrated /);
      const { rows } = await empty.query(`select to_regclass('queues.task') is not null as migrated`);
      expect(rows).toEqual([{ migrated: true }]);
      const second = await queue(['migrate'], env);
      expect(second.code, second.stderr).toBe(0);
      expect(second.stdout).toMatch(/up to date \(core\)/);
      // The core alone; a business domain is added by name, a wrong name is bad usage.
      const domains = await empty.query(`select to_regnamespace('comms') is not null as comms`);
      expect(domains.rows).toEqual([{ comms: false }]);
      const wrong = await queue(['migrate', '--domains', 'billing'], env);
      expect(wrong.code).toBe(2);
      expect(wrong.stderr).toMatch(/unknown domain "billing": the domains are comms, files/);
      const added = await queue(['migrate', '--domains', 'menus'], env);
      expect(added.code, added.stderr).toBe(0);
      expect(added.stdout).toMatch(/migrated core, menus/);
      const missing = await queue(['migrate'], { DATABASE_URL: empty.url('owner') });
      expect(missing.code).toBe(2);
      expect(missing.stderr).toMatch(/DATABASE_WORKER, DATABASE_APP, DATABASE_API/);
      // A name that is not a plain role name is bad usage, refused before any SQL runs.
      const badName = await queue(['migrate'], { ...env, DATABASE_WORKER: 'worker; drop' });
      expect(badName.code, badName.stderr).toBe(2);
      expect(badName.stderr).toMatch(/the worker role must match/);
    } finally {
      await empty.drop();
    }
  });
});
