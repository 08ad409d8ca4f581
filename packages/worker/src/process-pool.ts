/**
 * The process pool (PROCESSES=N): keeps N worker processes working, plus SPARES
 * processes started ahead that wait with their modules loaded. When a worker process dies
 * (a poison task that kills it or exhausts its heap, a bug), a waiting spare takes its
 * place at once: the capacity lost to a crash is one IPC message rather than a process
 * start-up (module loading and JIT warm-up, ~0.3 s of CPU). A new spare then starts in
 * the background.
 *
 * Blame: before a child starts tasks it sends every task it runs or is about to start
 * ('running', written to the channel before the tasks start). When it dies, onDeath gets
 * that list once the channel has closed, and the revocation blames those tasks
 * (queues.revoke_worker_leases), not the ones that only waited in its local queue.
 *
 * Hung processes: a working child sends 'alive' every second from its event loop; one
 * silent for `hungAfterMs` (a lease's length, at least 10 s: its leases have expired
 * by then, so it holds nothing it could still finish) is blocked (a task in an endless
 * synchronous loop) and is killed (SIGKILL) and replaced. (Its tasks came back when
 * their leases expired, and are counted as after any expiry.)
 *
 * Quarantine (QUARANTINE=1, the default): one more process, in slot N, claims only repeat
 * suspects (tasks already blamed for a death: queues.claim_tasks_at, suspects 'repeat'),
 * one at a time, and the N working processes claim none ('no_repeat'). A poison task
 * then kills one working process (the death that blames it) and from then on only the
 * quarantine process, until it is abandoned; a dead quarantine process is replaced as
 * any other.
 *
 *   child -> pool         { type: 'ready' }     configuration read, processors loaded
 *                         { type: 'started' }   the worker is claiming
 *                         { type: 'alive' }     every second while it works
 *                         { type: 'running', tasks }  sent before tasks start (and
 *                                               written to the channel before they do):
 *                                               every task it runs or is about to start
 *   pool -> child         { type: 'activate', workerId, slot, role, suspects }
 *
 * Children run the same script with QUEUE_WORKER_POOL_MEMBER=1 (see main.ts). Each working
 * process holds a slot (0..N-1, and N for the quarantine); its worker id is
 * `<WORKER_ID>-<n>`, n counting the processes started, and it serves metrics on
 * METRICS_PORT + slot.
 *
 * Restarts: a process that worked for a second or more is replaced at once, and so are
 * up to N + SPARES (+ 1 with the quarantine) consecutive processes that die within a
 * second of starting work (a poison task claimed by each process at once, as a backlog
 * that holds one starts, kills them all). Beyond those, and from the first process that dies before it is ready, they
 * are replaced after 0.25 s, 0.5 s, ... up to 10 s; five in a row that die before ready
 * stop the pool with exit code 1 (the installation is broken, restarting cannot
 * help). A child that exits with code 2 found the configuration invalid: the pool
 * stops and exits 2.
 *
 * stop(): SIGTERM to every child (each finishes or releases its tasks within its grace
 * period), then resolves with 0 when every working child exited 0, else 1.
 */
import { fork, type ChildProcess } from 'node:child_process';
import type { ClaimSuspects } from '@org/queue-client';
import type { Logger } from './logger.js';

export const POOL_MEMBER_ENV = 'QUEUE_WORKER_POOL_MEMBER';

/** What an activated child does: work (its claims take no repeat suspect beside a quarantine), or quarantine. */
export type PoolRole = 'work' | 'quarantine';
export type PoolMessage = {
  type: 'activate';
  workerId: string;
  slot: number;
  role: PoolRole;
  suspects: ClaimSuspects;
};
/** running: every task the child runs or is about to start, as [task id, ms since the epoch], sent before it starts them. */
export type ChildMessage =
  | { type: 'ready' }
  | { type: 'started' }
  | { type: 'alive' }
  | { type: 'running'; tasks: [taskId: string, startedAtMs: number][] };

export interface ProcessPoolOptions {
  /** The script each child runs (the CLI itself), with `args`. */
  script: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  processes: number;
  spares: number;
  /** Run a quarantine process (slot `processes`) beside the working ones. */
  quarantine: boolean;
  /** A working child silent (no message) this long is blocked, and is killed. */
  hungAfterMs: number;
  /** Worker ids are `<workerIdPrefix>-<n>`. */
  workerIdPrefix: string;
  logger: Logger;
  /**
   * Called when a working process died: give back what it held (its leases). `running`:
   * the tasks it last said it ran or was about to start (task id -> start, ms since the
   * epoch), the only ones that can have killed it; read after its channel closed, so
   * every message it wrote is in.
   */
  onDeath?: (workerId: string, running: ReadonlyMap<string, number>) => Promise<void>;
}

