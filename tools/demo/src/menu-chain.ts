// The role-based worker system, end to end, in local mode: a fake menu platform listing a
// handful of new stores, one worker per role (each claiming only its role, as
// `WORKER_ROLE=<role> npm start` would), a store discovery created as the API does, the
// chain that SQL enqueues from each result (entry point -> products), the daily staggered
// resync, and the analytics refresh. Prints each task as it completes, then the facts.
import pg from 'pg';
import { enableLocalSchedules, type DatabaseUrls } from '@org/db-tools';
import { createHttpMenuPlatform, MENU_ROLES, menuProcessors, startFakeMenuPlatform } from '@org/menu-sync';
import { createLogger, Worker } from '@org/worker';
import { defaultRegistry } from '@org/worker/command';
import { providersFromEnv } from '@org/providers';

const say = (line: string) => process.stdout.write(`${line}\n`);

async function until(check: () => Promise<boolean>, what: string, ms = 120_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Runs the chain for `stores` new stores; resolves true when every step succeeded. */
export async function runMenuChainDemo(urls: DatabaseUrls, owner: pg.Client, stores: number): Promise<boolean> {
  const stamp = Date.now().toString(36);
  const fake = await startFakeMenuPlatform({
    stores,
    prefix: `demo${stamp}`,
    errorRate: 0.1,
    slowRate: 0.1,
    slowMs: 400,
    seed: 42,
  });
  const api = new pg.Client({ connectionString: urls.api });
  await api.connect();
  const workers: Worker[] = [];
  try {
    say(
      `\nRole-based worker system: a fake menu platform at ${fake.url} lists ${stores} new stores (10% of answers fail, 10% are slow).`,
    );
    say(`Schedules enabled (local mode): ${(await enableLocalSchedules(urls.api)).join(', ')}`);
    // Failed attempts are printed below; the workers' own logs only for errors.
    const logger = createLogger(process.env.LOG_LEVEL ?? 'error');
    const platform = createHttpMenuPlatform({ baseUrl: fake.url, timeoutMs: 5000 });
    const registry = defaultRegistry(providersFromEnv(process.env, logger), menuProcessors(platform));
    const ours = new Set<string>();
    for (const role of MENU_ROLES) {
      const worker = new Worker({
        databaseUrl: urls.worker,
        roles: [role],
        workerId: `demo-${role}-${stamp}`,
        concurrency: 4,
        pollIntervalMs: 200,
        heartbeatIntervalMs: 5000,
        leaseSeconds: 60,
        maxLeases: 5,
        shutdownGraceMs: 5000,
        registry,
        logger,
      });
      worker.on('claimed', (tasks) => tasks.forEach((t) => ours.add(t.taskId)));
      worker.on('completed', (task, report) =>
        say(
          `  [${role.padEnd(21)}] task ${task.taskId} ${report.outcome}${report.note ? `: ${report.note}` : ''}${report.error ? `: ${report.error}` : ''}`,
        ),
      );
      await worker.start();
      workers.push(worker);
    }
    say(`Workers: one per role (${MENU_ROLES.join(', ')}).\n`);

    // 1. Store discovery, as POST /api/tasks/generate/discovery does; SQL chains the rest.
    const discoveryId = (await api.query(`select menus.generate_store_discovery(null)::text as id`)).rows[0]
      .id as string;
    say(`POST /api/tasks/generate/discovery -> store_discovery task ${discoveryId}`);
    const ended = async (ids: string[]) =>
      (await owner.query(`select count(*)::int as n from queues.task_end where task_id = any($1::bigint[])`, [ids]))
        .rows[0].n === ids.length;
    await until(() => ended([discoveryId]), 'store discovery');
    const storeIds = (
      await owner.query(`select store_id::text from menus.store where task_id = $1 order by store_id`, [discoveryId])
    ).rows.map((r) => r.store_id as string);
    const chainIds = async () =>
      (
        await owner.query(
          `select task_id::text from queues.task where task_type in ('entry_point_discovery', 'product_discovery')
            and (payload ->> 'store_id') = any($1::text[])`,
          [storeIds],
        )
      ).rows.map((r) => r.task_id as string);
    await until(async () => {
      const ids = await chainIds();
      return ids.length === storeIds.length * 2 && (await ended(ids));
    }, 'entry-point and product discovery of every new store');

    // 2. The daily staggered resync. A past day that was not generated yet, so every batch
    //    is due now (the schedule generates today's at 00:00 UTC).
    const day = (
      await owner.query(
        `select d::date::text as day from generate_series(current_date - 1, current_date - 400, interval '-1 day') d
        where not exists (select 1 from menus.resync_generated g where g.resync_date = d::date) limit 1`,
      )
    ).rows[0].day as string;
    const batches = (
      await api.query(`select batch, scheduled_at, task_count from menus.generate_resync_tasks(6, $1)`, [day])
    ).rows;
    say(
      `\ngenerate_resync_tasks(6, '${day}'): ${batches.map((b) => `batch ${b.batch} at ${new Date(b.scheduled_at).toISOString().slice(11, 16)}: ${b.task_count}`).join(', ')}`,
    );
    const resyncIds = (
      await owner.query(
        `select task_id::text from queues.task where task_type = 'product_resync' and scheduled_at >= $1::date and scheduled_at < $1::date + 1`,
        [day],
      )
    ).rows.map((r) => r.task_id as string);
    await until(() => ended(resyncIds), 'the resyncs');

    // 3. The analytics refresh.
    const refreshId = (await api.query(`select queues.enqueue('analytics_refresh', '{}')::text as id`)).rows[0]
      .id as string;
    await until(() => ended([refreshId]), 'the analytics refresh');

    // What happened, from the facts.
    const { rows } = await owner.query(
      `select s.slug, e.platform_dispensary_id, a.products, a.in_stock, a.avg_price_cents,
              (select count(*) from menus.product_snapshot x join menus.product p using (product_id) where p.store_id = s.store_id)::int as snapshots
         from menus.store s
         left join menus.store_platform_id e using (store_id)
         left join menus.store_analytics a using (store_id)
        where s.store_id = any($1::bigint[]) order by s.store_id`,
      [storeIds],
    );
    say('\nStores found by this run (menus.store_analytics after the refresh):');
    for (const r of rows) {
      say(
        `  ${r.slug.padEnd(20)} ${String(r.platform_dispensary_id).padEnd(24)} ${r.products} products, ${r.in_stock} in stock, avg $${(r.avg_price_cents / 100).toFixed(2)}, ${r.snapshots} snapshots`,
      );
    }
    // This run's tasks: the discovery, the refresh, and every task of the new stores (the
    // daily generation also resyncs stores of earlier runs; they are not counted here).
    const outcomes = (
      await owner.query(
        `select t.task_type, c.outcome, count(*)::int as n,
              sum((select count(*) from queues.error e where e.task_id = t.task_id))::int as errors
         from queues.task t join queues.task_end c using (task_id)
        where t.task_id = any($1::bigint[])
          and (t.task_id = any($2::bigint[]) or (t.payload ->> 'store_id') = any($3::text[]))
        group by 1, 2 order by 1, 2`,
        [[...ours], [discoveryId, refreshId], storeIds],
      )
    ).rows;
    const others = resyncIds.length - storeIds.length;
    if (others > 0) say(`\n(The daily generation also resynced ${others} store(s) found by earlier runs.)`);
    say("\nTasks of this run's stores by role (errors are failed attempts, retried):");
    for (const o of outcomes) say(`  ${o.task_type.padEnd(22)} ${o.outcome.padEnd(10)} ${o.n} (${o.errors} errors)`);
    const capacity = (
      await api.query(
        `select task_type, completed_in_window, tasks_per_worker_hour from admin.capacity(null)
        where task_type = any($1::text[]) order by task_type`,
        [[...MENU_ROLES]],
      )
    ).rows;
    say('\nGET /api/tasks/capacity (last hour):');
    for (const c of capacity)
      say(
        `  ${c.task_type.padEnd(22)} ${c.completed_in_window} completed, ${c.tasks_per_worker_hour === null ? '-' : Math.round(c.tasks_per_worker_hour)} per worker-hour`,
      );
    return outcomes.every((o) => o.outcome === 'succeeded') && rows.length === stores;
  } finally {
    for (const w of workers) await w.stop();
    await api.end();
    await fake.close();
  }
}
