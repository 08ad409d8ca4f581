// PROCESSES=N: the pool keeps N worker processes working, a quarantine process and a
// spare waiting; a process that dies is replaced by the spare at once; poison tasks are
// abandoned while the pool stays up, killing the working processes at most twice and
// then only the quarantine; SIGTERM stops every process; a broken configuration or install
// stops the pool with a clear exit code; its own death leaves no orphans.
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { effects, enqueue, eventually, factsOf, installFixtures } from './support/fixtures.js';
import { logLines, startChild, type Child } from './support/child.js';

let db: TestDatabase;
const pools: Child[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
});
afterAll(async () => {
  for (const s of pools) {
    for (const pid of childPids(s.process.pid!)) kill(pid, 'SIGKILL');
    if (s.process.exitCode === null) s.process.kill('SIGKILL');
  }
  await db?.drop();
});

function pool(env: Record<string, string> = {}): Child {
  const child = startChild({
    DATABASE_URL: db.url('worker'),
    WORKER_ID: `sup${pools.length}`,
    PROCESSES: '2',
    CONCURRENCY: '2',
    POLL_INTERVAL_MS: '100',
    HEARTBEAT_INTERVAL_MS: '200',
    LEASE_SECONDS: '1',
    SHUTDOWN_GRACE_MS: '3000',
    ...env,
  });
  pools.push(child);
  return child;
}

