/**
 * The wake-up connection: LISTEN queues_task_ready, call `onWake` on every notification
 * and after every (re)connect (notifications sent while disconnected are lost). When the
 * connection drops it reconnects with jittered backoff; a periodic probe catches a
 * connection that died without telling us. Polling in the worker covers any gap.
 */
import pg from 'pg';
import type { Logger } from './logger.js';

export const CHANNEL = 'queues_task_ready';

export class TaskListener {
  #client: pg.Client | undefined;
  #stopped = false;
  #attempt = 0;
  #retry: NodeJS.Timeout | undefined;
  #probe: NodeJS.Timeout | undefined;

  constructor(
    private readonly connectionString: string,
    private readonly log: Logger,
    private readonly onWake: () => void,
    private readonly probeIntervalMs = 10_000,
  ) {}

  /** Connects (retrying in the background if the first attempt fails). */
  async start(): Promise<void> {
    await this.#connect();
    this.#probe = setInterval(() => void this.#checkAlive(), this.probeIntervalMs);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#retry);
    clearInterval(this.#probe);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => {});
  }

  /** The backend pid of the listening connection (for tests and diagnostics). */
  async backendPid(): Promise<number | undefined> {
    const client = this.#client;
    if (!client) return undefined;
    const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
    return rows[0]?.pid;
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return;
    const client = new pg.Client({
      connectionString: this.connectionString,
      keepAlive: true,
      application_name: 'queue-worker-listen',
    });
    client.on('notification', () => this.onWake());
    client.on('error', (error) => this.#lost(client, error));
    client.on('end', () => this.#lost(client, new Error('connection ended')));
    try {
      await client.connect();
      await client.query(`listen ${CHANNEL}`);
    } catch (error) {
      client.removeAllListeners('end');
      await client.end().catch(() => {});
      this.#scheduleReconnect(error);
      return;
    }
    if (this.#stopped) {
      await client.end().catch(() => {});
      return;
    }
    this.#client = client;
    if (this.#attempt > 0)
      this.log.info({ event: 'listen_reconnected', attempts: this.#attempt }, 'LISTEN connection restored');
    this.#attempt = 0;
    this.onWake();
  }

  #lost(client: pg.Client, error: Error): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    client.removeAllListeners('end');
    client.end().catch(() => {});
    if (!this.#stopped) this.#scheduleReconnect(error);
  }

  #scheduleReconnect(error: unknown): void {
    if (this.#stopped) return;
    this.#attempt++;
    const delay = Math.min(5000, 100 * 2 ** Math.min(this.#attempt, 6)) * (0.5 + Math.random() / 2);
    this.log.warn(
      {
        event: 'listen_lost',
        attempt: this.#attempt,
        retry_in_ms: Math.round(delay),
        err: String((error as Error)?.message ?? error),
      },
      'LISTEN connection lost; reconnecting',
    );
    clearTimeout(this.#retry);
    this.#retry = setTimeout(() => void this.#connect(), delay);
  }

  async #checkAlive(): Promise<void> {
    const client = this.#client;
    if (!client) return;
    try {
      await client.query('select 1');
    } catch (error) {
      this.#lost(client, error as Error);
    }
  }
}
