// The result envelope schema: both seed shapes, their normalisation, and malformed input.
import { describe, expect, it } from 'vitest';
import {
  emailPayload,
  errorHandlerBody,
  fileDeletePayload,
  parseEnvelope,
  smsPayload,
  successHandlerBody,
} from '../src/index.js';

describe('parseEnvelope', () => {
  it.each([
    [{ status: 'succeeded' }, { outcome: 'succeeded', payload: undefined }],
    [
      { status: 'succeeded', payload: { to: 'x' } },
      { outcome: 'succeeded', payload: { to: 'x' } },
    ],
    [{ status: 'max_attempts_reached' }, { outcome: 'status', status: 'max_attempts_reached', payload: undefined }],
    [{ success: true }, { outcome: 'succeeded', payload: undefined }],
    [
      { success: true, error: '', validation_failure_message: '', payload: { a: 1 } },
      { outcome: 'succeeded', payload: { a: 1 } },
    ],
    [
      { success: true, error: null, validation_failure_message: null },
      { outcome: 'succeeded', payload: undefined },
    ],
    [
      { success: false, error: 'smtp down' },
      { outcome: 'error', message: 'smtp down', payload: undefined },
    ],
    [
      { success: false, validation_failure_message: 'unknown account' },
      { outcome: 'invalid', message: 'unknown account', payload: undefined },
    ],
    // error wins over a validation message; a set error overrides success: true
    [
      { success: false, error: 'e', validation_failure_message: 'v' },
      { outcome: 'error', message: 'e', payload: undefined },
    ],
    [
      { success: true, error: 'late failure' },
      { outcome: 'error', message: 'late failure', payload: undefined },
    ],
    // Without success: the supervisors specification's `return jsonb_build_object('error', 'missing_task_id');`
    [{ error: 'missing_task_id' }, { outcome: 'error', message: 'missing_task_id', payload: undefined }],
    [
      { validation_failure_message: 'no such account', payload: { id: 1 } },
      { outcome: 'invalid', message: 'no such account', payload: { id: 1 } },
    ],
  ])('%j normalises', (input, expected) => {
    expect(parseEnvelope(input)).toEqual({ ok: true, envelope: expected });
  });

  it.each([
    [null, /expected an object, got null/],
    [undefined, /expected an object, got a undefined/],
    ['succeeded', /got a string/],
    [[{ success: true }], /got an array/],
    [{}, /needs "status" or "success"/],
    [{ status: 'succeeded', success: true }, /both "status" and "success"/],
    [{ status: '' }, /malformed/],
    [{ status: 5 }, /malformed/],
    [{ success: 'true' }, /malformed/],
    [{ success: false }, /neither error nor validation_failure_message/],
    [{ success: true, extra: 1 }, /malformed/],
    [{ success: false, error: 42 }, /malformed/],
    [{ success: true, error: 'x'.repeat(100_001) }, /malformed/],
    [{ error: '' }, /needs "status" or "success", or a non-empty error/],
    [{ error: 42 }, /malformed/],
    [{ error: 'x', extra: 1 }, /malformed/],
  ])('%j is malformed, never a throw', (input, message) => {
    const result = parseEnvelope(input);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toMatch(message);
  });
});

describe('payload schemas', () => {
  it('email: accepts a provider payload, rejects typos and bad addresses', () => {
    const good = {
      from_address: 'Team <team@example.com>',
      to_address: 'a@example.com',
      subject: 'Hi',
      html: '<p>x</p>',
      idempotency_key: '12',
    };
    expect(emailPayload.safeParse(good).success).toBe(true);
    expect(emailPayload.safeParse({ ...good, subjet: 'typo' }).success).toBe(false);
    expect(emailPayload.safeParse({ ...good, to_address: 'not-an-address' }).success).toBe(false);
    expect(emailPayload.safeParse({ ...good, subject: '' }).success).toBe(false);
  });

  it('sms: E.164 numbers only', () => {
    expect(smsPayload.safeParse({ to_number: '+14155550100', body: 'hi' }).success).toBe(true);
    expect(smsPayload.safeParse({ to_number: '4155550100', body: 'hi' }).success).toBe(false);
    expect(smsPayload.safeParse({ to_number: '+14155550100', body: '' }).success).toBe(false);
  });

  it('file_delete: a bucket name and an object key', () => {
    expect(fileDeletePayload.safeParse({ file_id: 9, bucket: 'user-uploads', object_key: 'a/b.mp3' }).success).toBe(
      true,
    );
    expect(fileDeletePayload.safeParse({ file_id: 9, bucket: 'Bad Bucket', object_key: 'a' }).success).toBe(false);
    expect(fileDeletePayload.safeParse({ file_id: 9, bucket: 'ok-bucket', object_key: '' }).success).toBe(false);
  });

  it('handler bodies have exactly the seed fields', () => {
    expect(successHandlerBody.safeParse({ original_payload: { a: 1 }, worker_payload: { id: 'x' } }).success).toBe(
      true,
    );
    expect(errorHandlerBody.safeParse({ original_payload: { a: 1 }, error: 'boom' }).success).toBe(true);
    expect(errorHandlerBody.safeParse({ original_payload: { a: 1 }, error: 'boom', extra: 1 }).success).toBe(false);
    expect(successHandlerBody.safeParse({ worker_payload: 1 }).success).toBe(false);
  });
});