/** Live (not zombie) processes whose parent is `pid`, from /proc. */
function childPids(pid: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // pid (comm) state ppid ...: comm may contain spaces, so split after the last ')'.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(ppid) === pid && state !== 'Z') pids.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

function kill(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

const events = (s: Child, event: string) => logLines(s.output()).filter((l) => l.event === event);
type Started = { pid: number; slot: number; worker_id: string; role: 'work' | 'quarantine' };
const started = (s: Child) => events(s, 'child_started') as Started[];
const working = (s: Child) => started(s).filter((e) => e.role === 'work');
const leasesOf = async (taskId: string) =>
  (
    await db.query('select worker_id from queues.task_lease_effective where task_id = $1 order by task_lease_id', [
      taskId,
    ])
  ).rows.map((r) => r.worker_id as string);

describe('PROCESSES: the pool', () => {
  it('runs N working processes, a quarantine and a spare; a killed process is replaced by the spare at once', async () => {
    const s = pool({ WORKER_ROLE: 'slow,db_function' });
    await eventually(
      () => started(s).length === 3 && childPids(s.process.pid!).length === 4,
      'two working processes, a quarantine and a spare',
    );
    expect(started(s).map((e) => [e.slot, e.role])).toEqual(
      expect.arrayContaining([
        [0, 'work'],
        [1, 'work'],
        [2, 'quarantine'],
      ]),
    );
    const active = started(s).map((e) => e.pid);
    const [spare] = childPids(s.process.pid!).filter((pid) => !active.includes(pid));
    expect(spare).toBeDefined();

    // A task in flight on one process; that process is killed.
    const id = await enqueue(db, 'slow', { ms: 1500 });
    await eventually(async () => (await leasesOf(id)).length === 1, 'the task leased');
    const [holder] = await leasesOf(id);
    const victim = working(s).find((e) => e.worker_id === holder)!;
    expect(victim).toBeDefined();
    kill(victim.pid, 'SIGKILL');

    // The spare (already started) takes the victim's slot, and a new spare is started.
    await eventually(() => started(s).length === 4, 'the spare working');
    const replacement = started(s)[3];
    expect(replacement.pid).toBe(spare);
    expect(replacement.slot).toBe(victim.slot);
    expect(replacement.worker_id).not.toBe(victim.worker_id);
    const exited = events(s, 'child_exited');
    expect(exited).toHaveLength(1);
    expect(exited[0]).toMatchObject({
      pid: victim.pid,
      worker_id: victim.worker_id,
      signal: 'SIGKILL',
      state: 'active',
    });
    await eventually(() => childPids(s.process.pid!).length === 4, 'a new spare');
    expect(childPids(s.process.pid!)).not.toContain(victim.pid);

    // The killed process's task comes back when its lease expires, and work goes on.
    await eventually(
      async () => (await factsOf(db, id)).outcome !== null,
      'the task completed by another process',
      20_000,
    );
    expect(await factsOf(db, id)).toEqual({ outcome: 'succeeded', errors: [], leases: 2 });
    expect((await leasesOf(id))[1]).not.toBe(victim.worker_id);
    const step = await enqueue(db, 'db_function', { db_function: 'fixture.step', key: 'after-the-kill' });
    await eventually(async () => (await factsOf(db, step)).outcome === 'succeeded', 'a step after the kill');
    expect(await effects(db, 'after-the-kill')).toBe(1);

    // SIGTERM: every process stops, exit 0.
    const pids = childPids(s.process.pid!);
    s.process.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    await eventually(() => pids.every((pid) => !alive(pid)), 'every child gone');
    expect(events(s, 'pool_stopped')).toHaveLength(1);
    expect(events(s, 'worker_stopped')).toHaveLength(3);
  });

  it('poison tasks: each death is replaced, the task kills one working process, then only the quarantine, and is abandoned after MAX_LEASES counted deaths; the pool stays up', async () => {
    const id = await enqueue(db, 'crash', {});
    const s = pool({ WORKER_ROLE: 'crash,db_function', MAX_LEASES: '3' });
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'abandonment', 30_000);
    // Every death counts: the pool heard the task start each time.
    expect(await factsOf(db, id)).toEqual({
      outcome: 'abandoned',
      errors: ['abandoned: 3 leases expired without completion (max_leases 3)'],
      leases: 3,
    });
    const deaths = events(s, 'child_exited');
    expect(deaths.map((d) => d.signal)).toEqual(['SIGKILL', 'SIGKILL', 'SIGKILL']);
    // Blamed at its first death, in a working process; a repeat suspect from then on: the quarantine.
    expect(deaths.map((d) => d.role)).toEqual(['work', 'quarantine', 'quarantine']);
    const roles = new Map(started(s).map((e) => [e.worker_id, e.role]));
    expect((await leasesOf(id)).map((w) => roles.get(w))).toEqual(['work', 'quarantine', 'quarantine']);
    expect(s.process.exitCode).toBeNull();
    const step = await enqueue(db, 'db_function', { db_function: 'fixture.step', key: 'after-the-poison' });
    await eventually(async () => (await factsOf(db, step)).outcome === 'succeeded', 'a step after the poison');
    await eventually(
      () => childPids(s.process.pid!).length === 4,
      'two working processes, a quarantine and a spare again',
    );
    s.process.kill('SIGTERM');
    expect((await s.exited).code).toBe(0);
  });

  it("a killed process's running task is blamed for its death, the task waiting in its local queue is not", async () => {
    // One working process with one slot: it claims both tasks, runs one and keeps one waiting.
    const s = pool({
      WORKER_ROLE: 'slow',
      PROCESSES: '1',
      CONCURRENCY: '1',
      LEASE_SECONDS: '30',
      HEARTBEAT_INTERVAL_MS: '5000',
    });
    await eventually(() => started(s).length === 2, 'started');
    const ids = [await enqueue(db, 'slow', { ms: 60_000 }), await enqueue(db, 'slow', { ms: 60_000 })];
    const holders = async () => Promise.all(ids.map(async (id) => (await leasesOf(id))[0]));
    await eventually(async () => {
      const [a, b] = await holders();
      return a !== undefined && a === b;
    }, 'one process holding both');
    const [holder] = await holders();
    const victim = started(s).find((e) => e.worker_id === holder)!;
    expect(victim.role).toBe('work');
    kill(victim.pid, 'SIGKILL');
    await eventually(
      async () =>
        (
          await db.query(
            'select count(*)::int as n from queues.task_lease_revocation where task_id = any($1::bigint[])',
            [ids],
          )
        ).rows[0].n === 2,
      'both revoked',
    );
    const { rows } = await db.query(
      `select r.task_id, exists (select 1 from queues.task_lease_started m
                                  where m.task_id = r.task_id and m.task_lease_id = r.task_lease_id) as marked
         from queues.task_lease_revocation r where r.task_id = any($1::bigint[]) order by r.task_id`,
      [ids],
    );
    // Exactly one of the two ran (the other waited for the slot).
    expect(rows.map((r) => r.marked).sort()).toEqual([false, true]);
    s.process.kill('SIGTERM');
    await s.exited;
  });

  it('processes whose event loop a task blocks are killed once silent for a lease (at least 10 s) and replaced; the task is abandoned', async () => {
    const id = await enqueue(db, 'hang', {});
    const s = pool({ WORKER_ROLE: 'hang,db_function', MAX_LEASES: '1' });
    // Its first lease (unnamed) expires while the first process is blocked; the second
    // names it, blocks the other process and expires too: abandoned.
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'abandonment', 20_000);
    expect(await factsOf(db, id)).toEqual({
      outcome: 'abandoned',
      errors: ['abandoned: 1 leases expired without completion (max_leases 1)'],
      leases: 2,
    });
    // Both working processes are blocked: nothing but the watchdog brings them back.
    await eventually(() => events(s, 'child_exited').length === 2, 'both blocked processes killed', 30_000);
    const hung = events(s, 'child_hung');
    expect(hung).toHaveLength(2);
    for (const h of hung) expect(Number(h.silent_ms)).toBeGreaterThanOrEqual(10_000);
    expect(events(s, 'child_exited')).toEqual(
      hung.map((h) => expect.objectContaining({ worker_id: h.worker_id, signal: 'SIGKILL', hung: true, role: 'work' })),
    );
    const holders = new Set(await leasesOf(id));
    expect(new Set(hung.map((h) => h.worker_id))).toEqual(holders);
    // Their replacements work.
    const step = await enqueue(db, 'db_function', { db_function: 'fixture.step', key: 'after-the-hang' });
    await eventually(async () => (await factsOf(db, step)).outcome === 'succeeded', 'a step after the hang');
    s.process.kill('SIGTERM');
    expect((await s.exited).code).toBe(0);
  });

  it('QUARANTINE=0: no quarantine process; a poison task kills working processes until abandoned', async () => {
    const id = await enqueue(db, 'crash', {});
    const s = pool({ WORKER_ROLE: 'crash,db_function', MAX_LEASES: '3', QUARANTINE: '0' });
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'abandonment', 30_000);
    expect(await factsOf(db, id)).toMatchObject({ outcome: 'abandoned', leases: 3 });
    expect(events(s, 'child_exited').map((d) => d.role)).toEqual(['work', 'work', 'work']);
    expect(started(s).some((e) => e.role === 'quarantine')).toBe(false);
    s.process.kill('SIGTERM');
    expect((await s.exited).code).toBe(0);
  });

  it('SIGKILL of the pool: its processes notice, stop, and leave no orphan', async () => {
    const s = pool({ WORKER_ROLE: 'db_function' });
    await eventually(() => started(s).length === 3 && childPids(s.process.pid!).length === 4, 'started');
    const pids = childPids(s.process.pid!);
    s.process.kill('SIGKILL');
    await s.exited;
    await eventually(() => pids.every((pid) => !alive(pid)), 'the orphans gone', 15_000);
    const { rows } = await db.query(
      `select count(*)::int as n from pg_stat_activity where application_name like 'queue-worker%' and datname = current_database()`,
    );
    expect(rows[0].n).toBe(0);
  });

  it('a role without a processor: the children exit 2, and so does the pool, at once', async () => {
    const s = pool({ WORKER_ROLE: 'fax' });
    expect((await s.exited).code).toBe(2);
    expect(s.output()).toMatch(/no processor for role\(s\) fax/);
    expect(events(s, 'child_exited').length).toBeGreaterThanOrEqual(1);
    expect(events(s, 'child_started')).toHaveLength(0);
  });

  it('processes that cannot start: restarts back off, then the pool gives up with exit 1', async () => {
    const s = pool({ WORKER_ROLE: 'db_function', TEST_DIE_BEFORE_READY: '1', PROCESSES: '1', SPARES: '0' });
    expect((await s.exited).code).toBe(1);
    expect(events(s, 'child_exited')).toHaveLength(5);
    expect(events(s, 'restart_delayed').map((e) => e.delay_ms)).toEqual([250, 500, 1000, 2000]);
    expect(events(s, 'pool_giving_up')).toHaveLength(1);
  });

  it('working processes that die at once are replaced at once up to PROCESSES + SPARES + the quarantine in a row, then restarts back off', async () => {
    // Two working processes, a quarantine and a spare: a poison task claimed by each
    // process as a backlog starts kills four within a second of their start.
    const s = pool({ WORKER_ROLE: 'db_function', TEST_DIE_WHEN_WORKING: '1', SPARES: '1' });
    await eventually(() => events(s, 'restart_delayed').length >= 3, 'three delayed restarts', 30_000);
    s.process.kill('SIGTERM');
    // (Its exit code is 1 when a process it had just started dies during the stop.)
    await s.exited;
    // The pool's log in order: the first three deaths are replaced at once, the next ones later.
    const log = s
      .output()
      .split('\n')
      .filter((l) => l.includes('"event":"child_exited"') || l.includes('"event":"restart_delayed"'))
      .map((l) => (l.includes('child_exited') ? 'death' : String(JSON.parse(l).delay_ms)));
    expect(log.slice(0, 10)).toEqual([
      'death',
      'death',
      'death',
      'death',
      'death',
      '250',
      'death',
      '500',
      'death',
      '1000',
    ]);
    // A process that cannot start still backs off from its first failure (see below).
  });

  it('METRICS_PORT: the process in slot i serves METRICS_PORT + i, the quarantine METRICS_PORT + PROCESSES', async () => {
    const { freePort } = await import('@org/db-tools');
    let port = await freePort();
    // Three consecutive free ports.
    for (let i = 0; i < 20 && !((await portFree(port + 1)) && (await portFree(port + 2))); i++) port = await freePort();
    const s = pool({ WORKER_ROLE: 'db_function', METRICS_PORT: String(port) });
    await eventually(() => started(s).length === 3, 'started');
    for (const [slot, p] of [
      [0, port],
      [1, port + 1],
      [2, port + 2],
    ] as const) {
      const worker = started(s).find((e) => e.slot === slot)!;
      const body = await fetch(`http://127.0.0.1:${p}/metrics`).then((r) => r.text());
      expect(body).toContain(`worker_id="${worker.worker_id}"`);
    }
    s.process.kill('SIGTERM');
    expect((await s.exited).code).toBe(0);
  });
});

