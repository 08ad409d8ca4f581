/**
 * The result envelope every function the worker runs returns (DBFunctionResult). Two
 * shapes exist in the wild:
 *   {status: "succeeded" | <other>, payload?}
 *   {success: boolean, error?: string, validation_failure_message?: string, payload?}
 * and, without `success`, `{error: string, payload?}` or `{validation_failure_message: string,
 * payload?}` (the supervisors specification returns `{"error": "missing_task_id"}`).
 * Both normalise to one Outcome:
 *   error set                        -> 'error'       an operational failure (retried by supervisors)
 *   validation_failure_message set   -> 'invalid'     a non-retriable business outcome
 *   success: true / status succeeded -> 'succeeded'
 *   any other status                 -> 'status'      a descriptive non-success, logged, not fatal
 * Anything else is malformed: parseEnvelope returns an error, never throws.
 */
import { z } from 'zod';

const text = z.string().max(100_000);

/** Optional string fields: "" and null mean absent, as the seeds write them. */
const optionalText = z
  .union([text, z.null()])
  .optional()
  .transform((v) => (v === null || v === undefined || v.trim() === '' ? undefined : v));

const statusShape = z.strictObject({
  status: z.string().min(1).max(200),
  payload: z.unknown().optional(),
});

const successShape = z.strictObject({
  // Absent: an envelope that only reports an error or a validation failure.
  success: z.boolean().optional(),
  error: optionalText,
  validation_failure_message: optionalText,
  payload: z.unknown().optional(),
});

export type Envelope =
  | { outcome: 'succeeded'; payload: unknown }
  | { outcome: 'error'; message: string; payload: unknown }
  | { outcome: 'invalid'; message: string; payload: unknown }
  | { outcome: 'status'; status: string; payload: unknown };

export type ParsedEnvelope = { ok: true; envelope: Envelope } | { ok: false; error: string };

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** Validates and normalises a function's jsonb result. */
export function parseEnvelope(value: unknown): ParsedEnvelope {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { ok: false, error: `malformed result envelope: expected an object, got ${describe(value)}` };
  }
  const record = value as Record<string, unknown>;
  if ('status' in record && 'success' in record) {
    return { ok: false, error: 'malformed result envelope: has both "status" and "success"' };
  }
  if ('status' in record) {
    const parsed = statusShape.safeParse(record);
    if (!parsed.success) return { ok: false, error: `malformed result envelope: ${z.prettifyError(parsed.error)}` };
    const { status, payload } = parsed.data;
    return {
      ok: true,
      envelope: status === 'succeeded' ? { outcome: 'succeeded', payload } : { outcome: 'status', status, payload },
    };
  }
  if ('success' in record || 'error' in record || 'validation_failure_message' in record) {
    const parsed = successShape.safeParse(record);
    if (!parsed.success) return { ok: false, error: `malformed result envelope: ${z.prettifyError(parsed.error)}` };
    const { success, error, validation_failure_message: invalid, payload } = parsed.data;
    if (error !== undefined) return { ok: true, envelope: { outcome: 'error', message: error, payload } };
    if (invalid !== undefined) return { ok: true, envelope: { outcome: 'invalid', message: invalid, payload } };
    if (success === undefined) {
      return {
        ok: false,
        error:
          'malformed result envelope: needs "status" or "success", or a non-empty error or validation_failure_message',
      };
    }
    if (!success) {
      return {
        ok: false,
        error: 'malformed result envelope: success is false but neither error nor validation_failure_message is set',
      };
    }
    return { ok: true, envelope: { outcome: 'succeeded', payload } };
  }
  return { ok: false, error: 'malformed result envelope: needs "status" or "success"' };
}
