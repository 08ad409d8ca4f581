/**
 * Records that tasks start, in the same instant they start, without waiting for the
 * database's answer.
 *
 * The queue must know which claimed tasks were started: when a worker dies, the leases of
 * its running tasks count towards abandonment and make those tasks suspects, while the
 * tasks that only waited in its local queue count for nothing (queues.task_lease_started).
 * A task therefore runs only after the statement that marks its start has been handed to
 * the operating system on a connection of its own: from then on the statement reaches the
 * database and commits even if this process is killed the next instant. The connection is
 * pipelined (node-postgres `pipeline: true`): a statement is written at once, even while
 * earlier ones are still being answered, so starting a task costs no round trip.
 *
 * The answer comes later and names the leases that were no longer current (the task was
 * taken over between its claim and its start); the worker aborts those runs, and their
 * completions are refused by the lease fence anyway.
 */
import pg from 'pg';
import { settleTasks, type ClaimedTask } from '@org/queue-client';
import { errorMessage } from './error-class.js';
import type { Logger } from './logger.js';

export interface StartRecord {
  /** Resolves once the statement is written to the socket; rejects when it cannot be sent. */
  written: Promise<void>;
  /** The lease ids of `tasks` that were no longer current (their runs must stop). */
  answer: Promise<Set<string>>;
}

export class StartRecorder {
  readonly #databaseUrl: string;
  readonly #log: Logger;
  readonly #statementTimeoutMs: number;
  #client: pg.Client | undefined;
  #connecting: Promise<pg.Client> | undefined;
  #closed = false;

  constructor(databaseUrl: string, log: Logger, statementTimeoutMs: number) {
    this.#databaseUrl = databaseUrl;
    this.#log = log;
    this.#statementTimeoutMs = statementTimeoutMs;
  }

  /** Marks `tasks` started: one statement, written before this call returns when connected. */
  record(tasks: ClaimedTask[]): StartRecord {
    const client = this.#client;
    if (client) {
      const answer = this.#send(client, tasks);
      return { written: this.#flushed(client), answer };
    }
    const sent = this.#connect().then((connected) => ({
      answer: this.#send(connected, tasks),
      written: this.#flushed(connected),
    }));
    return {
      written: sent.then((s) => s.written),
      answer: sent.then((s) => s.answer),
    };
  }

  async close(): Promise<void> {
    this.#closed = true;
    const client = this.#client ?? (await this.#connecting?.catch(() => undefined));
    this.#client = undefined;
    await client?.end().catch(() => {});
  }

  #send(client: pg.Client, tasks: ClaimedTask[]): Promise<Set<string>> {
    const byTask = new Map(tasks.map((t) => [t.taskId, t.taskLeaseId]));
    return settleTasks(
      client,
      tasks.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId })),
      [],
    ).then(({ lost }) => new Set(lost.map((taskId) => byTask.get(taskId)!)));
  }

  /** Resolves when everything written to the connection so far is in the kernel's hands. */
  #flushed(client: pg.Client): Promise<void> {
    // `connection` is node-postgres's wire-protocol writer; its stream is the socket.
    const socket = (client as unknown as { connection: { stream: NodeJS.WritableStream & { writableLength: number } } })
      .connection.stream;
    if (socket.writableLength === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = (error?: Error) => {
        socket.off('drain', onDrain);
        socket.off('close', onClose);
        if (error) reject(error);
        else resolve();
      };
      const onDrain = () => done();
      const onClose = () => done(new Error('start connection closed before the start was sent'));
      socket.once('drain', onDrain);
      socket.once('close', onClose);
    });
  }

  #connect(): Promise<pg.Client> {
    if (this.#closed) return Promise.reject(new Error('start recorder closed'));
    this.#connecting ??= (async () => {
      const client = new pg.Client({
        connectionString: this.#databaseUrl,
        application_name: 'queue-worker-starter',
        keepAlive: true,
        statement_timeout: this.#statementTimeoutMs,
        pipeline: true,
      });
      client.on('error', (error) => {
        this.#log.warn({ event: 'pool_error', err: errorMessage(error) }, 'start connection lost');
        if (this.#client === client) this.#client = undefined;
      });
      client.on('end', () => {
        if (this.#client === client) this.#client = undefined;
      });
      try {
        await client.connect();
      } finally {
        this.#connecting = undefined;
      }
      if (this.#closed) {
        await client.end().catch(() => {});
        throw new Error('start recorder closed');
      }
      this.#client = client;
      return client;
    })();
    return this.#connecting;
  }
}
