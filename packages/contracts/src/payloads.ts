/**
 * Task payloads: what queues.task.payload holds for the task types the worker knows.
 * Extra fields are kept (supervisors put their resource ids beside these), so the
 * schemas are loose objects: they check what the worker reads and pass the rest through.
 */
import { z } from 'zod';

/** `schema.function`: the only shape internal.run_function accepts. */
export const functionName = z
  .string()
  .regex(
    /^[a-z_][a-z0-9_]{0,62}\.[a-z_][a-z0-9_]{0,62}$/,
    'must be schema.function in lowercase letters, digits and _',
  );

/**
 * A pure database step: internal.run_function(payload.db_function, payload). With
 * `repeat: true` the worker calls it again, each call its own transaction, while its
 * envelope's payload says `more: true` (packages/worker/src/processors/db-function.ts).
 */
export const dbFunctionPayload = z.looseObject({
  db_function: functionName,
  repeat: z.boolean().optional(),
});
export type DbFunctionPayload = z.infer<typeof dbFunctionPayload>;

/**
 * A handler-based task (email, sms, file_delete, or any registered type): the worker
 * calls before_handler for the provider payload, the provider, then success_handler or
 * error_handler. Each handler is optional.
 */
export const channelTaskPayload = z.looseObject({
  before_handler: functionName.optional(),
  success_handler: functionName.optional(),
  error_handler: functionName.optional(),
});
export type ChannelTaskPayload = z.infer<typeof channelTaskPayload>;

/** Body of a success handler call. */
export const successHandlerBody = z.strictObject({
  original_payload: z.record(z.string(), z.unknown()),
  worker_payload: z.unknown(),
});
export type SuccessHandlerBody = z.infer<typeof successHandlerBody>;

/** Body of an error handler call. */
export const errorHandlerBody = z.strictObject({
  original_payload: z.record(z.string(), z.unknown()),
  error: z.string(),
});
export type ErrorHandlerBody = z.infer<typeof errorHandlerBody>;
