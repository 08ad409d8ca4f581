// A worker process for signal and crash tests: the worker's command line (runWorkerCli,
// so PROCESSES=N runs a pool of N of these), with test processors beside db_function:
//   slow   waits payload.ms (default 1000) milliseconds, then completes
//   crash  kills its own process with SIGKILL (a poison task)
//   hang   blocks its process's event loop forever (a synchronous wait that never ends, and
//          spends no CPU while it waits, as a busy loop would)
// TEST_DIE_BEFORE_READY=1: a pool member exits 1 before it is ready (a broken install).
// TEST_DIE_WHEN_WORKING=1: a pool member kills itself (SIGKILL) 50 ms after the pool gives
// it a slot (a process that dies as soon as it works, again and again).
import { ProcessorRegistry, dbFunctionProcessor } from '@org/worker';
import { runWorkerCli } from '@org/worker/command';

if (process.env.TEST_DIE_BEFORE_READY === '1' && process.env.QUEUE_WORKER_POOL_MEMBER === '1') process.exit(1);
if (process.env.TEST_DIE_WHEN_WORKING === '1' && process.env.QUEUE_WORKER_POOL_MEMBER === '1')
  process.on('message', (message) => {
    if (message?.type === 'activate') setTimeout(() => process.kill(process.pid, 'SIGKILL'), 50);
  });

const registry = () =>
  new ProcessorRegistry()
    .register('db_function', dbFunctionProcessor())
    .register('slow', {
      name: 'slow',
      async process({ task, signal }) {
        const ms = Number(task.payload.ms ?? 1000);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, ms);
          signal.addEventListener('abort', () => clearTimeout(timer) || resolve(undefined), { once: true });
        });
        return signal.aborted ? { outcome: 'failed', error: 'aborted' } : { outcome: 'succeeded' };
      },
    })
    .register('crash', {
      name: 'crash',
      async process() {
        process.kill(process.pid, 'SIGKILL');
        await new Promise(() => {});
      },
    })
    .register('hang', {
      name: 'hang',
      process() {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
        throw new Error('unreachable: nothing wakes the wait');
      },
    });

runWorkerCli({ registry }, 'test worker');
