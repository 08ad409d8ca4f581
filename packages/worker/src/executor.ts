/**
 * The executor: runs one task. It gives the task to its processor (processor.ts) within
 * the task type's run timeout (timeouts.ts), hands the outcome to the completer
 * (completer.ts, the one writer of a task's end), and ends the run (slots.ts) once the
 * outcome is recorded or the run is given up. A task's slot is free once its processor
 * is done (a step's once its call is answered): the completer records the outcome beside
 * the next tasks.
 *
 * Invariant: every started task is completed (success or failure), or its run is
 * interrupted (a transient error: counted, the task runs again after a backoff),
 * released, or its lease left to expire when the database cannot be reached. A task is
 * never recorded as failed because of a connection error. What an error means is decided
 * in error-class.ts only; what it does to a run is decided here once (#givenUp), whether
 * the processor, the completion or the step's call raised it:
 *
 *   released     at shutdown (Worker.stop): the late answer was expected to be
 *                refused; the next worker runs the task
 *   lease lost   taken over, or the task cancelled (cancellation.ts): nothing recorded
 *   transient    cut short by another process's crash of PostgreSQL: the lease is given
 *                back once the server answers (crash-notice.ts); a step call whose backend
 *                died without a word: the lease is left to expire; otherwise the run is
 *                interrupted (queues.interrupt_task)
 */
import type pg from 'pg';
import { interruptTask, releaseLeases } from '@org/queue-client';
import { lostLeaseReasons, TaskCancelledError } from './cancellation.js';
import type { Completer, CompletionSink, Settled } from './completer.js';
import { isCrashOfAnotherProcess, isSilentConnectionLoss, wasNotRun } from './crash-notice.js';
import { classifyError, errorMessage, isTransient, LeaseLostError } from './error-class.js';
import type { Logger } from './logger.js';
import type { ProcessorRegistry, TaskOutcome, TaskReport } from './processor.js';
import { abortRun, Context, runLog, type Running, type WorkerEmitter } from './run.js';
import type { Slots } from './slots.js';
import type { LocalQueue } from './heartbeats.js';
import { isThrottledError, recordThrottledRun, throttleCandidates } from './throttle.js';
import { TaskTimeoutError, type RunTimeouts } from './timeouts.js';
import { traceCompletion, traceTask, tracingEnabled } from './tracing.js';

/**
 * How long after a crash of PostgreSQL the worker tries to give back the leases of runs
 * the crash cut short (the server replays its WAL meanwhile), and how often.
 */
const CRASH_RECOVERY_MS = 30_000;
const RELEASE_RETRY_MS = 200;

export interface ExecutorOptions {
  pool: pg.Pool;
  log: Logger;
  registry: ProcessorRegistry;
  events: WorkerEmitter;
  completer: Completer;
  timeouts: RunTimeouts;
  slots: Slots;
  maxLeases: number;
  /** The worker's id: who reports a throttle. */
  workerId: string;
  /** The local queue: a throttle gives back its waiting tasks of the throttled type. */
  queue: LocalQueue;
  /** A lease was given back: its task is claimable again at once (Producer.notified). */
  notified(): void;
  /** The worker is stopping (Producer.stopping). */
  stopping(): boolean;
}

export class Executor {
  readonly #o: ExecutorOptions;

  constructor(options: ExecutorOptions) {
    this.#o = options;
  }

