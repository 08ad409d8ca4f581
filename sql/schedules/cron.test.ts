// schedules.parse_cron / next_fire_time / prev_fire_time / cron_error: the cron
// evaluator the supervisor relies on. All times UTC.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

async function next(cron: string, after: string): Promise<string | null> {
  const { rows } = await db.query<{ t: Date | null }>('select schedules.next_fire_time($1, $2) as t', [cron, after]);
  return iso(rows[0].t);
}

async function prev(cron: string, before: string): Promise<string | null> {
  const { rows } = await db.query<{ t: Date | null }>('select schedules.prev_fire_time($1, $2) as t', [cron, before]);
  return iso(rows[0].t);
}

/** The first n fire times after `after`, by calling next_fire_time repeatedly. */
async function sequence(cron: string, after: string, n: number): Promise<string[]> {
  const out: string[] = [];
  let t = after;
  for (let i = 0; i < n; i++) {
    const f = await next(cron, t);
    if (f === null) break;
    out.push(f);
    t = f;
  }
  return out;
}

describe('next_fire_time', () => {
  it('every minute: the next whole minute, strictly after', async () => {
    expect(await next('* * * * *', '2024-01-01T10:00:30Z')).toBe('2024-01-01T10:01:00.000Z');
    expect(await next('* * * * *', '2024-01-01T10:00:00Z')).toBe('2024-01-01T10:01:00.000Z');
    expect(await next('0 * * * *', '2024-01-01T10:59:59.999Z')).toBe('2024-01-01T11:00:00.000Z');
    expect(await next('0 * * * *', '2024-01-01T11:00:00Z')).toBe('2024-01-01T12:00:00.000Z');
  });

  it('minute lists, ranges and steps', async () => {
    expect(await sequence('5,10-12 * * * *', '2024-01-01T10:00:00Z', 5)).toEqual([
      '2024-01-01T10:05:00.000Z',
      '2024-01-01T10:10:00.000Z',
      '2024-01-01T10:11:00.000Z',
      '2024-01-01T10:12:00.000Z',
      '2024-01-01T11:05:00.000Z',
    ]);
    expect(await sequence('*/15 * * * *', '2024-01-01T10:07:00Z', 4)).toEqual([
      '2024-01-01T10:15:00.000Z',
      '2024-01-01T10:30:00.000Z',
      '2024-01-01T10:45:00.000Z',
      '2024-01-01T11:00:00.000Z',
    ]);
    expect(await sequence('10-40/10 * * * *', '2024-01-01T10:00:00Z', 5)).toEqual([
      '2024-01-01T10:10:00.000Z',
      '2024-01-01T10:20:00.000Z',
      '2024-01-01T10:30:00.000Z',
      '2024-01-01T10:40:00.000Z',
      '2024-01-01T11:10:00.000Z',
    ]);
    // a/n: from a to the field's maximum.
    expect(await sequence('50/5 * * * *', '2024-01-01T10:00:00Z', 3)).toEqual([
      '2024-01-01T10:50:00.000Z',
      '2024-01-01T10:55:00.000Z',
      '2024-01-01T11:50:00.000Z',
    ]);
  });

  it('hours: the seed 4-hourly product_resync and stepped ranges', async () => {
    expect(await sequence('0 */4 * * *', '2024-01-01T01:00:00Z', 7)).toEqual([
      '2024-01-01T04:00:00.000Z',
      '2024-01-01T08:00:00.000Z',
      '2024-01-01T12:00:00.000Z',
      '2024-01-01T16:00:00.000Z',
      '2024-01-01T20:00:00.000Z',
      '2024-01-02T00:00:00.000Z',
      '2024-01-02T04:00:00.000Z',
    ]);
    expect(await sequence('30 9-17/4 * * *', '2024-01-01T00:00:00Z', 4)).toEqual([
      '2024-01-01T09:30:00.000Z',
      '2024-01-01T13:30:00.000Z',
      '2024-01-01T17:30:00.000Z',
      '2024-01-02T09:30:00.000Z',
    ]);
    // The last minute of a day rolls into the next day (and year).
    expect(await next('59 23 * * *', '2024-12-31T23:59:00Z')).toBe('2025-01-01T23:59:00.000Z');
    expect(await next('0 0 * * *', '2024-12-31T23:59:00Z')).toBe('2025-01-01T00:00:00.000Z');
  });

  it('day of month and month, with month ends', async () => {
    expect(await next('0 0 1 */3 *', '2024-02-15T00:00:00Z')).toBe('2024-04-01T00:00:00.000Z');
    expect(await next('0 0 1 1 *', '2024-06-01T00:00:00Z')).toBe('2025-01-01T00:00:00.000Z');
    // The 31st: only months that have one.
    expect(await sequence('0 0 31 * *', '2024-01-01T00:00:00Z', 4)).toEqual([
      '2024-01-31T00:00:00.000Z',
      '2024-03-31T00:00:00.000Z',
      '2024-05-31T00:00:00.000Z',
      '2024-07-31T00:00:00.000Z',
    ]);
    expect(await next('0 0 30 * *', '2024-01-30T00:00:00Z')).toBe('2024-03-30T00:00:00.000Z');
    expect(await next('15 6 28-31 2 *', '2023-02-28T06:15:00Z')).toBe('2024-02-28T06:15:00.000Z');
    expect(await sequence('0 0 L-like 2 *'.replace('L-like', '28,29'), '2024-02-27T00:00:00Z', 3)).toEqual([
      '2024-02-28T00:00:00.000Z',
      '2024-02-29T00:00:00.000Z',
      '2025-02-28T00:00:00.000Z',
    ]);
  });

  it('Feb 29: leap years only, and 2100 is not one', async () => {
    expect(await next('0 0 29 2 *', '2024-03-01T00:00:00Z')).toBe('2028-02-29T00:00:00.000Z');
    expect(await next('0 0 29 2 *', '2024-02-28T12:00:00Z')).toBe('2024-02-29T00:00:00.000Z');
    expect(await next('0 0 29 2 *', '2096-03-01T00:00:00Z')).toBe('2104-02-29T00:00:00.000Z');
  });

  it('a cron that never fires returns null', async () => {
    expect(await next('0 0 30 2 *', '2024-01-01T00:00:00Z')).toBeNull();
    expect(await next('0 0 31 4,6,9,11 *', '2024-01-01T00:00:00Z')).toBeNull();
    expect(await prev('0 0 30 2 *', '2024-01-01T00:00:00Z')).toBeNull();
  });

  it('day of week: 0 and 7 are both Sunday; ranges and lists', async () => {
    // 2024-01-01 is a Monday.
    expect(await next('0 12 * * 0', '2024-01-01T00:00:00Z')).toBe('2024-01-07T12:00:00.000Z');
    expect(await next('0 12 * * 7', '2024-01-01T00:00:00Z')).toBe('2024-01-07T12:00:00.000Z');
    expect(await sequence('0 0 * * 1-5', '2024-01-05T00:00:00Z', 2)).toEqual([
      '2024-01-08T00:00:00.000Z',
      '2024-01-09T00:00:00.000Z',
    ]);
    expect(await sequence('0 0 * * 5-7', '2024-01-01T00:00:00Z', 4)).toEqual([
      '2024-01-05T00:00:00.000Z',
      '2024-01-06T00:00:00.000Z',
      '2024-01-07T00:00:00.000Z',
      '2024-01-12T00:00:00.000Z',
    ]);
    expect(await sequence('0 0 * * 1,3', '2024-01-01T00:00:00Z', 3)).toEqual([
      '2024-01-03T00:00:00.000Z',
      '2024-01-08T00:00:00.000Z',
      '2024-01-10T00:00:00.000Z',
    ]);
    // The seed's weekly store_discovery (Mondays 03:00).
    expect(await sequence('0 3 * * 1', '2024-01-01T03:00:00Z', 2)).toEqual([
      '2024-01-08T03:00:00.000Z',
      '2024-01-15T03:00:00.000Z',
    ]);
  });

  it('both day fields restricted: a day matches either (cron OR rule)', async () => {
    // The 13th, or any Friday.
    expect(await sequence('0 0 13 * 5', '2024-01-01T00:00:00Z', 4)).toEqual([
      '2024-01-05T00:00:00.000Z',
      '2024-01-12T00:00:00.000Z',
      '2024-01-13T00:00:00.000Z',
      '2024-01-19T00:00:00.000Z',
    ]);
  });

  it('a day field beginning with * is unrestricted for that rule: both must match (Vixie cron)', async () => {
    // Odd days that are Mondays (2024-01-01 Mon is day 1; Jan 8 is even; Jan 15 odd).
    expect(await sequence('0 0 */2 * 1', '2024-01-01T00:00:00Z', 2)).toEqual([
      '2024-01-15T00:00:00.000Z',
      '2024-01-29T00:00:00.000Z',
    ]);
    // dom restricted, dow '*': only the day of month counts.
    expect(await sequence('0 0 13 * *', '2024-01-01T00:00:00Z', 2)).toEqual([
      '2024-01-13T00:00:00.000Z',
      '2024-02-13T00:00:00.000Z',
    ]);
    // dow restricted, dom '*/1': only Sundays.
    expect(await next('0 0 */1 * 0', '2024-01-01T00:00:00Z')).toBe('2024-01-07T00:00:00.000Z');
  });

  it('is evaluated in UTC whatever the session time zone', async () => {
    const client = await db.client('owner');
    try {
      await client.query(`set timezone = 'America/New_York'`);
      // 2024-03-10: the US DST switch day.
      const { rows } = await client.query<{ t: Date }>(
        `select schedules.next_fire_time('0 7 * * *', '2024-03-10T06:00:00Z') as t`,
      );
      expect(rows[0].t.toISOString()).toBe('2024-03-10T07:00:00.000Z');
    } finally {
      await client.end();
    }
  });

  it('matches a minute-by-minute scan of the parsed fields over a month', async () => {
    // Independent check of the month/day/hour jumps: every minute of a window, kept when
    // it matches the parsed fields, must equal the sequence next_fire_time produces.
    const crons = ['*/7 */5 * * *', '0 0,12 */3 * *', '45 23 1,15,31 * 1', '0 6 * 2,3 0-1', '59 * 28-31 * 7'];
    for (const cron of crons) {
      const { rows } = await db.query<{ ok: boolean; scanned: number }>(
        `with recursive c as (select * from schedules.parse_cron($1)),
         scan as (
           select m from generate_series(timestamp '2024-02-01', timestamp '2024-03-31 23:59', interval '1 minute') m, c
            where extract(minute from m)::int = any (c.minutes) and extract(hour from m)::int = any (c.hours)
              and extract(month from m)::int = any (c.months)
              and schedules.cron_day_matches(m, c.doms, c.dows, c.dom_restricted, c.dow_restricted)
         ),
         walk as (
           select schedules.next_fire_time($1, timestamp '2024-01-31 23:59' at time zone 'UTC') as t
           union all
           select schedules.next_fire_time($1, w.t) from walk w where w.t < timestamp '2024-03-31 23:59' at time zone 'UTC'
         )
         select (select array_agg(m at time zone 'UTC' order by m) from scan)
                  = (select array_agg(t order by t) from walk where t <= timestamp '2024-03-31 23:59' at time zone 'UTC') as ok,
                (select count(*)::int from scan) as scanned`,
        [cron],
      );
      expect({ cron, ...rows[0] }).toMatchObject({ cron, ok: true });
      expect(rows[0].scanned).toBeGreaterThan(0);
    }
  });
});

