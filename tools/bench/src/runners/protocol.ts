/**
 * The line protocol between the harness and a runner process (one system, one role).
 *
 *   harness → runner   argv[2]: the JSON config; stdin lines: "go", "stop"
 *   runner → harness   stdout lines prefixed with MARK: {"type":"ready"}, {"type":"result",...},
 *                      {"type":"error","message":...}
 *
 * Anything else a library prints on stdout is ignored by the harness. When stdin closes
 * (the harness died), the runner exits at once: no orphan keeps working.
 *
 * This file is loaded by Node 20 (our runner) and Node 22 (the peers): node built-ins only.
 */
import { createInterface } from 'node:readline';

export const MARK = '@@bench ';

export type RunnerMessage =
  { type: 'ready' } | { type: 'result'; [key: string]: unknown } | { type: 'error'; message: string };

export function send(message: RunnerMessage): void {
  process.stdout.write(`${MARK}${JSON.stringify(message)}\n`);
}

export interface Control {
  /** Tells the harness this runner is prepared; resolves on the harness's "go". */
  ready(): Promise<void>;
  /** Resolves on the harness's "go". */
  go: Promise<void>;
  /** Resolves on the harness's "stop". */
  stop: Promise<void>;
}

export function control(): Control {
  let onGo!: () => void;
  let onStop!: () => void;
  const go = new Promise<void>((r) => (onGo = r));
  const stop = new Promise<void>((r) => (onStop = r));
  const lines = createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    const command = line.trim();
    if (command === 'go') onGo();
    else if (command === 'stop') onStop();
  });
  lines.on('close', () => process.exit(3));
  return {
    go,
    stop,
    ready() {
      send({ type: 'ready' });
      return go;
    },
  };
}

/** Runs a runner's main: reports errors on the protocol and exits with a status. */
export function main<C>(body: (config: C, control: Control) => Promise<Record<string, unknown>>): void {
  const config = JSON.parse(process.argv[2] ?? '{}') as C;
  const ctl = control();
  body(config, ctl).then(
    (result) => {
      send({ type: 'result', ...result, maxRssKb: process.resourceUsage().maxRSS });
      process.exit(0);
    },
    (error: unknown) => {
      send({ type: 'error', message: error instanceof Error ? (error.stack ?? error.message) : String(error) });
      process.exit(1);
    },
  );
}

/** Calls `fn(i)` for i in [0, count) with `concurrency` callers; resolves when all are done. */
export async function inParallel(
  count: number,
  concurrency: number,
  fn: (i: number) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const caller = async () => {
    while (next < count) {
      const i = next++;
      await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, caller));
}

/**
 * The wall clock in milliseconds with a fraction (`Date.now()` counts whole ones), for
 * times compared between the processes of one machine: a pickup is a few milliseconds, so
 * whole milliseconds would round its percentiles by a third.
 */
export function wallClockMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Open loop: calls `fn(i)` at `rate` per second for `durationMs`, never waiting for earlier calls. */
export async function openLoop(
  rate: number,
  durationMs: number,
  fn: (i: number) => Promise<unknown>,
): Promise<{ sent: number; failed: number; maxLagMs: number }> {
  const total = Math.floor((rate * durationMs) / 1000);
  const start = Date.now();
  const pending: Promise<unknown>[] = [];
  let failed = 0;
  let maxLagMs = 0;
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    maxLagMs = Math.max(maxLagMs, Date.now() - due);
    pending.push(fn(i).catch(() => failed++));
  }
  await Promise.all(pending);
  return { sent: total, failed, maxLagMs };
}

/** Every runner config carries these. */
export interface BaseConfig {
  mode: 'setup' | 'enqueue' | 'work' | 'produce';
}

export interface EnqueueConfig extends BaseConfig {
  mode: 'enqueue';
  url: string;
  count: number;
  /** 'single': one call per task from `concurrency` callers; 'batch': `batchSize` per call, one caller. */
  kind: 'single' | 'batch';
  concurrency: number;
  batchSize: number;
  /** Ours only: the task type ('bench' or 'db_function'). */
  taskType?: string;
}

export interface WorkConfig extends BaseConfig {
  mode: 'work';
  url: string;
  workerId: string;
  concurrency: number;
  /** Record enqueue-to-handler-start latency from payload.t. */
  latency: boolean;
  /** Ours only: what the worker runs. */
  kind?: 'noop' | 'db_function' | 'email';
  /** Ours only, kind 'email': the fake Resend base URL. */
  resendUrl?: string;
}

export interface ProduceConfig extends BaseConfig {
  mode: 'produce';
  url: string;
  rate: number;
  durationMs: number;
}

export interface SetupConfig extends BaseConfig {
  mode: 'setup';
  url: string;
}

export type RunnerConfig = SetupConfig | EnqueueConfig | WorkConfig | ProduceConfig;
