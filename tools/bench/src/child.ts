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

  constructor(
    readonly label: string,
    nodeBinary: string,
    script: string,
    config: RunnerConfig,
  ) {
    hookExit();
    const child = spawn(nodeBinary, [script, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] });
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

  /** Waits for the result (bounded), killing the process if it does not come. */
  async finish(timeoutMs: number): Promise<RunnerResult> {
    try {
      return await withTimeout(this.result, timeoutMs, `${this.label} result`);
    } finally {
      this.kill();
    }
  }
}
