// The task folder loader: TypeScript files imported without a compile step, helpers and
// tests skipped, and every mistake an error naming the file.
import { afterEach, expect, it } from 'vitest';
import { defineTask } from '@org/tasks';
import { loadTasks, resolveTasksDir, TaskLoadError } from '@org/tasks/load';
import { appDir } from './support/app-dir.js';

const apps: ReturnType<typeof appDir>[] = [];
afterEach(() => {
  for (const app of apps.splice(0)) app.remove();
});
function app() {
  const a = appDir();
  apps.push(a);
  return a;
}

const FAX = `
import { z } from 'zod';
import { defineTask } from '@org/tasks';
import { greeting } from './_shared.js';

interface Sent { sent: boolean }   // types only: stripped by the loader

export default defineTask({
  name: 'fax',
  payload: z.object({ to: z.string() }),
  run: async ({ to }): Promise<Sent> => ({ sent: greeting(to).length > 0 }),
});
`;

it('loads TypeScript task files with their own imports, skipping helpers, declarations and tests', async () => {
  const a = app();
  a.write('tasks/fax.ts', FAX);
  a.write('tasks/_shared.ts', `export const greeting = (to: string): string => 'hello ' + to;\n`);
  a.write('tasks/types.d.ts', `export type X = number;\n`);
  a.write('tasks/fax.test.ts', `throw new Error('a test file is not a task');\n`);
  a.write(
    'tasks/more.mjs',
    `import { defineTask } from '@org/tasks';\nimport { z } from 'zod';\n` +
      `export const ping = defineTask({ name: 'ping', payload: z.object({}), run: () => {} });\n` +
      `export const pong = defineTask({ name: 'pong', payload: z.object({}), run: () => {} });\n`,
  );
  const tasks = await loadTasks(resolveTasksDir('tasks', a.dir)!);
  expect(tasks.map((t) => t.definition.name)).toEqual(['fax', 'ping', 'pong']);
  const fax = tasks[0].definition;
  expect(fax.payload.safeParse({ to: 1 }).success).toBe(false);
  await expect(
    fax.run(
      { to: 'x' },
      {
        taskId: '1',
        taskType: 'fax',
        leaseCount: 1,
        maxAttempts: 1,
        signal: new AbortController().signal,
        progress: () => {},
        dependencies: () => Promise.resolve([]),
        log: console,
      },
    ),
  ).resolves.toEqual({ sent: true });
});

it('uses ./tasks when TASKS_DIR is unset and the folder exists, none otherwise; an explicit folder must exist', () => {
  const a = app();
  expect(resolveTasksDir(undefined, a.dir)).toBeNull();
  a.write('tasks/fax.ts', FAX);
  expect(resolveTasksDir(undefined, a.dir)).toBe(`${a.dir}/tasks`);
  expect(() => resolveTasksDir('nope', a.dir)).toThrow(`TASKS_DIR: ${a.dir}/nope is not a folder`);
});

it('names the file that exports no definition', async () => {
  const a = app();
  a.write('tasks/fax.ts', `export const notATask = 1;\n`);
  await expect(loadTasks(`${a.dir}/tasks`)).rejects.toThrow(
    /tasks\/fax\.ts exports no task definition: write `export default defineTask\(\{ \.\.\. \}\)`/,
  );
});

it('names both files defining one task type', async () => {
  const a = app();
  a.write('tasks/a.ts', FAX.replace("import { greeting } from './_shared.js';", 'const greeting = (s: string) => s;'));
  a.write('tasks/b.ts', FAX.replace("import { greeting } from './_shared.js';", 'const greeting = (s: string) => s;'));
  await expect(loadTasks(`${a.dir}/tasks`)).rejects.toThrow(
    /task "fax" is defined twice: in .*tasks\/a\.ts and in .*tasks\/b\.ts/,
  );
});

it('names the file whose definition is invalid, and what is wrong with it', async () => {
  const a = app();
  a.write(
    'tasks/bad.ts',
    `import { z } from 'zod';\nimport { defineTask } from '@org/tasks';\n` +
      `export default defineTask({ name: 'Fax-2', payload: z.object({}), maxAttempts: 0, run: () => {} });\n`,
  );
  const error = await loadTasks(`${a.dir}/tasks`).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(TaskLoadError);
  expect((error as Error).message).toMatch(/tasks\/bad\.ts: invalid task "Fax-2": name must be a-z, 0-9 and _/);
  expect((error as Error).message).toContain('maxAttempts must be a whole number from 1 to 100, got 0');
});

it('defineTask checks each field', () => {
  expect(() => defineTask({ name: 'fax', payload: {} as never, run: undefined as never, timeoutMs: 1.5 })).toThrow(
    'invalid task "fax": payload must be a zod schema, such as z.object({ ... }); run must be a function (payload, ctx) => ...; timeoutMs must be a whole number of milliseconds from 1 to 2147483647, got 1.5',
  );
});
