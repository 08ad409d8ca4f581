/**
 * The chaos worker process: the real Worker and CLI configuration (env and flags), the
 * built-in processors with providers from the environment, and three chaos processors:
 *   slow   waits payload.ms (default 1000), then completes; payload.fail: records an
 *          error and fails; payload.record: records a fact (chaos.record) in the
 *          completion's transaction
 *   crash  kills its own process with SIGKILL (a poison task)
 *   oom    allocates until the heap is exhausted (run with --max-old-space-size)
 * It runs through the worker's command line (runWorkerCli), so PROCESSES=N supervises N
 * such processes. SIGTERM / SIGINT: graceful stop, exit 0.
 */
import { providersFromEnv } from '@org/providers';
import { runFunction } from '@org/queue-client';
import type { Logger } from '@org/worker';
import { defaultRegistry, runWorkerCli } from '@org/worker/command';

const registry = (logger: Logger) =>
  defaultRegistry(providersFromEnv(process.env, logger))
    .register('slow', {
      name: 'slow',
      async process({ task, signal }) {
        const ms = Number(task.payload.ms ?? 1000);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, ms);
          signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
        });
        if (signal.aborted) return { outcome: 'failed', error: 'aborted' };
        if (task.payload.fail) return { outcome: 'failed', error: 'slow task failed on purpose' };
        if (task.payload.record) {
          return {
            outcome: 'succeeded',
            effects: async (tx) => {
              await runFunction(tx, 'chaos.record', task.payload);
            },
          };
        }
        return { outcome: 'succeeded' };
      },
    })
    .register('crash', {
      name: 'crash',
      async process() {
        process.kill(process.pid, 'SIGKILL');
        return new Promise(() => {});
      },
    })
    .register('oom', {
      name: 'oom',
      process() {
        const hog: number[][] = [];
        for (;;) hog.push(new Array(250_000).fill(Math.random()));
      },
    });

runWorkerCli({ registry }, 'chaos worker');
