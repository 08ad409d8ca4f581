/**
 * Runner processes: spawned with a given Node binary, driven over the line protocol
 * (see runners/protocol.ts), and killed when the harness exits, even on failure.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { MARK, type RunnerConfig } from './runners/protocol.js';

const live = new Set<ChildProcess>();

/** Kills every runner process still alive (SIGKILL). */
export function killAllRunners(): void {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  live.clear();
}

let hooked = false;
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  // On any exit of the harness; the CLI also handles signals (and stops the server).
  process.on('exit', killAllRunners);
}

export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

export interface RunnerResult {
  maxRssKb: number;
  [key: string]: unknown;
}

export class Runner {
  readonly ready: Promise<void>;
  readonly result: Promise<RunnerResult>;
  readonly pid: number;
  readonly #child: ChildProcess;
  readonly #stderr: string[] = [];
  readonly #exited: Promise<void>;

  constructor(
    readonly label: string,
    nodeBinary: string,
    script: string,
    config: RunnerConfig,
  ) {
    hookExit();
    // BENCH_RUNNER_NODE_ARGS: options for each runner's node, e.g. "--cpu-prof
    // --cpu-prof-dir=/tmp/prof" to profile the workers (NODE_OPTIONS refuses --cpu-prof).
    const nodeArgs = (process.env.BENCH_RUNNER_NODE_ARGS ?? '').split(/\s+/).filter(Boolean);
    const child = spawn(nodeBinary, [...nodeArgs, script, JSON.stringify(config)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.#child = child;
    this.pid = child.pid ?? -1;
    live.add(child);
    const ready = deferred<void>();
    const result = deferred<RunnerResult>();
    this.ready = ready.promise;
    this.result = result.promise;
    const onReady = () => ready.resolve();
    const onResult = (r: RunnerResult) => result.resolve(r);
    const onError = (e: Error) => {
      ready.reject(e);
      result.reject(e);
    };
    // A ready or result nobody awaits must not become an unhandled rejection.
    this.ready.catch(() => {});
    this.result.catch(() => {});
    let settled = false;
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (!line.startsWith(MARK)) return;
      const message = JSON.parse(line.slice(MARK.length)) as { type: string; message?: string };
      if (message.type === 'ready') onReady();
      else if (message.type === 'result') {
        settled = true;
        onResult(message as unknown as RunnerResult);
      } else if (message.type === 'error') {
        settled = true;
        onError(new Error(`${label} failed: ${message.message}`));
      }
    });
    createInterface({ input: child.stderr }).on('line', (line) => {
      this.#stderr.push(line);
      if (this.#stderr.length > 40) this.#stderr.shift();
    });
    child.stdin.on('error', () => {});
    this.#exited = new Promise((resolve) => child.once('exit', () => resolve()));
    child.on('exit', (code, signal) => {
      live.delete(child);
      if (!settled) {
        onError(new Error(`${label} exited (${signal ?? code}) without a result; stderr:\n${this.#stderr.join('\n')}`));
      }
    });
  }

  go(): void {
    this.#child.stdin!.write('go\n');
  }

  stop(): void {
    this.#child.stdin!.write('stop\n');
  }

  kill(): void {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill('SIGKILL');
  }

  /**
   * Waits for the result (bounded), then for the process to exit by itself (a few seconds:
   * a runner started with --cpu-prof writes its profile as it exits), killing it if either
   * does not come.
   */
  async finish(timeoutMs: number): Promise<RunnerResult> {
    try {
      const result = await withTimeout(this.result, timeoutMs, `${this.label} result`);
      await withTimeout(this.#exited, 5_000, `${this.label} exit`).catch(() => {});
      return result;
    } finally {
      this.kill();
    }
  }
}
