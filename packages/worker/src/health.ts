/**
 * The worker's health, as its HTTP port answers it (serveWorkerMetrics with `health`):
 *
 *   GET /healthz  liveness: the process answers (its event loop turns) and its claim loop
 *                 has not ended on its own. 200 while it shuts down gracefully too: a
 *                 liveness failure then would have the pod killed before its running
 *                 tasks finish. 503 only for a worker that stopped claiming without being
 *                 told to stop (restarting it helps).
 *   GET /readyz   readiness: 200 when the worker is running (started, not shutting down),
 *                 its claim loop turned lately, its last claim succeeded, and a fresh
 *                 connection to the database answers `select 1` within `timeoutMs`.
 *                 503 otherwise, with every check and why in the JSON body.
 *
 * The database check opens a connection of its own (not one of the worker's pool, which
 * running tasks may all hold), at most once a second however often it is asked: callers
 * at the same time share one check, and a result is reused for `cacheMs`.
 */
import pg from 'pg';
import type { WorkerStatus } from './worker.js';

/** How long the readiness check's database connection and query may take, by default. */
export const HEALTH_CHECK_TIMEOUT_MS = 2000;

export interface HealthSource {
  status(): WorkerStatus;
}

export interface WorkerHealthOptions {
  /** The database the worker claims from. */
  databaseUrl: string;
  /** The database check fails after this long (connect and query); default HEALTH_CHECK_TIMEOUT_MS. */
  timeoutMs?: number;
  /** A claim loop that began no turn for this long is stuck; default max(3 × poll interval, 60 s). */
  stallMs?: number;
  /** A database check result is reused this long; default 1000 ms. */
  cacheMs?: number;
}

export interface HealthCheck {
  ok: boolean;
  detail: string;
}

export interface HealthReport {
  status: 'ok' | 'unavailable';
  state: WorkerStatus['state'];
  checks: Record<string, HealthCheck>;
}

export class WorkerHealth {
  readonly #worker: HealthSource;
  readonly #options: WorkerHealthOptions;
  #database: { at: number; result: Promise<HealthCheck> } | undefined;

  constructor(worker: HealthSource, options: WorkerHealthOptions) {
    this.#worker = worker;
    this.#options = options;
  }

  /** Liveness (GET /healthz). */
  live(): HealthReport {
    const status = this.#worker.status();
    const ended = status.state === 'running' && !status.loopRunning;
    return report(status, {
      process: { ok: true, detail: `pid ${process.pid} answers` },
      claim_loop: ended
        ? { ok: false, detail: 'the claim loop ended without a stop' }
        : { ok: true, detail: status.state === 'stopping' ? 'stopping gracefully' : status.state },
    });
  }

  /** Readiness (GET /readyz). */
  async ready(): Promise<HealthReport> {
    const status = this.#worker.status();
    const stallMs = this.#options.stallMs ?? Math.max(3 * status.pollIntervalMs, 60_000);
    const running = status.state === 'running';
    const checks: Record<string, HealthCheck> = {
      state: running
        ? { ok: true, detail: 'running' }
        : {
            ok: false,
            detail:
              status.state === 'stopping'
                ? 'shutting down: no new claims'
                : status.state === 'stopped'
                  ? 'stopped'
                  : 'starting',
          },
      claim_loop: !status.loopRunning
        ? { ok: false, detail: status.msSinceLoopTurn === null ? 'not started' : 'ended' }
        : status.msSinceLoopTurn! > stallMs
          ? { ok: false, detail: `no turn for ${Math.round(status.msSinceLoopTurn!)} ms (limit ${stallMs} ms)` }
          : { ok: true, detail: `last turn ${Math.round(status.msSinceLoopTurn!)} ms ago` },
      claims:
        status.claimFailures > 0
          ? { ok: false, detail: `the last ${status.claimFailures} claim(s) failed` }
          : { ok: true, detail: 'the last claim succeeded' },
      // While starting or stopping the answer is 503 anyway: no connection is opened.
      database: running ? await this.#checkDatabase() : { ok: false, detail: 'not checked: not running' },
    };
    return report(status, checks);
  }

  #checkDatabase(): Promise<HealthCheck> {
    const now = performance.now();
    const cacheMs = this.#options.cacheMs ?? 1000;
    if (this.#database && now - this.#database.at < cacheMs) return this.#database.result;
    const result = pingDatabase(this.#options.databaseUrl, this.#options.timeoutMs ?? HEALTH_CHECK_TIMEOUT_MS);
    this.#database = { at: now, result };
    // The next caller after the check ends starts from its end, not its start.
    void result.then(() => {
      if (this.#database?.result === result) this.#database.at = performance.now();
    });
    return result;
  }
}

function report(status: WorkerStatus, checks: Record<string, HealthCheck>): HealthReport {
  return {
    status: Object.values(checks).every((c) => c.ok) ? 'ok' : 'unavailable',
    state: status.state,
    checks,
  };
}

/** A fresh connection runs `select 1` within `timeoutMs`; never throws. */
async function pingDatabase(connectionString: string, timeoutMs: number): Promise<HealthCheck> {
  const client = new pg.Client({
    connectionString,
    application_name: 'queue-worker-health',
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs,
  });
  client.on('error', () => {});
  const started = performance.now();
  try {
    await client.connect();
    await client.query('select 1');
    return { ok: true, detail: `select 1 answered in ${Math.round(performance.now() - started)} ms` };
  } catch (error) {
    return { ok: false, detail: `database unreachable: ${error instanceof Error ? error.message : String(error)}` };
  } finally {
    void client.end().catch(() => {});
  }
}
