/**
 * The app's task definitions (@org/tasks' defineTask) in the stock worker: the task folder
 * (TASKS_DIR, or ./tasks when it exists) is loaded through @org/tasks/load (TypeScript
 * included, no compile step) and each definition gets a processor beside the built-in ones.
 * Loaded only by the command line: an embedding process registers its definitions itself
 * (registerTaskDefinitions).
 */
import type { Logger } from './logger.js';
import type { ProcessorRegistry } from './processor.js';
import { registerTaskDefinitions } from './processors/task-definition.js';

export async function loadAppTasks(
  registry: ProcessorRegistry,
  tasksDir: string | undefined,
  logger: Logger,
): Promise<ProcessorRegistry> {
  const { loadTasks, resolveTasksDir } = await import('@org/tasks/load');
  const dir = resolveTasksDir(tasksDir);
  if (dir === null) return registry;
  const tasks = await loadTasks(dir);
  registerTaskDefinitions(
    registry,
    tasks.map((t) => t.definition),
  );
  if (tasks.length > 0)
    logger.info(
      { event: 'tasks_loaded', dir, task_types: tasks.map((t) => t.definition.name) },
      `task definitions from ${dir}: ${tasks.map((t) => `${t.definition.name} (${t.file})`).join(', ')}`,
    );
  return registry;
}
