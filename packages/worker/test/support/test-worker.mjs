// A worker process for signal and crash tests: the real Worker and CLI configuration,
// with test processors registered beside db_function:
//   slow   waits payload.ms (default 1000) milliseconds, then completes
//   crash  kills its own process with SIGKILL (a poison task)
import { ProcessorRegistry, Worker, createLogger, dbFunctionProcessor, finish, loadConfig } from '@org/worker';

const config = loadConfig(process.argv.slice(2), process.env);
const logger = createLogger(config.logLevel);
const registry = new ProcessorRegistry()
  .register('db_function', dbFunctionProcessor())
  .register('slow', {
    name: 'slow',
    async process({ task, pool, signal }) {
      const ms = Number(task.payload.ms ?? 1000);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        signal.addEventListener('abort', () => clearTimeout(timer) || resolve(undefined), { once: true });
      });
      return finish(pool, task, { outcome: signal.aborted ? 'failed' : 'succeeded', error: signal.aborted ? 'aborted' : undefined });
    },
  })
  .register('crash', {
    name: 'crash',
    async process() {
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => {});
    },
  });

const worker = new Worker({ ...config, registry, logger });
await worker.start();
let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, async () => {
    if (stopping) return;
    stopping = true;
    await worker.stop();
    process.exit(0);
  });
}
