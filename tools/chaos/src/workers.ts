/** Worker processes: the real CLI (`packages/worker/dist/cli.js`) or the chaos entry. */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const WORKER_CLI = fileURLToPath(new URL('./cli.js', import.meta.resolve('@org/worker')));
/** dist/worker-entry.js, also when this file runs from src/ (vitest). */
export const CHAOS_ENTRY = fileURLToPath(
  new URL(import.meta.url.endsWith('.ts') ? '../dist/worker-entry.js' : './worker-entry.js', import.meta.url),
);

export interface WorkerProcess {
  id: string;
  pid: number;
  process: ChildProcess;
  /** The last 256 KB of stdout + stderr. */
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
  alive(): boolean;
}

let counter = 0;

/** Starts a worker with `env` (WORKER_ID defaults to `<prefix>-<n>`). */
export function startWorker(options: {
  env: Record<string, string>;
  script?: 'cli' | 'entry';
  prefix?: string;
  nodeArgs?: string[];
}): WorkerProcess {
  const id = options.env.WORKER_ID ?? `${options.prefix ?? 'chaos'}-${process.pid}-${++counter}`;
  const script = options.script === 'entry' ? CHAOS_ENTRY : WORKER_CLI;
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), script], {
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', ...options.env, WORKER_ID: id },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const append = (d: Buffer) => {
    output += d.toString();
    if (output.length > 262_144) output = output.slice(-262_144);
  };
  child.stdout.on('data', append);
  child.stderr.on('data', append);
  let exitCode: number | null | undefined;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.on('exit', (code, signal) => {
      exitCode = code;
      resolve({ code, signal, at: Date.now() });
    }),
  );
  return { id, pid: child.pid!, process: child, output: () => output, exited, alive: () => exitCode === undefined };
}

/** SIGTERM, then SIGKILL after `ms`. */
export async function stopWorker(
  w: WorkerProcess,
  ms = 10_000,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (!w.alive()) return w.exited;
  w.process.kill('SIGCONT');
  w.process.kill('SIGTERM');
  const timer = setTimeout(() => w.alive() && w.process.kill('SIGKILL'), ms);
  const exit = await w.exited;
  clearTimeout(timer);
  return exit;
}

export function killAll(workers: Iterable<WorkerProcess>): void {
  for (const w of workers) {
    if (w.alive()) {
      w.process.kill('SIGCONT');
      w.process.kill('SIGKILL');
    }
  }
}

/** Resident set size in kB, from /proc (0 when unavailable). */
export function rssKb(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** Parsed JSON log lines. */
export function logLines(output: string): Record<string, unknown>[] {
  const lines: Record<string, unknown>[] = [];
  for (const l of output.split('\n')) {
    if (!l.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(l) as Record<string, unknown>);
    } catch {
      // a line cut by the output cap
    }
  }
  return lines;
}

/** Worker settings for short leases, so that a crashed worker's tasks come back fast. */
export function fastEnv(databaseUrl: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl,
    POLL_INTERVAL_MS: '200',
    HEARTBEAT_INTERVAL_MS: '500',
    LEASE_SECONDS: '2',
    MAX_LEASES: '20',
    SHUTDOWN_GRACE_MS: '3000',
    CONCURRENCY: '4',
    ...extra,
  };
}