describe('prev_fire_time', () => {
  it('is the last fire time strictly before', async () => {
    expect(await prev('0 */4 * * *', '2024-01-01T10:00:00Z')).toBe('2024-01-01T08:00:00.000Z');
    expect(await prev('0 */4 * * *', '2024-01-01T08:00:00Z')).toBe('2024-01-01T04:00:00.000Z');
    expect(await prev('0 */4 * * *', '2024-01-01T08:00:00.001Z')).toBe('2024-01-01T08:00:00.000Z');
    expect(await prev('0 0 31 * *', '2024-05-01T00:00:00Z')).toBe('2024-03-31T00:00:00.000Z');
    expect(await prev('0 0 29 2 *', '2028-01-01T00:00:00Z')).toBe('2024-02-29T00:00:00.000Z');
    expect(await prev('0 12 * * 7', '2024-01-07T12:00:00Z')).toBe('2023-12-31T12:00:00.000Z');
    expect(await prev('0 0 13 * 5', '2024-01-13T00:00:00Z')).toBe('2024-01-12T00:00:00.000Z');
    expect(await prev('30 9-17/4 * * *', '2024-01-02T09:00:00Z')).toBe('2024-01-01T17:30:00.000Z');
  });
});

describe('parse_cron and cron_error', () => {
  it('parses fields into sorted values; 7 becomes 0', async () => {
    const { rows } = await db.query(`select * from schedules.parse_cron(' 5,1-3 */6  1,15 */4 7,1-2 ')`);
    expect(rows[0]).toEqual({
      minutes: [1, 2, 3, 5],
      hours: [0, 6, 12, 18],
      doms: [1, 15],
      months: [1, 5, 9],
      dows: [0, 1, 2],
      dom_restricted: true,
      dow_restricted: true,
    });
  });

  const bad: [string, RegExp][] = [
    ['* * * *', /cron must have 5 fields \(minute hour day-of-month month day-of-week\), got 4/],
    ['* * * * * *', /cron must have 5 fields .*got 6/],
    ['', /cron must have 5 fields .*got 0/],
    ['60 * * * *', /cron minute field: 60 is out of range 0-59/],
    ['* 24 * * *', /cron hour field: 24 is out of range 0-23/],
    ['* * 0 * *', /cron day-of-month field: 0 is out of range 1-31/],
    ['* * 32 * *', /cron day-of-month field: 32 is out of range 1-31/],
    ['* * * 13 *', /cron month field: 13 is out of range 1-12/],
    ['* * * 0 *', /cron month field: 0 is out of range 1-12/],
    ['* * * * 8', /cron day-of-week field: 8 is out of range 0-7/],
    ['5-2 * * * *', /cron minute field: range 5-2 goes backwards/],
    ['*/0 * * * *', /cron minute field: step must be at least 1, got 0/],
    ['a * * * *', /cron minute field: 'a' is not a number, a range a-b, \* or a step x\/n/],
    ['1,,2 * * * *', /cron minute field: '' is not a number/],
    ['* * * * MON', /cron day-of-week field: 'MON' is not a number/],
    ['* * * JAN *', /cron month field: 'JAN' is not a number/],
    ['-1 * * * *', /cron minute field: '-1' is not a number/],
  ];
  it.each(bad)('rejects %j with 22023 and a message naming the field', async (cron, message) => {
    await expect(db.query('select schedules.next_fire_time($1, now())', [cron])).rejects.toMatchObject({
      code: '22023',
      message: expect.stringMatching(message),
    });
    const { rows } = await db.query<{ e: string }>('select schedules.cron_error($1) as e', [cron]);
    expect(rows[0].e).toMatch(message);
  });

  it('null cron and null time raise 22004', async () => {
    await expect(db.query('select schedules.next_fire_time(null, now())')).rejects.toMatchObject({ code: '22004' });
    await expect(db.query(`select schedules.next_fire_time('* * * * *', null)`)).rejects.toMatchObject({
      code: '22004',
      message: 'after must not be null',
    });
    const { rows } = await db.query<{ e: string }>('select schedules.cron_error(null) as e');
    expect(rows[0].e).toBe('cron is required');
  });

  it('cron_error: null for a valid cron, a message for one that never fires', async () => {
    const { rows } = await db.query<{ ok: string | null; never: string }>(
      `select schedules.cron_error('0 */4 * * *') as ok, schedules.cron_error('0 0 30 2 *') as never`,
    );
    expect(rows[0]).toEqual({ ok: null, never: `cron '0 0 30 2 *' never fires (no month has such a day)` });
  });
});