interface Child {
  n: number;
  process: ChildProcess;
  forkedAt: number;
  readyAt?: number;
  state: 'starting' | 'ready' | 'active' | 'exited';
  slot?: number;
  role?: PoolRole;
  workerId?: string;
  activatedAt?: number;
  /** Its last `running` message. */
  running: Map<string, number>;
  /** When it last sent a message (or was activated). */
  lastHeardAt: number;
  /** Killed for its silence. */
  hung?: boolean;
}

/** How often a working child says it is alive (main.ts). */
export const ALIVE_INTERVAL_MS = 1000;

const FAST_DEATH_MS = 1000;
const MAX_START_FAILURES = 5;

export class ProcessPool {
  readonly #options: ProcessPoolOptions;
  readonly #log: Logger;
  readonly #children = new Set<Child>();
  readonly #slots: (Child | undefined)[];
  readonly #timers = new Set<NodeJS.Timeout>();
  #watch: NodeJS.Timeout | undefined;
  #count = 0;
  #startFailures = 0;
  #fastDeaths = 0;
  #stopping = false;
  #exitCode = 0;
  #resolveDone!: (code: number) => void;
  readonly #done = new Promise<number>((resolve) => (this.#resolveDone = resolve));

  constructor(options: ProcessPoolOptions) {
    this.#options = options;
    this.#log = options.logger.child({ component: 'process_pool' });
    this.#slots = new Array<Child | undefined>(options.processes + (options.quarantine ? 1 : 0)).fill(undefined);
  }

