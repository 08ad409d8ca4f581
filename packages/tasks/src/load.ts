/**
 * @org/tasks/load: loads an app's task folder, TypeScript included, with no compile step of
 * the app's own. Each `.ts`, `.mts`, `.js` or `.mjs` file directly in the folder is
 * imported through tsx (`tsImport`: esbuild strips the types; the file's own imports
 * resolve as Node resolves them from the file); every definition it exports (default or
 * named) is a task type. Files whose name starts with `_` or `.`, declaration files
 * (`.d.ts`) and tests (`.test.*`, `.spec.*`) are skipped: helpers shared by tasks go
 * there. A task file that exports no definition, two definitions of one name, or a file
 * that fails to load is an error naming the file.
 *
 * A separate entry from '@org/tasks', so that an app that only enqueues never loads tsx.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { tsImport } from 'tsx/esm/api';
import { isTaskDefinition, type AnyTaskDefinition } from './index.js';

/** The task folder when TASKS_DIR is unset: `tasks` in the working directory. */
export const DEFAULT_TASKS_DIR = 'tasks';

export interface LoadedTask {
  definition: AnyTaskDefinition;
  /** The file that exports it. */
  file: string;
}

/** A task folder that cannot be loaded; the message names the file and the problem. */
export class TaskLoadError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TaskLoadError';
  }
}

/**
 * The task folder: TASKS_DIR (an explicit one must exist), or ./tasks when it exists, or
 * none (null).
 */
export function resolveTasksDir(tasksDir: string | undefined, cwd = process.cwd()): string | null {
  if (tasksDir !== undefined && tasksDir !== '') {
    const dir = resolve(cwd, tasksDir);
    if (!existsSync(dir) || !statSync(dir).isDirectory()) {
      throw new TaskLoadError(`TASKS_DIR: ${dir} is not a folder`);
    }
    return dir;
  }
  const fallback = resolve(cwd, DEFAULT_TASKS_DIR);
  return existsSync(fallback) && statSync(fallback).isDirectory() ? fallback : null;
}

const TASK_FILE = /\.(ts|mts|js|mjs)$/;
const SKIPPED = /(^[_.])|(\.d\.[mc]?ts$)|(\.(test|spec)\.[mc]?[jt]s$)/;

/** The task files of a folder, in name order. */
export function taskFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isFile() && TASK_FILE.test(entry.name) && !SKIPPED.test(entry.name))
    .map((entry) => join(dir, entry.name))
    .sort();
}

/** Loads every definition in `dir` (see above); throws TaskLoadError naming the file. */
export async function loadTasks(dir: string): Promise<LoadedTask[]> {
  const loaded: LoadedTask[] = [];
  const byName = new Map<string, string>();
  for (const file of taskFiles(dir)) {
    const shown = relative(process.cwd(), file) || basename(file);
    let module: Record<string, unknown>;
    try {
      module = (await tsImport(pathToFileURL(file).href, import.meta.url)) as Record<string, unknown>;
    } catch (error) {
      throw new TaskLoadError(`${shown}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
    const definitions = new Set(Object.values(module).filter(isTaskDefinition));
    if (definitions.size === 0) {
      throw new TaskLoadError(
        `${shown} exports no task definition: write \`export default defineTask({ ... })\` (helpers go in files named _*.ts)`,
      );
    }
    for (const definition of definitions) {
      const other = byName.get(definition.name);
      if (other !== undefined) {
        throw new TaskLoadError(
          `task ${JSON.stringify(definition.name)} is defined twice: in ${other} and in ${shown}`,
        );
      }
      byName.set(definition.name, shown);
      loaded.push({ definition, file: shown });
    }
  }
  return loaded;
}

/** The task folder from TASKS_DIR (see resolveTasksDir), loaded; none: an empty list. */
export async function loadTasksFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  cwd = process.cwd(),
): Promise<{ dir: string | null; tasks: LoadedTask[] }> {
  const dir = resolveTasksDir(env.TASKS_DIR, cwd);
  return { dir, tasks: dir === null ? [] : await loadTasks(dir) };
}
