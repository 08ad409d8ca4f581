// queues.parse_envelope (sql/queues/steps.sql) on the result envelope's table of cases,
// the one parseEnvelope in @org/contracts is tested on (envelope-cases.json): the
// worker and the database read a function's result alike.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { caseTitle, envelopeCases } from '../../packages/contracts/test/envelope-cases.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

async function parse(json: string | null): Promise<{ outcome: string; message: string | null }> {
  const { rows } = await db.query<{ outcome: string; message: string | null }>(
    'select outcome, message from queues.parse_envelope($1::jsonb)',
    [json],
  );
  return rows[0];
}

describe('queues.parse_envelope', () => {
  it.each(envelopeCases.map((c) => [caseTitle(c), c] as const))('%s', async (_title, c) => {
    const result = await parse(JSON.stringify(c.input));
    if (c.outcome === 'malformed') {
      expect(result.outcome).toBe('malformed');
      expect(result.message).toContain(c.message);
    } else {
      expect(result).toEqual({ outcome: c.outcome, message: c.message });
    }
  });

  it('reads SQL NULL (a function that returned nothing) as JSON null', async () => {
    expect(await parse(null)).toEqual({
      outcome: 'malformed',
      message: 'malformed result envelope: expected an object, got null',
    });
  });
});