  /** Starts the children; resolves with the exit code once stopped and every child has exited. */
  run(): Promise<number> {
    const { processes, spares, quarantine } = this.#options;
    this.#log.info(
      { event: 'pool_started', processes, spares, quarantine },
      `process pool of ${processes} worker process(es), ${spares} spare(s)${quarantine ? ' and a quarantine process' : ''}`,
    );
    this.#fill(0);
    this.#watch = setInterval(() => this.#killHung(), ALIVE_INTERVAL_MS);
    this.#watch.unref();
    return this.#done;
  }

  /** Kills the working children silent for hungAfterMs (their event loop is blocked). */
  #killHung(): void {
    const now = Date.now();
    for (const child of this.#children) {
      if (child.state !== 'active' || child.hung || now - child.lastHeardAt < this.#options.hungAfterMs) continue;
      child.hung = true;
      this.#log.error(
        { event: 'child_hung', pid: child.process.pid, worker_id: child.workerId, silent_ms: now - child.lastHeardAt },
        `worker process ${child.workerId} silent for ${now - child.lastHeardAt} ms (blocked); killing it`,
      );
      child.process.kill('SIGKILL');
    }
  }

  /** Graceful stop of every child (SIGTERM); later calls only log. */
  stop(reason: string): void {
    if (this.#stopping) {
      this.#log.warn({ event: 'signal', reason }, `${reason}: already stopping`);
      return;
    }
    this.#stopping = true;
    clearInterval(this.#watch);
    this.#log.info(
      { event: 'pool_stopping', reason, children: this.#children.size },
      `${reason}: stopping every worker process`,
    );
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    for (const child of this.#children) child.process.kill('SIGTERM');
    this.#settleIfDone();
  }

  #pending(): number {
    return this.#children.size + this.#timers.size;
  }

  /** Forks children until working + waiting + scheduled = slots + spares. */
  #fill(delayMs: number): void {
    const missing = this.#slots.length + this.#options.spares - this.#pending();
    for (let i = 0; i < missing; i++) {
      if (delayMs === 0) {
        this.#fork();
        continue;
      }
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        if (!this.#stopping) this.#fork();
      }, delayMs);
      this.#timers.add(timer);
    }
  }

  #fork(): void {
    const n = ++this.#count;
    const child: Child = {
      n,
      forkedAt: Date.now(),
      state: 'starting',
      running: new Map(),
      lastHeardAt: Date.now(),
      process: fork(this.#options.script, this.#options.args, { env: this.#options.env, stdio: 'inherit' }),
    };
    this.#children.add(child);
    child.process.on('message', (message: ChildMessage) => this.#onMessage(child, message));
    child.process.on('exit', (code, signal) => this.#onExit(child, code, signal));
    child.process.on('error', (error) => {
      this.#log.error({ event: 'child_error', n, err: error.message }, `worker process ${n}: ${error.message}`);
      // A fork that failed (EAGAIN, ENOMEM) emits no 'exit'.
      if (child.process.pid === undefined) this.#onExit(child, null, null);
    });
  }

  #onMessage(child: Child, message: ChildMessage): void {
    child.lastHeardAt = Date.now();
    if (message?.type === 'running' && Array.isArray(message.tasks)) {
      child.running = new Map(message.tasks);
    } else if (message?.type === 'ready' && child.state === 'starting') {
      child.state = 'ready';
      child.readyAt = Date.now();
      this.#startFailures = 0;
      this.#log.debug(
        { event: 'child_ready', pid: child.process.pid, start_ms: child.readyAt - child.forkedAt },
        'worker process ready',
      );
      this.#assign();
    } else if (message?.type === 'started' && child.state === 'active') {
      this.#log.info(
        {
          event: 'child_started',
          pid: child.process.pid,
          slot: child.slot,
          role: child.role,
          worker_id: child.workerId,
          waited_ms: child.activatedAt! - child.readyAt!,
          start_ms: Date.now() - child.activatedAt!,
        },
        `worker process ${child.workerId} ${child.role === 'quarantine' ? 'in quarantine' : 'working'} in slot ${child.slot}`,
      );
    }
  }

  /** Gives every free slot to a ready child, the longest waiting first (working slots before the quarantine). */
  #assign(): void {
    if (this.#stopping) return;
    for (let slot = 0; slot < this.#slots.length; slot++) {
      if (this.#slots[slot]) continue;
      const ready = [...this.#children].find((c) => c.state === 'ready');
      if (!ready) return;
      ready.state = 'active';
      ready.slot = slot;
      ready.role = slot < this.#options.processes ? 'work' : 'quarantine';
      ready.workerId = `${this.#options.workerIdPrefix}-${ready.n}`;
      ready.activatedAt = Date.now();
      ready.lastHeardAt = ready.activatedAt;
      this.#slots[slot] = ready;
      const message: PoolMessage = {
        type: 'activate',
        workerId: ready.workerId,
        slot,
        role: ready.role,
        suspects: ready.role === 'quarantine' ? 'repeat' : this.#options.quarantine ? 'no_repeat' : 'any',
      };
      ready.process.send(message);
    }
  }

  #onExit(child: Child, code: number | null, signal: NodeJS.Signals | null): void {
    if (child.state === 'exited') return;
    const was = child.state;
    child.state = 'exited';
    this.#children.delete(child);
    if (child.slot !== undefined && this.#slots[child.slot] === child) this.#slots[child.slot] = undefined;
    const now = Date.now();
    const fields = {
      event: 'child_exited',
      pid: child.process.pid,
      worker_id: child.workerId,
      slot: child.slot,
      role: child.role,
      state: was,
      hung: child.hung ?? false,
      code,
      signal,
      lived_ms: now - child.forkedAt,
    };

    if (this.#stopping) {
      if (was === 'active' && code !== 0 && this.#exitCode === 0) this.#exitCode = 1;
      this.#log.info(fields, `worker process ${child.workerId ?? child.n} exited (${signal ?? code})`);
      this.#settleIfDone();
      return;
    }
    if (code === 2) {
      this.#log.fatal(fields, 'a worker process found the configuration invalid; stopping');
      this.#exitCode = 2;
      this.stop('invalid configuration');
      return;
    }
    this.#log.error(
      fields,
      `worker process ${child.workerId ?? child.n} died (${signal ?? `exit code ${code}`}); replacing it`,
    );
    if (was === 'active' && child.workerId && this.#options.onDeath) {
      const workerId = child.workerId;
      const onDeath = this.#options.onDeath;
      // 'exit' may come before the channel's last messages are read: wait for it to close.
      const closed = child.process.connected
        ? new Promise<void>((resolve) => child.process.once('disconnect', () => resolve()))
        : Promise.resolve();
      closed
        .then(() => onDeath(workerId, child.running))
        .catch((error: unknown) =>
          this.#log.warn(
            { event: 'revoke_failed', worker_id: workerId, err: (error as Error).message },
            "could not revoke the dead process's leases; they will expire",
          ),
        );
    }
    if (was === 'starting') {
      this.#startFailures++;
      if (this.#startFailures >= MAX_START_FAILURES) {
        this.#log.fatal(
          { event: 'pool_giving_up', failures: this.#startFailures },
          `${this.#startFailures} worker processes in a row died before they were ready; stopping`,
        );
        this.#exitCode = 1;
        this.stop('worker processes cannot start');
        return;
      }
    }
    if (was === 'active') {
      this.#fastDeaths = now - child.activatedAt! < FAST_DEATH_MS ? this.#fastDeaths + 1 : 0;
    }
    // A waiting spare takes the free slot now; its replacement starts in the background.
    this.#assign();
    // A burst of fast deaths as long as the pool is wide is replaced at once.
    const burst = this.#slots.length + this.#options.spares;
    const failures = Math.max(this.#fastDeaths - burst, this.#startFailures);
    const delayMs = failures === 0 ? 0 : Math.min(250 * 2 ** (failures - 1), 10_000);
    if (delayMs > 0)
      this.#log.warn({ event: 'restart_delayed', delay_ms: delayMs, failures }, `restarting in ${delayMs} ms`);
    this.#fill(delayMs);
  }

  #settleIfDone(): void {
    if (this.#stopping && this.#children.size === 0) {
      this.#log.info({ event: 'pool_stopped', exit_code: this.#exitCode }, 'every worker process has stopped');
      this.#resolveDone(this.#exitCode);
    }
  }
}
