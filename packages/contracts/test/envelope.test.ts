// The result envelope schema: both seed shapes, their normalisation, and malformed input
// (the table of cases, envelope-cases.json, is shared with queues.parse_envelope's test).
import { describe, expect, it } from 'vitest';
import {
  emailPayload,
  errorHandlerBody,
  fileDeletePayload,
  parseEnvelope,
  smsPayload,
  successHandlerBody,
} from '../src/index.js';
import { caseTitle, envelopeCases } from './envelope-cases.js';

describe('parseEnvelope', () => {
  // The cases queues.parse_envelope is tested on too (sql/queues/envelope.test.ts).
  it.each(envelopeCases.map((c) => [caseTitle(c), c] as const))('%s', (_title, c) => {
    const result = parseEnvelope(c.input);
    const payload = (c.input as { payload?: unknown } | null)?.payload;
    switch (c.outcome) {
      case 'malformed':
        expect(result.ok).toBe(false);
        if (!result.ok) expect(result.error).toContain(c.message);
        return;
      case 'succeeded':
        expect(result).toEqual({ ok: true, envelope: { outcome: 'succeeded', payload } });
        return;
      case 'status':
        expect(result).toEqual({ ok: true, envelope: { outcome: 'status', status: c.message, payload } });
        return;
      default:
        expect(result).toEqual({ ok: true, envelope: { outcome: c.outcome, message: c.message, payload } });
    }
  });

  it('malformed, never a throw: undefined (which JSON cannot hold)', () => {
    expect(parseEnvelope(undefined)).toEqual({
      ok: false,
      error: 'malformed result envelope: expected an object, got a undefined',
    });
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
