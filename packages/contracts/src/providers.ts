/**
 * Provider payloads: what a before_handler returns in its envelope's `payload` for each
 * channel, and what the worker hands to the provider. Extra fields are rejected, so a
 * typo in a before_handler is an error row, not a silently ignored field.
 */
import { z } from 'zod';

const id = z.union([z.string().min(1).max(100), z.number().int()]);
/** Sent to providers that deduplicate requests (Resend's Idempotency-Key): the attempt id. */
const idempotencyKey = z.string().min(1).max(256).optional();

export const emailPayload = z.strictObject({
  message_id: id.optional(),
  idempotency_key: idempotencyKey,
  from_address: z.string().min(3).max(320),
  to_address: z.email().max(320),
  subject: z.string().min(1).max(998),
  html: z.string().max(1_000_000),
  text: z.string().max(1_000_000).optional(),
  reply_to: z.email().max(320).optional(),
});
export type EmailPayload = z.infer<typeof emailPayload>;

export const smsPayload = z.strictObject({
  message_id: id.optional(),
  idempotency_key: idempotencyKey,
  to_number: z.string().regex(/^\+[1-9][0-9]{6,14}$/, 'must be an E.164 number such as +14155550100'),
  from_number: z
    .string()
    .regex(/^\+[1-9][0-9]{6,14}$/, 'must be an E.164 number')
    .optional(),
  body: z.string().min(1).max(1600),
});
export type SmsPayload = z.infer<typeof smsPayload>;

export const fileDeletePayload = z.strictObject({
  file_id: id,
  idempotency_key: idempotencyKey,
  bucket: z.string().regex(/^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$/, 'must be a bucket name'),
  object_key: z.string().min(1).max(1024),
});
export type FileDeletePayload = z.infer<typeof fileDeletePayload>;

/** What a provider gets besides its payload. */
export interface ProviderContext {
  taskId: string;
  taskLeaseId: string;
  taskType: string;
  /** Aborted when the worker gives up on the task (lease lost, shutdown past its grace). */
  signal: AbortSignal;
}

/**
 * A channel's provider: validates the before_handler's payload with `payloadSchema` and
 * performs the side effect. `send` resolves to the JSON given to the success handler as
 * `worker_payload`, and throws (or rejects) on failure; the message goes to the error
 * handler. One provider per file, injected into the worker's registry.
 */
export interface Provider<P = unknown> {
  /** For logs: "resend", "twilio", "local-outbox", ... */
  readonly name: string;
  readonly payloadSchema: z.ZodType<P>;
  /**
   * True when the provider must act only on what a before_handler returned (file
   * deletion): the worker refuses a task of its type that names no before_handler.
   */
  readonly requiresBeforeHandler?: boolean;
  send(payload: P, context: ProviderContext): Promise<unknown>;
}
