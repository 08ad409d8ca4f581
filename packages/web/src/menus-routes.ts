/**
 * The seed's generate endpoints (role-based worker system, sql/menus/generate.sql):
 *
 *   POST /api/tasks/generate/resync     {batches?: 1..24 (6), date?: "YYYY-MM-DD" (today, UTC)}
 *        every active store gets one product_resync task, spread over the day in
 *        `batches` batches; once per date (409 for a second call)
 *   POST /api/tasks/generate/discovery  {scheduled_at?: ISO 8601}
 *        one store_discovery task
 *
 * Bad input is a 400 naming the field, and nothing is written. Each generation is a change
 * recorded with its fact (admin.api_change), in the same transaction.
 */
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Change } from './app.js';
import { menusResyncGenerate, menusStoreDiscoveryGenerate } from './queries/menus.queries.js';

type Parse = <T extends z.ZodType>(schema: T, value: unknown, where: string) => z.output<T>;

export const resyncBody = z
  .object({
    batches: z
      .number()
      .int('batches must be an integer')
      .min(1, 'batches must be at least 1')
      .max(24, 'batches must be at most 24')
      .optional(),
    date: z.iso.date({ error: 'date must be a date such as 2026-01-05' }).optional(),
  })
  .strict();

export const discoveryBody = z
  .object({
    scheduled_at: z.iso.datetime({ offset: true, error: 'scheduled_at must be an ISO 8601 date-time' }).optional(),
  })
  .strict();

export function registerMenuRoutes(app: FastifyInstance, { parse, change }: { parse: Parse; change: Change }): void {
  app.post('/api/tasks/generate/resync', async (request, reply) => {
    const body = parse(resyncBody, request.body ?? undefined, 'body');
    const date = body.date ?? new Date().toISOString().slice(0, 10);
    const answer = await change(request, 'generate_resync_tasks', async (tx) => {
      const rows = await menusResyncGenerate.run({ batches: body.batches ?? 6, date }, tx.pool);
      const batches = rows.map((r) => ({ batch: r.batch, scheduled_at: r.scheduledAt, task_count: r.taskCount }));
      const tasks = batches.reduce((sum, b) => sum + b.task_count, 0);
      return {
        answer: { task_type: 'product_resync', date, tasks, batches },
        taskType: 'product_resync',
        input: { ...body, date },
      };
    });
    request.log.info(
      { event: 'resync_generated', date, tasks: answer.tasks, batches: answer.batches.length },
      'resync tasks generated',
    );
    return reply.code(201).send(answer);
  });

  app.post('/api/tasks/generate/discovery', async (request, reply) => {
    const body = parse(discoveryBody, request.body ?? undefined, 'body');
    const { task_id: taskId } = await change(request, 'generate_store_discovery', async (tx) => {
      const [row] = await menusStoreDiscoveryGenerate.run({ scheduledAt: body.scheduled_at }, tx.pool);
      const id = Number(row!.taskId);
      return { answer: { task_type: 'store_discovery', task_id: id }, taskIds: [id], input: body };
    });
    request.log.info({ event: 'discovery_generated', task_id: taskId }, 'store discovery task created');
    return reply.code(201).send({ task_type: 'store_discovery', task_id: taskId });
  });
}