  /**
   * Called by the completer when an outcome is answered (or its round failed), in that
   * round: one object for every run, so a run waiting for its completion holds no promise,
   * closure or suspended async frame of its own (see where-time-goes.md, the worker's
   * memory).
   */
  readonly #sink: CompletionSink<Running> = {
    settled: (running, settled) => this.#answered(running, settled),
    failed: (running, error) => void this.#conclude(running, undefined, undefined, error),
  };

  /**
   * Runs an admitted task: its processor (#run), its outcome to the completer (#processed),
   * and the run ends (Slots.end) once the outcome is recorded or the run is given up. With
   * tracing, the task's span covers the run until it ends.
   */
  launch(running: Running): void {
    if (!tracingEnabled()) {
      this.#run(running);
      return;
    }
    void traceTask(
      running.task,
      () =>
        new Promise<void>((resolve) => {
          running.ended = resolve;
          this.#run(running);
        }),
    );
  }

  /** The run's task logger (made on first use: a line the level drops never makes it). */
  #taskLog(running: Running): Logger {
    return runLog(running, this.#o.log);
  }

  /**
   * Starts the processor; its outcome goes to #processed, an error it raises to #threw.
   * Chained, not awaited: a run holds no async frame while its processor runs.
   */
  #run(running: Running): void {
    const { task } = running;
    const { registry, timeouts, pool, log } = this.#o;
    const processor = registry.get(task.taskType);
    running.startedAt = Date.now();
    // Checked first, so that a line the level drops is not even built (two per task).
    if (log.isLevelEnabled('info'))
      this.#taskLog(running).info({ event: 'task_started', lease_count: task.leaseCount }, 'task started');
    if (!processor) {
      this.#processed(running, { outcome: 'failed', error: `no processor for task type ${task.taskType}` });
      return;
    }
    let outcome: Promise<TaskOutcome>;
    try {
      outcome = timeouts.bound(
        task.taskType,
        Promise.resolve(processor.process(new Context(running, pool, log))),
        (e) => {
          running.timedOut = true;
          abortRun(running, e);
        },
        task.timeoutMs,
      );
    } catch (error) {
      void this.#threw(running, error);
      return;
    }
    outcome.then(
      (o) => this.#processed(running, o),
      (error: unknown) => void this.#threw(running, error),
    );
  }

  /**
   * The processor raised: a timeout's failure recorded (#recordTimeout), a throttle
   * recorded, the run given up (#givenUp), or the task failed.
   */
  async #threw(running: Running, error: unknown): Promise<void> {
    const { task } = running;
    const { pool } = this.#o;
    let recording = false;
    try {
      if (!running.released && error instanceof TaskTimeoutError && running.timedOut) {
        recording = true;
        await this.#recordTimeout(running, error);
        return;
      }
      // The provider refused the work for now (throttle.ts): the throttle recorded, and the
      // run and the waiting tasks it covers (they would meet the same refusal) given back,
      // in one statement. Claims are held until the throttle is recorded (a claim that read
      // the queue before it committed would take tasks it covers), after the claim under
      // way has put its tasks in the local queue, so that they are candidates too. The
      // candidates (throttleCandidates) leave the local queue first, so that none starts
      // meanwhile; those not given back return to the queue.
      if (!running.released && !running.cancelled && isThrottledError(error)) {
        const { workerId, queue } = this.#o;
        const resume = await queue.holdClaims();
        try {
          const candidates = throttleCandidates(queue.waiting, error, task.taskType);
          queue.drop(new Set(candidates));
          const { result, released } = await recordThrottledRun(
            pool,
            task,
            error,
            workerId,
            this.#taskLog(running),
            candidates,
          );
          queue.restore(candidates.filter((t) => !released.has(t.taskId)));
          if (result === 'lease_lost') await this.#lostRun(running, Date.now() - running.startedAt);
        } finally {
          resume();
        }
        return;
      }
      if (await this.#givenUp(running, error, false)) return;
      this.#taskLog(running).error(
        { event: 'task_crashed', duration_ms: Date.now() - running.startedAt, err: errorMessage(error) },
        'processor threw',
      );
      recording = true;
      this.#processed(running, { outcome: 'failed', error: `worker error: ${errorMessage(error)}` });
    } finally {
      if (!recording) this.#o.slots.end(running);
    }
  }

  /**
   * The processor is done: its outcome to the completer, which answers through #sink (a
   * step's through its call, #record). A step keeps its slot while it runs in the
   * database; otherwise the slot is free now, and the completer records the outcome
   * beside the next tasks.
   */
  #processed(running: Running, outcome: TaskOutcome): void {
    if (outcome.step || tracingEnabled()) {
      if (!outcome.step) this.#o.slots.free(running);
      void this.#record(running, outcome);
      return;
    }
    this.#o.slots.free(running);
    this.#o.completer.record(running.task, outcome, running.startedAt, this.#sink, running);
  }

  /** The completer's answer (#sink): a recorded outcome ends the run here and now. */
  #answered(running: Running, settled: Settled): void {
    if (settled.result === 'lease_lost' || settled.result === 'unknown_task') {
      void this.#conclude(running, undefined, settled, undefined);
      return;
    }
    try {
      this.#reportCompleted(running, settled.report);
    } catch (error) {
      // (A listener of `completed` threw.) Not into the completer's round.
      void this.#conclude(running, undefined, undefined, error);
      return;
    }
    this.#o.slots.end(running);
  }

  /**
   * Records the outcome through a promise (a step's call, or a traced completion), then
   * ends the run.
   */
  async #record(running: Running, outcome: TaskOutcome): Promise<void> {
    const { task, startedAt } = running;
    let settled: Settled;
    try {
      // A step ends in its call (queues.run_steps), which takes the slot's other steps too.
      settled = await traceCompletion(outcome, (o) => this.#o.completer.complete(task, o, startedAt, running.slot));
    } catch (error) {
      await this.#conclude(running, outcome, undefined, error);
      return;
    }
    await this.#conclude(running, outcome, settled, undefined);
  }

  /**
   * What the completer answered (`settled`) or the error it met, then the run ends: the
   * outcome reported, the run given up (#givenUp), or a step's failed call recorded as its
   * failure. (`outcome`: the step's, when it was one.)
   */
  async #conclude(
    running: Running,
    outcome: TaskOutcome | undefined,
    settled: Settled | undefined,
    error: unknown,
  ): Promise<void> {
    const { task, startedAt } = running;
    const { completer } = this.#o;
    try {
      if (settled) {
        try {
          await this.#settled(running, settled);
          return;
        } catch (e) {
          error = e;
        }
      }
      if (await this.#givenUp(running, error, outcome?.step !== undefined)) return;
      let failed = error;
      if (outcome?.step) {
        // The step's call failed as a whole (a statement timeout): record the failure.
        const failure: TaskOutcome = {
          outcome: 'failed',
          error: `${outcome.step.functionName} raised: ${errorMessage(error)}`,
        };
        try {
          await this.#settled(running, await completer.complete(task, failure, startedAt));
          return;
        } catch (second) {
          failed = second;
        }
      }
      this.#taskLog(running).error(
        { event: 'completion_failed', err: errorMessage(failed) },
        'could not complete; the lease will expire',
      );
    } finally {
      this.#o.slots.end(running);
    }
  }

  /** What the completer answered: the outcome recorded, the lease lost, or no such task. */
  async #settled(running: Running, { result, report }: Settled): Promise<void> {
    const { task } = running;
    const durationMs = Date.now() - running.startedAt;
    if (result === 'lease_lost') {
      await this.#givenUp(running, new LeaseLostError(task), false);
      return;
    }
    if (result === 'unknown_task') {
      this.#taskLog(running).error(
        { event: 'completion_failed', duration_ms: durationMs },
        `task ${task.taskId} does not exist`,
      );
      return;
    }
    this.#reportCompleted(running, report);
  }

  /** An outcome recorded: logged, and the `completed` event. */
  #reportCompleted(running: Running, report: TaskReport): void {
    const durationMs = Date.now() - running.startedAt;
    // A validation failure is a business outcome, not an operator's alarm.
    const level = report.outcome === 'succeeded' || report.outcome === 'validation_failed' ? 'info' : 'warn';
    if (this.#o.log.isLevelEnabled(level))
      this.#taskLog(running)[level](
        {
          event: 'task_completed',
          outcome: report.outcome,
          duration_ms: durationMs,
          error: report.error,
          note: report.note,
        },
        `task ${report.outcome}`,
      );
    this.#o.events.emit('completed', running.task, report, durationMs);
  }

  /**
   * A run that ends with nothing of its own to record, for `error` (see the top of this
   * file); `step`: the error is a step call's. False when the error is none of these: the
   * task failed, and the caller records that.
   */
  async #givenUp(running: Running, error: unknown, step: boolean): Promise<boolean> {
    const durationMs = Date.now() - running.startedAt;
    const log = this.#taskLog(running);
    if (running.released) {
      log.info({ event: 'task_released', duration_ms: durationMs }, 'released at shutdown; runs again elsewhere');
      return true;
    }
    const kind = classifyError(error);
    if (kind === 'lease_lost' || running.cancelled) {
      await this.#lostRun(running, durationMs);
      return true;
    }
    if (kind !== 'transient') return false;
    if (isCrashOfAnotherProcess(error) || wasNotRun(error)) {
      // Its connection got the notice of another process's crash, or its call never
      // reached the server: the run did not cause the crash.
      log.warn(
        { event: 'crash_elsewhere', duration_ms: durationMs, err: errorMessage(error) },
        'PostgreSQL crashed (another process); the lease is given back once it answers',
      );
      await this.#releaseWhenBack(running);
    } else if (step && isSilentConnectionLoss(error)) {
      // Its backend died without a word: perhaps of this very call. Like a worker that
      // died, the lease is left to expire and counts towards MAX_LEASES; the steps of
      // the call run again, each a suspect in a call of its own.
      log.warn(
        { event: 'step_connection_died', duration_ms: durationMs, err: errorMessage(error) },
        "the step call's connection died without a word (it may have crashed PostgreSQL); the lease will expire",
      );
    } else {
      log.warn(
        { event: 'task_interrupted', duration_ms: durationMs, err: errorMessage(error) },
        'transient error; task will run again',
      );
      await this.#interrupt(running, errorMessage(error));
    }
    return true;
  }

  /**
   * A run whose lease was lost (taken over, or the task cancelled): nothing recorded. A
   * completion refused before a heartbeat told of a cancel asks why (cancellation.ts).
   */
  async #lostRun(running: Running, durationMs: number): Promise<void> {
    if (!running.cancelled) {
      const reason = (await lostLeaseReasons(this.#o.pool, [running.task], this.#o.log)).get(running.task);
      if (reason instanceof TaskCancelledError) running.cancelled = reason;
    }
    if (running.cancelled) {
      this.#taskLog(running).info(
        { event: 'task_cancelled', duration_ms: durationMs, reason: running.cancelled.reason },
        'task cancelled while running; nothing recorded',
      );
      this.#o.events.emit('cancelled', running.task, running.cancelled.reason);
      return;
    }
    this.#taskLog(running).warn(
      { event: 'lease_lost', duration_ms: durationMs },
      'lease lost to another worker; nothing recorded',
    );
    this.#o.events.emit('lease_lost', running.task);
  }

  /**
   * A run whose timeout passed (timeouts.ts): its failure is recorded now, fenced by its
   * lease; the run ends (and its slot is given back) only once the processor returns.
   */
  async #recordTimeout(running: Running, error: TaskTimeoutError): Promise<void> {
    const { task, startedAt } = running;
    try {
      this.#taskLog(running).warn({ event: 'task_timed_out', timeout_ms: error.timeoutMs }, error.message);
      this.#o.events.emit('timed_out', task, error.timeoutMs);
      const failure: TaskOutcome = { outcome: 'failed', error: error.message };
      await this.#settled(
        running,
        await traceCompletion(failure, (o) => this.#o.completer.complete(task, o, startedAt)),
      );
    } catch (second) {
      this.#taskLog(running).error(
        { event: 'completion_failed', err: errorMessage(second) },
        'could not record the timeout; the lease will expire',
      );
    } finally {
      await error.late.catch(() => {});
      if (this.#o.log.isLevelEnabled('info'))
        this.#taskLog(running).info(
          { event: 'timed_out_run_returned', duration_ms: Date.now() - startedAt },
          'the timed-out run returned; its slot is free',
        );
      this.#o.slots.end(running);
    }
  }

  /**
   * Gives the lease back once the database answers again (a crash of PostgreSQL: the
   * server is recovering). A release does not count: the task runs again at once, and
   * neither this lease nor an interruption counts towards abandonment. Tried every
   * RELEASE_RETRY_MS for up to CRASH_RECOVERY_MS (once when stopping); after that, the
   * lease expires.
   */
  async #releaseWhenBack(running: Running): Promise<void> {
    const { task } = running;
    const deadline = Date.now() + CRASH_RECOVERY_MS;
    for (;;) {
      try {
        await releaseLeases(this.#o.pool, [{ taskId: task.taskId, taskLeaseId: task.taskLeaseId }]);
        this.#o.events.emit('released', [task.taskId]);
        // Claimable again at once: look for it now, not at the next poll.
        this.#o.notified();
        return;
      } catch (error) {
        if (this.#o.stopping() || Date.now() > deadline || !isTransient(error)) {
          this.#taskLog(running).warn(
            { event: 'release_failed', err: errorMessage(error) },
            'could not release; the lease will expire',
          );
          return;
        }
      }
      await new Promise((resolve) => setTimeout(resolve, RELEASE_RETRY_MS));
    }
  }

  /**
   * A run cut short by a transient error: recorded and counted by the queue, which runs the
   * task again after a backoff or abandons it once this keeps happening (MAX_LEASES
   * times). If even that cannot be recorded, the lease expires, which counts too.
   */
  async #interrupt(running: Running, message: string): Promise<void> {
    const { task } = running;
    try {
      const result = await interruptTask(this.#o.pool, {
        taskId: task.taskId,
        taskLeaseId: task.taskLeaseId,
        errorMessage: message,
        maxInterruptions: this.#o.maxLeases,
      });
      this.#taskLog(running)[result === 'abandoned' ? 'error' : 'info'](
        { event: 'task_interruption_recorded', result },
        `interruption recorded: ${result}`,
      );
      // Taken over, or cancelled meanwhile (#lostRun tells which).
      if (result === 'lease_lost') await this.#lostRun(running, Date.now() - running.startedAt);
    } catch (error) {
      this.#taskLog(running).warn(
        { event: 'interrupt_failed', err: errorMessage(error) },
        'could not record the interruption; the lease will expire',
      );
    }
  }
}
