// The README's "Your first task", followed literally: its steps are read from the README
// itself. Step 1 (clone, npm ci) is this checkout. Step 2 writes the one file the README
// shows into an app folder. Step 3 does what `npm start` does once its database is up, on
// a test database: registers the task folder's types as the owner (the function start.ts
// calls), then starts the stock worker (packages/worker/dist/cli.js, as the worker
// database user, in the folder, with the environment the README's command sets) and the
// web server. Step 4 sends the README's curl request (to the test's port), and the task
// must succeed with the worker logging what the README says it logs.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freePort, registerAppTasks, repoRoot } from '@org/db-tools';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { appDir } from './support/app-dir.js';

const readme = readFileSync(join(repoRoot(), 'README.md'), 'utf8');

/** The section's numbered steps: each step's text and its code block (dedented). */
function steps(): { text: string; code: string; lang: string }[] {
  const start = readme.indexOf('\n## Your first task\n');
  expect(start, 'README section "Your first task"').toBeGreaterThan(-1);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end);
  const found = [...section.matchAll(/^(\d+)\. (.*)\n\n {3}```(\w+)\n([\s\S]*?)\n {3}```$/gm)];
  return found.map((m) => ({
    text: m[2],
    lang: m[3],
    code: m[4]
      .split('\n')
      .map((line) => line.replace(/^ {3}/, ''))
      .join('\n'),
  }));
}

/** Splits a shell command line into words (single and double quotes; no expansions). */
function shellWords(line: string): string[] {
  const words: string[] = [];
  for (const m of line.matchAll(/'([^']*)'|"([^"]*)"|(\S+)/g)) words.push(m[1] ?? m[2] ?? m[3]);
  return words;
}

let db: TestDatabase;
const app = appDir();
const children: ChildProcess[] = [];
let workerOutput = '';
let webOutput = '';

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGTERM');
        }),
    ),
  );
  await db?.drop();
  app.remove();
});

function start(script: string, env: NodeJS.ProcessEnv, onOutput?: (text: string) => void): ChildProcess {
  const child = spawn(process.execPath, [join(repoRoot(), script)], {
    cwd: app.dir,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (d: Buffer) => onOutput?.(d.toString()));
  child.stderr.on('data', (d: Buffer) => onOutput?.(d.toString()));
  children.push(child);
  return child;
}

async function eventually<T>(check: () => Promise<T | undefined>, what: string, timeoutMs = 60_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    let value: T | undefined;
    try {
      value = await check();
    } catch (error) {
      if (error instanceof Error && error.message.includes('exited')) throw error;
    }
    if (value !== undefined) return value;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

it('takes four steps and one hand-written file, and the task runs', async () => {
  const [install, write, run, enqueue] = steps();
  expect(steps()).toHaveLength(4);

  // 1. Install: this checkout, built.
  expect(install.code).toMatch(/^git clone .* && cd pg-task-queue && npm ci$/);

  // 2. The one file.
  const file = /^Write `([^`]+)`:$/.exec(write.text)?.[1];
  expect(file).toBe('tasks/fax.ts');
  expect(write.lang).toBe('ts');
  app.write(file!, `${write.code}\n`);

  // 3. `API_TOKEN=... npm start`: its environment, then what npm start runs on its database.
  const words = shellWords(run.code);
  const assignments = words.filter((w) => /^[A-Z_]+=/.test(w));
  expect(words.slice(assignments.length)).toEqual(['npm', 'start']);
  const startEnv = Object.fromEntries(
    assignments.map((a) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]),
  );
  const registered = await registerAppTasks(db.url('owner'), {
    cwd: app.dir,
    env: { PATH: process.env.PATH ?? '', ...startEnv },
  });
  expect(registered).toEqual(['task type fax (tasks/fax.ts): registered']);
  start(
    'packages/worker/dist/cli.js',
    { ...startEnv, DATABASE_URL: db.url('worker'), POLL_INTERVAL_MS: '200', LOG_FORMAT: 'json' },
    (text) => (workerOutput += text),
  );
  const port = await freePort();
  const web = start(
    'packages/web/dist/cli.js',
    {
      ...startEnv,
      DATABASE_URL: db.url('api'),
      API_PORT: String(port),
      API_HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
    },
    (text) => (webOutput += text),
  );

  // 4. The README's curl request, sent to this test's web server.
  const curl = shellWords(enqueue.code);
  expect(curl[0]).toBe('curl');
  const request = {
    method: 'GET',
    url: '',
    headers: {} as Record<string, string>,
    body: undefined as string | undefined,
  };
  for (let i = 1; i < curl.length; i++) {
    const word = curl[i];
    if (word === '-sS') continue;
    else if (word === '-X') request.method = curl[++i]!;
    else if (word === '-H') {
      const header = curl[++i];
      request.headers[header.slice(0, header.indexOf(':')).trim()] = header.slice(header.indexOf(':') + 1).trim();
    } else if (word === '-d') request.body = curl[++i]!;
    else if (/^https?:\/\//.test(word)) request.url = word;
    else throw new Error(`the README's curl has an option this test does not know: ${word}`);
  }
  expect(request.url).toBe('http://127.0.0.1:3000/api/tasks');
  const url = request.url.replace(':3000', `:${port}`);
  const response = await eventually(async () => {
    // Until the web server listens.
    if (web.exitCode !== null) throw new Error(`the web server exited with ${web.exitCode}:\n${webOutput}`);
    const r = await fetch(url, { method: request.method, headers: request.headers, body: request.body });
    return r;
  }, 'the web server').catch((error: Error) => {
    throw new Error(`${error.message}; its output:\n${webOutput}`);
  });
  const answer = (await response.json()) as { task_id?: number };
  expect(response.status, JSON.stringify(answer)).toBe(201);

  // The task ran: succeeded, with run's result, and the worker logged what the README says.
  const outcome = await eventually(async () => {
    const { rows } = await db.query('select outcome from queues.task_end where task_id = $1', [answer.task_id]);
    return rows[0]?.outcome as string | undefined;
  }, `task ${answer.task_id} completed`);
  expect(outcome, workerOutput).toBe('succeeded');
  const { rows } = await db.query('select result from queues.task_result where task_id = $1', [answer.task_id]);
  expect(rows[0]?.result).toEqual({ sent: true });
  const logged = /The worker logs `([^`]+)` and `([^`]+)`/.exec(readme)!;
  const taskLines = () =>
    workerOutput
      .split('\n')
      .filter((l) => l.startsWith('{') && l.endsWith('}'))
      .map((l) => JSON.parse(l) as { msg?: string; task_id?: unknown })
      .filter((l) => String(l.task_id) === String(answer.task_id))
      .map((l) => l.msg);
  // The completion is in the database before its log line reaches this process.
  await eventually(
    () => Promise.resolve(taskLines().includes(logged[2]) ? true : undefined),
    'the completion logged',
    10_000,
  ).catch(() => undefined);
  expect(taskLines()).toEqual(expect.arrayContaining([logged[1], logged[2]]));
});
