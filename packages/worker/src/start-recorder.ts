/**
 * Records that tasks start, in the same instant they start: without waiting for the
 * database's answer for tasks that run in the worker, and durably before they run for
 * steps (see below).
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
 * At most PIPELINE_DEPTH statements wait for their answer at a time. Starts asked for
 * meanwhile wait too, and go together in the next statement once an answer comes: under
 * load, one statement marks many starts, and the marks never lag far behind the runs.
 *
 * The answer comes later and names the leases that were no longer current (the task was
 * taken over between its claim and its start, or its completion, recorded on another
 * connection, committed first); the worker aborts those of them still running, and their
 * completions are refused by the lease fence anyway.
 *
 * A worker has two recorders. The marks of tasks that run in the worker commit
 * asynchronously (synchronous_commit off): a mark costs no WAL flush, and the task runs as
 * soon as its mark is written. If PostgreSQL itself crashes, the marks of the last moments
 * before the crash may be lost, and those leases then count as never started; such a task
 * cannot have caused the crash (it ran in the worker), and completions, which do wait for
 * the flush, are not affected.
 *
 * The marks of steps (db_function tasks, which run inside PostgreSQL and may crash it)
 * commit synchronously, and a step runs only once its mark is answered: flushed to disk
 * (and to a synchronous standby) before the step can crash the server, so the lease of a
 * step that crashes PostgreSQL counts as started and towards MAX_LEASES (see
 * crash-notice.ts). Under load one such mark covers the steps of many calls.
 */
import pg from 'pg';
import { isResultTypeChange, markStarted, type ClaimedTask } from '@org/queue-client';
import { errorMessage } from './error-class.js';
import type { Logger } from './logger.js';

export interface StartRecord {
  /** Resolves once the statement is written to the socket; rejects when it cannot be sent. */
  written: Promise<void>;
  /** The lease ids of `tasks` that were no longer current (their runs must stop). */
  answer: Promise<Set<string>>;
}

/** Most mark statements unanswered at a time. */
export const PIPELINE_DEPTH = 4;

/** Starts waiting for a place in the pipeline: they go in one statement. */
class Group {
  readonly tasks: ClaimedTask[] = [];
  readonly written: Promise<void>;
  readonly answer: Promise<Set<string>>;
  settleWritten!: (error?: Error) => void;
  settleAnswer!: (lost: Set<string> | Error) => void;

  constructor() {
    this.written = new Promise((resolve, reject) => {
      this.settleWritten = (error) => (error === undefined ? resolve() : reject(error));
    });
    this.answer = new Promise((resolve, reject) => {
      this.settleAnswer = (lost) => (lost instanceof Error ? reject(lost) : resolve(lost));
    });
    // Nobody may be listening yet; a rejection is reported through the other promises.
    this.written.catch(() => {});
    this.answer.catch(() => {});
  }
}

export class StartRecorder {
  readonly #databaseUrl: string;
  readonly #log: Logger;
  readonly #statementTimeoutMs: number;
  #client: pg.Client | undefined;
  #connecting: Promise<pg.Client> | undefined;
  #closed = false;
  #inFlight = 0;
  #scheduled = false;
  /** Starts asked for while the pipeline was full (or the connection was down). */
  #waiting: Group | undefined;

  readonly #synchronous: boolean;

  /** `synchronous`: marks commit synchronously (for steps); otherwise asynchronously. */
  constructor(databaseUrl: string, log: Logger, statementTimeoutMs: number, options: { synchronous?: boolean } = {}) {
    this.#databaseUrl = databaseUrl;
    this.#log = log;
    this.#statementTimeoutMs = statementTimeoutMs;
    this.#synchronous = options.synchronous === true;
  }

  /**
   * Marks `tasks` started. While earlier marks are unanswered (a busy worker), the starts
   * asked for in one turn of the event loop go in one statement, written at the end of
   * that turn (or, when PIPELINE_DEPTH statements are unanswered, when the next answer
   * comes). When none is, the statement is written as soon as the code running now is
   * done (a microtask): a task picked up by an idle worker does not wait behind the rest
   * of the turn (its other I/O, such as the loop's next question to the database).
   */
  record(tasks: ClaimedTask[]): StartRecord {
    const group = (this.#waiting ??= new Group());
    group.tasks.push(...tasks);
    if (!this.#scheduled) {
      this.#scheduled = true;
      const send = () => {
        this.#scheduled = false;
        this.#next();
      };
      if (this.#inFlight === 0) queueMicrotask(send);
      else setImmediate(send);
    }
    return {
      written: group.written,
      // Usually none was lost: then the group's (empty) answer is everyone's.
      answer: group.answer.then((lost) =>
        lost.size === 0 ? lost : new Set(tasks.filter((t) => lost.has(t.taskLeaseId)).map((t) => t.taskLeaseId)),
      ),
    };
  }

  /** Sends the waiting group if a place is free (connecting first if needed). */
  #next(): void {
    const group = this.#waiting;
    if (!group || this.#inFlight >= PIPELINE_DEPTH) return;
    this.#waiting = undefined;
    const send = (client: pg.Client) => {
      this.#send(client, group.tasks).then(group.settleAnswer, (error: Error) => group.settleAnswer(error));
      this.#flushed(client).then(() => group.settleWritten(), group.settleWritten);
    };
    if (this.#client) send(this.#client);
    else
      this.#connect().then(send, (error: Error) => {
        group.settleWritten(error);
        group.settleAnswer(error);
      });
  }

  async close(): Promise<void> {
    this.#closed = true;
    const client = this.#client ?? (await this.#connecting?.catch(() => undefined));
    this.#client = undefined;
    await client?.end().catch(() => {});
  }

  #send(client: pg.Client, tasks: ClaimedTask[]): Promise<Set<string>> {
    this.#inFlight++;
    const leases = tasks.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId }));
    // A migration changed the marking statement's result columns: PostgreSQL refused the
    // statement this connection had prepared, before it ran. The tasks have started, so
    // the marks are sent again (prepared anew): late, but recorded.
    const marked = markStarted(client, leases).catch((error: unknown) => {
      if (isResultTypeChange(error)) return markStarted(client, leases);
      throw error;
    });
    const answer = marked.then((lost) => {
      if (lost.length === 0) return new Set<string>();
      const byTask = new Map(tasks.map((t) => [t.taskId, t.taskLeaseId]));
      return new Set(lost.map((taskId) => byTask.get(taskId)!));
    });
    const answered = () => {
      this.#inFlight--;
      this.#next();
    };
    answer.then(answered, answered);
    return answer;
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
        application_name: this.#synchronous ? 'queue-worker-step-starter' : 'queue-worker-starter',
        keepAlive: true,
        statement_timeout: this.#statementTimeoutMs,
        options: `-c synchronous_commit=${this.#synchronous ? 'on' : 'off'}`,
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
