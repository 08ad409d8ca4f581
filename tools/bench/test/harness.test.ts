// A tiny run of the whole benchmark harness (all three systems, every workload, one
// trial, a few hundred tasks) against the test server: proves the pieces work and that
// every task is completed exactly once. Asserts on counts, never on timings.
import { describe, expect, inject, it } from 'vitest';
import { runBench, SYSTEMS, WORKLOADS, type BenchResults } from '../src/harness.js';
import { renderReport } from '../src/report.js';

describe('benchmark harness (smoke)', () => {
  it('runs every workload for every system with exact counts', async () => {
    const ctx = inject('queueTestServer');
    const log: string[] = [];
    const options = {
      trials: 1,
      tasks: 200,
      batchSize: 100,
      enqueueConcurrency: 10,
      workerConcurrency: 10,
      latencyRate: 20,
      latencyDurationMs: 1_500,
      historyRows: 2_000,
      processes: 20,
      pgbenchSeconds: 1,
      pgbenchClients: 2,
      systems: [...SYSTEMS],
      workloads: [...WORKLOADS],
      log: (line: string) => log.push(line),
    };
    const results: BenchResults = await runBench(
      {
        rootUrl: ctx.rootUrl,
        dbUsers: ctx.dbUsers,
        dbUserPasswords: ctx.dbUserPasswords,
        template: ctx.template,
        prefix: `${ctx.prefix}bench_`,
      },
      options,
    );

    // Every anomaly but a late producer: its schedule (an open loop, 20 a second) is the
    // machine's to keep, and a loaded machine may fall behind it; the full run reports it.
    const anomalies = results.anomalies.filter((a) => !a.message.startsWith('producer fell behind its schedule'));
    expect(anomalies, log.join('\n')).toEqual([]);

    // Every drain, enqueue and latency run: each task completed (or enqueued) exactly once,
    // and each handler ran once per task.
    const byKey = new Map(results.checks.map((c) => [`${c.workload}|${c.subject}`, c]));
    for (const system of SYSTEMS) {
      for (const workload of ['enqueue_single', 'enqueue_batch', 'drain_1p', 'drain_2p']) {
        const check = byKey.get(`${workload}|${system}`);
        expect(check, `${workload} ${system}`).toBeDefined();
        expect({ completed: check!.completed, handled: check!.handled }, `${workload} ${system}`).toEqual({
          completed: 200,
          handled: 200,
        });
      }
      const latency = byKey.get(`latency|${system}`)!;
      expect(latency.completed).toBe(latency.expected);
      expect(latency.handled).toBe(latency.expected);
      expect(latency.expected).toBe(30);
    }
    for (const workload of ['drain_1p', 'drain_2p', 'history_drain', 'steps']) {
      const check = byKey.get(`${workload}|ours`)!;
      expect({ completed: check.completed, handled: check.handled }, workload).toEqual({
        completed: 200,
        handled: 200,
      });
      if (check.extra?.leases !== undefined) expect(check.extra).toMatchObject({ leases: 200, pending: 0, errors: 0 });
    }
    const processes = byKey.get('processes|ours')!;
    expect(processes.completed).toBe(20);
    expect(processes.extra).toMatchObject({ emails: 20, failed: 0, errors: 0 });

    // Every metric has a value for every system that takes part in it.
    const metrics = new Set(results.measurements.map((m) => `${m.metric}|${m.subject}`));
    for (const system of SYSTEMS) {
      for (const metric of ['enqueue_single', 'enqueue_batch', 'drain_1p', 'drain_2p', 'latency_p99', 'rss_1p_mb']) {
        expect(metrics.has(`${metric}|${system}`), `${metric} ${system}`).toBe(true);
      }
    }
    for (const metric of ['history_drain', 'steps', 'processes', 'dashboard_poll_ms'])
      expect(metrics.has(`${metric}|ours`), metric).toBe(true);
    expect(metrics.has('pgbench_tps|postgres')).toBe(true);

    // The report renders with the results table.
    const report = renderReport(results, {
      mode: 'quick',
      options,
      durationS: 1,
      machine: 'test',
      versions: { node: process.version, node22: 'v22', 'graphile-worker': 'x', 'pg-boss': 'y' },
    });
    expect(report).toContain('| 3a. Drain 200, 1 process × 10 | tasks/s |');
  }, 300_000);
});
