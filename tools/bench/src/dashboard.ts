/**
 * The dashboard's database cost: open dashboards poll the overview as the page does (the
 * queries behind GET /api/overview/live every POLL_INTERVAL_MS, and those behind
 * GET /api/overview every WINDOW_EVERY-th poll, as the API role) while a drain runs. The harness drains the same backlog alone and with
 * DASHBOARDS dashboards open; the throughput lost, divided by DASHBOARDS, is what one open
 * dashboard costs the drain. Many dashboards are simulated so the effect is larger than
 * the machine's noise.
 */
import pg from 'pg';

/** The statements GET /api/overview/live runs (packages/web/src/app.ts): every poll. */
export const LIVE_SQL = ['select * from admin.list_queues()'];
/** The statements GET /api/overview runs, in its order: the first poll, then every WINDOW_EVERY-th. */
export const OVERVIEW_SQL = [
  'select * from admin.task_counts(null)',
  'select * from admin.throughput(3600, 60)',
  'select * from admin.queue_depth(3600, 60)',
  'select * from admin.capacity(null)',
  'select * from admin.list_queues()',
];
/** packages/web/public/app.js PENDING_REFRESH_MS and WINDOW_REFRESH_MS / PENDING_REFRESH_MS. */
export const POLL_INTERVAL_MS = 5000;
export const WINDOW_EVERY = 12;
export const DASHBOARDS = 20;

export interface PollStats {
  polls: number;
  meanMs: number;
  maxMs: number;
  errors: number;
  firstError?: string;
}

/** `count` dashboards polling `url`, staggered over the interval, until stop(). */
export class DashboardPollers {
  #stopped = false;
  #loops: Promise<void>[] = [];
  #durations: number[] = [];
  #errors = 0;
  #firstError: string | undefined;
  /** The wake-ups of the loops sleeping between polls: stop() ends their sleep. */
  #sleeping = new Set<() => void>();

  constructor(
    readonly url: string,
    readonly count = DASHBOARDS,
    readonly intervalMs = POLL_INTERVAL_MS,
  ) {}

  start(): void {
    for (let i = 0; i < this.count; i++) this.#loops.push(this.#loop((i * this.intervalMs) / this.count));
  }

  async #loop(offsetMs: number): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, application_name: 'bench-dashboard' });
    client.on('error', () => {});
    await client.connect();
    try {
      await this.#sleep(offsetMs);
      for (let poll = 0; !this.#stopped; poll++) {
        const started = performance.now();
        try {
          // As the page: the live part every poll, the windows on the first and every
          // WINDOW_EVERY-th (staggered across dashboards by their offsets).
          for (const sql of poll % WINDOW_EVERY === 0 ? [...LIVE_SQL, ...OVERVIEW_SQL] : LIVE_SQL)
            await client.query(sql);
          this.#durations.push(performance.now() - started);
        } catch (error) {
          if (!this.#stopped) {
            this.#errors++;
            this.#firstError ??= error instanceof Error ? error.message : String(error);
          }
        }
        await this.#sleep(Math.max(0, this.intervalMs - (performance.now() - started)));
      }
    } finally {
      await client.end().catch(() => {});
    }
  }

  #sleep(ms: number): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#sleeping.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#sleeping.add(wake);
    });
  }

  /** Stops polling (idempotent; a loop between polls stops at once) and returns what was measured. */
  async stop(): Promise<PollStats> {
    this.#stopped = true;
    for (const wake of [...this.#sleeping]) wake();
    await Promise.all(this.#loops);
    const d = this.#durations;
    return {
      polls: d.length,
      meanMs: d.length ? d.reduce((a, b) => a + b, 0) / d.length : NaN,
      maxMs: d.length ? Math.max(...d) : NaN,
      errors: this.#errors,
      firstError: this.#firstError,
    };
  }
}
