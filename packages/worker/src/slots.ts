/**
 * The worker's slots (CONCURRENCY of them) and the runs that hold them: one table of runs
 * by lease, shared by the producer (producer.ts: it admits waiting tasks into free
 * slots), the executor (executor.ts: it frees a slot once the processor is done and ends
 * the run once its outcome is recorded) and the heartbeats (heartbeats.ts: they extend
 * the runs' leases).
 *
 * One run of a task at a time: runs are keyed by lease, and a lease of a task this worker
 * is still running (its earlier lease was revoked or expired, and the worker claimed the
 * task again) is not startable until the earlier run has ended. Likewise one call at a
 * time for steps of the same task type and payload (the runs of one process supervisor):
 * a second is not startable until the first one's call is answered.
 *
 * The slots also keep the pace: how long tasks lately kept their slots (`slotMs`), which
 * sizes the local queue.
 */
import type { ClaimedTask } from '@org/queue-client';
import type { ProcessorRegistry } from './processor.js';
import type { Running, StepSlot } from './run.js';

export interface SlotEvents {
  /** A slot was given back: the local queue may start a task in it, and claim again. */
  freed(): void;
  /** A run is over: a later lease of its task (or a step of its key) may start. */
  ended(task: ClaimedTask): void;
}

/**
 * A run's key: its task and lease. Every task of one claim shares the claim's lease id
 * (queues.claim_lease), so a lease id alone does not name a run.
 */
export function runKey(task: { taskId: string; taskLeaseId: string }): string {
  return `${task.taskId}/${task.taskLeaseId}`;
}

export class Slots {
  /** Started (or starting) tasks until their outcome is recorded. */
  readonly runs = new Set<Running>();
  readonly concurrency: number;
  readonly #registry: ProcessorRegistry;
  readonly #events: SlotEvents;
  /** How many runs of each task are in `runs` (a second waits in the local queue). */
  readonly #runningTasks = new Map<string, number>();
  /**
   * Steps in calls under way, by step key: the task type and payload. Runs of one process
   * supervisor have the same payload and lock the same root row, so a second one waits in
   * the local queue until the first one's call is answered, rather than in the database,
   * where it would hold up every other step of its call (and the calls waiting on those).
   */
  readonly #stepCalls = new Map<string, number>();
  readonly #stepKeys = new WeakMap<ClaimedTask, string>();
  /** Slots in use: tasks starting or in their processor. */
  #busy = 0;
  /** Told once no run is left (whenIdle). */
  #idle: (() => void)[] = [];
  /** Moving average of how long a task keeps its slot, ms (undefined until one ran). */
  #slotMs: number | undefined;

  constructor(concurrency: number, registry: ProcessorRegistry, events: SlotEvents) {
    this.concurrency = concurrency;
    this.#registry = registry;
    this.#events = events;
  }

  /** Slots in use. */
  get busy(): number {
    return this.#busy;
  }

  /** How long a task lately kept its slot, ms; undefined until one ran. */
  get slotMs(): number | undefined {
    return this.#slotMs;
  }

  /** Every waiting task is startable at once: no run or step call holds one back. */
  get unconstrained(): boolean {
    return this.#runningTasks.size === 0 && this.#stepCalls.size === 0;
  }

  /** Runs past their timeout whose processors have not returned. */
  timedOut(): number {
    let n = 0;
    for (const r of this.runs) if (r.timedOut) n++;
    return n;
  }

  /** Resolves once no run is left (every run in `runs` has ended). */
  whenIdle(): Promise<void> {
    if (this.runs.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  runsSteps(task: ClaimedTask): boolean {
    return this.#registry.get(task.taskType)?.runsSteps === true;
  }

  /** Whether `task` may start now (one run per task, one call per step key). */
  startable(task: ClaimedTask): boolean {
    if (this.#runningTasks.has(task.taskId)) return false;
    return this.#stepCalls.size === 0 || !this.runsSteps(task) || !this.#stepCalls.has(this.#stepKey(task));
  }

  /** Takes a slot for `task` (or a place in a shared `slot`): it counts as running from now on. */
  admit(task: ClaimedTask, slot?: StepSlot): Running {
    const running: Running = {
      task,
      startedAt: Date.now(),
      lost: false,
      released: false,
      freed: false,
    };
    if (slot) running.slot = slot;
    this.runs.add(running);
    this.#runningTasks.set(task.taskId, (this.#runningTasks.get(task.taskId) ?? 0) + 1);
    if (!slot) this.#busy++;
    return running;
  }

  /** Takes one slot for the steps `tasks`, which run in one queues.run_steps call. */
  admitSteps(tasks: ClaimedTask[]): Running[] {
    const slot: StepSlot = { holders: tasks.length, size: tasks.length, startedAt: Date.now() };
    this.#busy++;
    // Steps of one key in this call run one after the other in its transaction: no wait.
    for (const task of tasks) {
      const key = this.#stepKey(task);
      this.#stepCalls.set(key, (this.#stepCalls.get(key) ?? 0) + 1);
    }
    return tasks.map((task) => this.admit(task, slot));
  }

  /** Gives back the run's slot (or its share of a shared one), once. */
  free(running: Running): void {
    if (running.freed) return;
    running.freed = true;
    const { slot } = running;
    if (slot) {
      // The shared slot is free once every step of its call is answered; each step
      // counts for its share of the call's time.
      if (--slot.holders > 0) return;
      const slotMs = (Date.now() - slot.startedAt) / slot.size;
      const keep = 0.9 ** slot.size;
      this.#slotMs = this.#slotMs === undefined ? slotMs : keep * this.#slotMs + (1 - keep) * slotMs;
    } else {
      const slotMs = Date.now() - running.startedAt;
      this.#slotMs = this.#slotMs === undefined ? slotMs : 0.9 * this.#slotMs + 0.1 * slotMs;
    }
    this.#busy--;
    this.#events.freed();
  }

  /** The run is over: it leaves `runs`, and a later lease of the same task may start. */
  end(running: Running): void {
    const { task } = running;
    running.progress?.end();
    this.runs.delete(running);
    const runs = (this.#runningTasks.get(task.taskId) ?? 1) - 1;
    if (runs > 0) this.#runningTasks.set(task.taskId, runs);
    else this.#runningTasks.delete(task.taskId);
    if (running.slot) {
      const key = this.#stepKey(task);
      const calls = (this.#stepCalls.get(key) ?? 1) - 1;
      if (calls > 0) this.#stepCalls.set(key, calls);
      else this.#stepCalls.delete(key);
    }
    this.free(running);
    running.ended?.();
    this.#events.ended(task);
    if (this.runs.size === 0 && this.#idle.length > 0) for (const resolve of this.#idle.splice(0)) resolve();
  }

  /** A step's key: its task type and payload (jsonb's text of a value is always the same). */
  #stepKey(task: ClaimedTask): string {
    let key = this.#stepKeys.get(task);
    if (key === undefined) {
      key = `${task.taskType}\u0000${JSON.stringify(task.payload)}`;
      this.#stepKeys.set(task, key);
    }
    return key;
  }
}
