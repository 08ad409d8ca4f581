// The result envelope's cases (envelope-cases.json), as both parsers' tests read them:
// parseEnvelope's (test/envelope.test.ts) and queues.parse_envelope's
// (sql/queues/envelope.test.ts). One table, so the two parsers cannot drift apart.
import { readFileSync } from 'node:fs';

export type EnvelopeOutcome = 'succeeded' | 'error' | 'invalid' | 'status' | 'malformed';

export interface EnvelopeCase {
  /** What the function returned (JSON). */
  input: unknown;
  outcome: EnvelopeOutcome;
  /**
   * error and invalid: the message; status: the status; succeeded: null; malformed: a text
   * both parsers' error contains.
   */
  message: string | null;
}

interface StoredCase {
  input: unknown;
  long_text?: { field: string; length: number };
  outcome: EnvelopeOutcome;
  message: string | null;
}

const stored = JSON.parse(readFileSync(new URL('./envelope-cases.json', import.meta.url), 'utf8')) as {
  cases: StoredCase[];
};

export const envelopeCases: EnvelopeCase[] = stored.cases.map((c) => {
  if (!c.long_text) return { input: c.input, outcome: c.outcome, message: c.message };
  const text = 'x'.repeat(c.long_text.length);
  const input = { ...(c.input as Record<string, unknown>), [c.long_text.field]: text };
  const carriesText = c.outcome === 'error' || c.outcome === 'invalid' || c.outcome === 'status';
  return { input, outcome: c.outcome, message: carriesText ? text : c.message };
});

/** A short name for a case in a test title: its input (long strings cut) and outcome. */
export function caseTitle(c: EnvelopeCase): string {
  const json = JSON.stringify(c.input).replace(/x{20,}/g, (x) => `x*${x.length}`);
  return `${json} -> ${c.outcome}`;
}