describe('PROCESSES: configuration', () => {
  it.each([
    ['PROCESSES zero', { PROCESSES: '0' }, /PROCESSES \(--processes\): must be at least 1, got "0"/],
    ['PROCESSES too many', { PROCESSES: '65' }, /PROCESSES \(--processes\): must be at most 64/],
    [
      'SPARES without PROCESSES',
      { PROCESSES: '', SPARES: '1' },
      /SPARES \(--spares\): only means something with PROCESSES/,
    ],
    ['SPARES not a number', { SPARES: 'one' }, /SPARES \(--spares\): must be a whole number between 0 and 8/],
    [
      'QUARANTINE without PROCESSES',
      { PROCESSES: '', QUARANTINE: '1' },
      /QUARANTINE \(--quarantine\): only means something with PROCESSES/,
    ],
    ['QUARANTINE not 0 or 1', { QUARANTINE: '2' }, /QUARANTINE \(--quarantine\): must be at most 1/],
    [
      'metrics ports past 65535',
      { METRICS_PORT: '65534', PROCESSES: '2' },
      /METRICS_PORT \(--metrics-port\): process i serves METRICS_PORT \+ i, and 65534 \+ 2 is above 65535/,
    ],
  ])('%s: a clear message and exit code 2, nothing started', async (_name, env, message) => {
    const s = pool(env);
    expect((await s.exited).code).toBe(2);
    expect(s.output()).toMatch(message);
    expect(events(s, 'pool_started')).toHaveLength(0);
  });
});
