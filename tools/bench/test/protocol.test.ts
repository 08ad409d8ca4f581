// The clock the pickup latency is measured with: the wall clock (comparable between the
// producer's and the worker's processes) with a fraction of a millisecond.
import { describe, expect, it } from 'vitest';
import { wallClockMs } from '../src/runners/protocol.js';

describe('wallClockMs', () => {
  it('reads the wall clock, not the time since the process started', () => {
    const before = Date.now();
    const now = wallClockMs();
    const after = Date.now();
    // Date.now() is the wall clock rounded down to a whole millisecond.
    expect(now).toBeGreaterThanOrEqual(before - 0.1);
    expect(now).toBeLessThan(after + 1.1);
  });

  it('counts fractions of a millisecond', () => {
    const readings = Array.from({ length: 200 }, () => wallClockMs());
    expect(readings.some((ms) => !Number.isInteger(ms))).toBe(true);
    // Readings taken one after another differ, and never go back.
    expect(new Set(readings).size).toBeGreaterThan(1);
    for (let i = 1; i < readings.length; i++) expect(readings[i]).toBeGreaterThanOrEqual(readings[i - 1]);
  });
});
