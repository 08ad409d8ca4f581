// Schedules in a time zone (sql/schedules/cron.sql): fire times on both daylight-saving
// changes of Europe/Berlin (2026-03-29, 2026-10-25) and America/New_York (2026-03-08,
// 2026-11-01). A fixed-hour job fires once on each change day (at the end of the gap when
// its time does not exist, at the first occurrence when it occurs twice); an every-hour
// job fires in every real hour. The supervisor, driven across the change days, enqueues
// those times once each; an unknown zone is refused and writes nothing.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** Fire times of `cron` in `zone` strictly after `from` up to `to`, walked with next_fire_time. */
async function fires(cron: string, zone: string, from: string, to: string): Promise<string[]> {
  const { rows } = await db.query<{ t: Date }>(
    `with recursive f(t) as (
       select schedules.next_fire_time($1, $3::timestamptz, $2)
       union all
       select schedules.next_fire_time($1, f.t, $2) from f where f.t < $4::timestamptz
     )
     select t from f where t <= $4::timestamptz order by t`,
    [cron, zone, from, to],
  );
  return rows.map((r) => r.t.toISOString().replace('.000Z', 'Z'));
}

/** The same walked backwards with prev_fire_time, from `to` down to `from`, oldest first. */
async function firesBackwards(cron: string, zone: string, from: string, to: string): Promise<string[]> {
  const { rows } = await db.query<{ t: Date }>(
    `with recursive f(t) as (
       select schedules.prev_fire_time($1, $4::timestamptz + interval '1 second', $2)
       union all
       select schedules.prev_fire_time($1, f.t, $2) from f where f.t > $3::timestamptz
     )
     select t from f where t > $3::timestamptz order by t`,
    [cron, zone, from, to],
  );
  return rows.map((r) => r.t.toISOString().replace('.000Z', 'Z'));
}

const hours = (from: string, count: number, minute = 0) =>
  Array.from({ length: count }, (_, i) =>
    new Date(Date.parse(from) + i * 3_600_000 + minute * 60_000).toISOString().replace('.000Z', 'Z'),
  );

describe('next_fire_time and prev_fire_time in a time zone', () => {
  const cases: { name: string; cron: string; zone: string; from: string; to: string; expected: string[] }[] = [
    {
      name: 'Berlin, clocks forward: a daily 02:30 fires once, at 03:00 CEST (the end of the gap)',
      cron: '30 2 * * *',
      zone: 'Europe/Berlin',
      from: '2026-03-27T00:00:00Z',
      to: '2026-03-31T00:00:00Z',
      expected: ['2026-03-27T01:30:00Z', '2026-03-28T01:30:00Z', '2026-03-29T01:00:00Z', '2026-03-30T00:30:00Z'],
    },
    {
      name: 'Berlin, clocks back: a daily 02:30 fires once, at the first 02:30 (CEST)',
      cron: '30 2 * * *',
      zone: 'Europe/Berlin',
      from: '2026-10-23T00:00:00Z',
      to: '2026-10-27T00:00:00Z',
      expected: ['2026-10-23T00:30:00Z', '2026-10-24T00:30:00Z', '2026-10-25T00:30:00Z', '2026-10-26T01:30:00Z'],
    },
    {
      name: 'Berlin, clocks forward: an hourly job fires in every real hour',
      cron: '0 * * * *',
      zone: 'Europe/Berlin',
      from: '2026-03-28T21:30:00Z',
      to: '2026-03-29T04:30:00Z',
      expected: hours('2026-03-28T22:00:00Z', 7),
    },
    {
      name: 'Berlin, clocks back: an hourly job fires in every real hour, the repeated one too',
      cron: '0 * * * *',
      zone: 'Europe/Berlin',
      from: '2026-10-24T21:30:00Z',
      to: '2026-10-25T04:30:00Z',
      expected: hours('2026-10-24T22:00:00Z', 7),
    },
    {
      name: 'Berlin, clocks forward: hourly at :30 skips the missing 02:30 and still fires every real hour',
      cron: '30 * * * *',
      zone: 'Europe/Berlin',
      from: '2026-03-28T22:00:00Z',
      to: '2026-03-29T03:00:00Z',
      expected: hours('2026-03-28T22:30:00Z', 5),
    },
    {
      name: 'Berlin, clocks back: every 20 minutes of real time',
      cron: '*/20 * * * *',
      zone: 'Europe/Berlin',
      from: '2026-10-24T23:50:00Z',
      to: '2026-10-25T01:50:00Z',
      expected: [
        '2026-10-25T00:00:00Z',
        '2026-10-25T00:20:00Z',
        '2026-10-25T00:40:00Z',
        '2026-10-25T01:00:00Z',
        '2026-10-25T01:20:00Z',
        '2026-10-25T01:40:00Z',
      ],
    },
    {
      name: 'New York, clocks forward: a daily 02:30 fires at 03:00 EDT',
      cron: '30 2 * * *',
      zone: 'America/New_York',
      from: '2026-03-07T00:00:00Z',
      to: '2026-03-10T00:00:00Z',
      expected: ['2026-03-07T07:30:00Z', '2026-03-08T07:00:00Z', '2026-03-09T06:30:00Z'],
    },
    {
      name: 'New York, clocks back: a daily 01:30 fires once, at the first 01:30 (EDT)',
      cron: '30 1 * * *',
      zone: 'America/New_York',
      from: '2026-10-31T00:00:00Z',
      to: '2026-11-03T00:00:00Z',
      expected: ['2026-10-31T05:30:00Z', '2026-11-01T05:30:00Z', '2026-11-02T06:30:00Z'],
    },
    {
      name: 'New York, clocks back: an hourly job fires in every real hour',
      cron: '0 * * * *',
      zone: 'America/New_York',
      from: '2026-11-01T03:30:00Z',
      to: '2026-11-01T09:30:00Z',
      expected: hours('2026-11-01T04:00:00Z', 6),
    },
    {
      name: 'New York, weekdays at 09:00 local across the change: 13:00 UTC in EDT, 14:00 in EST',
      cron: '0 9 * * 1-5',
      zone: 'America/New_York',
      from: '2026-10-29T00:00:00Z',
      to: '2026-11-04T00:00:00Z',
      expected: ['2026-10-29T13:00:00Z', '2026-10-30T13:00:00Z', '2026-11-02T14:00:00Z', '2026-11-03T14:00:00Z'],
    },
    {
      name: 'UTC and no zone are the UTC walk',
      cron: '30 2 * * *',
      zone: 'UTC',
      from: '2026-03-28T00:00:00Z',
      to: '2026-03-30T00:00:00Z',
      expected: ['2026-03-28T02:30:00Z', '2026-03-29T02:30:00Z'],
    },
  ];

  it.each(cases)('$name', async ({ cron, zone, from, to, expected }) => {
    expect(await fires(cron, zone, from, to)).toEqual(expected);
    expect(await firesBackwards(cron, zone, from, to)).toEqual(expected);
  });

  it('a monthly job a long way off is found across both changes', async () => {
    expect(await fires('0 12 1 * *', 'Europe/Berlin', '2026-01-15T00:00:00Z', '2026-12-31T00:00:00Z')).toEqual([
      '2026-02-01T11:00:00Z',
      '2026-03-01T11:00:00Z',
      '2026-04-01T10:00:00Z',
      '2026-05-01T10:00:00Z',
      '2026-06-01T10:00:00Z',
      '2026-07-01T10:00:00Z',
      '2026-08-01T10:00:00Z',
      '2026-09-01T10:00:00Z',
      '2026-10-01T10:00:00Z',
      '2026-11-01T11:00:00Z',
      '2026-12-01T11:00:00Z',
    ]);
  });
});

describe('a schedule in a time zone', () => {
  beforeEach(async () => {
    await db.query('truncate schedules.schedule, schedules.supervisor_task, queues.task cascade');
  });

  /** Runs the schedule's supervisor step every 10 minutes from `from` to `to`; returns the fire times enqueued. */
  async function drive(name: string, from: string, to: string): Promise<string[]> {
    for (let t = Date.parse(from); t <= Date.parse(to); t += 600_000) {
      await db.query(
        `select schedules.run_schedule_at($1, s.schedule_id) from schedules.schedule s where s.name = $2`,
        [new Date(t), name],
      );
    }
    const { rows } = await db.query<{ fire_at: Date }>(
      `select r.fire_at from schedules.schedule_run r join schedules.schedule s using (schedule_id)
        where s.name = $1 and r.outcome = 'enqueued' order by r.fire_at`,
      [name],
    );
    return rows.map((r) => r.fire_at.toISOString().replace('.000Z', 'Z'));
  }

  it('fires a daily 02:30 Berlin job once on each change day, and says its zone', async () => {
    const { rows } = await db.query(
      `select * from schedules.upsert_schedule_at('2026-03-28T00:00:00Z', 'berlin-nightly', '30 2 * * *',
                                                  'analytics_refresh', '{}', null, null, 'Europe/Berlin')`,
    );
    expect(rows[0].validation_failure_message).toBeNull();
    expect(await drive('berlin-nightly', '2026-03-28T00:00:00Z', '2026-03-30T03:00:00Z')).toEqual([
      '2026-03-28T01:30:00Z',
      '2026-03-29T01:00:00Z',
      '2026-03-30T00:30:00Z',
    ]);
    const { rows: listed } = await db
      .pool('api')
      .query(`select time_zone from schedules.list_schedules() where name = 'berlin-nightly'`);
    expect(listed).toEqual([{ time_zone: 'Europe/Berlin' }]);

    await db.query('truncate schedules.schedule, schedules.supervisor_task, queues.task cascade');
    await db.query(
      `select * from schedules.upsert_schedule_at('2026-10-24T00:00:00Z', 'berlin-nightly', '30 2 * * *',
                                                  'analytics_refresh', '{}', null, null, 'Europe/Berlin')`,
    );
    expect(await drive('berlin-nightly', '2026-10-24T00:00:00Z', '2026-10-26T03:00:00Z')).toEqual([
      '2026-10-24T00:30:00Z',
      '2026-10-25T00:30:00Z',
      '2026-10-26T01:30:00Z',
    ]);
  });

  it('an hourly New York job enqueues every real hour across the fall-back night', async () => {
    await db.query(
      `select * from schedules.upsert_schedule_at('2026-11-01T03:00:00Z', 'ny-hourly', '0 * * * *',
                                                  'analytics_refresh', '{}', null, null, 'America/New_York')`,
    );
    expect(await drive('ny-hourly', '2026-11-01T03:00:00Z', '2026-11-01T09:00:00Z')).toEqual(
      hours('2026-11-01T04:00:00Z', 6),
    );
  });

  it('changing the zone counts from the change, like changing the cron', async () => {
    await db.query(
      `select * from schedules.upsert_schedule_at('2026-06-01T00:00:00Z', 'moving', '0 12 * * *', 'analytics_refresh', '{}')`,
    );
    const { rows } = await db.query(
      `select * from schedules.upsert_schedule_at('2026-06-01T08:00:00Z', 'moving', '0 12 * * *', 'analytics_refresh', '{}',
                                                  null, null, 'Asia/Tokyo')`,
    );
    expect(rows[0].validation_failure_message).toBeNull();
    // 12:00 in Tokyo is 03:00 UTC: the next is the next day's, counted from the change.
    const { rows: next } = await db.query(
      `select schedules.next_due_fire_at(schedule_id) as t from schedules.schedule where name = 'moving'`,
    );
    expect(next[0].t.toISOString()).toBe('2026-06-02T03:00:00.000Z');
  });

  it.each([
    ['an unknown zone', 'Mars/Olympus_Mons'],
    ['a POSIX offset', 'UTC+5'],
    ['a wrongly cased name', 'europe/berlin'],
    ['an empty name', ''],
  ])('refuses %s with a message naming time_zone, writing nothing', async (_what, zone) => {
    const before = await db.query(
      `select (select count(*) from schedules.schedule)::int as s, (select count(*) from schedules.schedule_version)::int as v`,
    );
    const { rows } = await db
      .pool('app')
      .query(
        `select * from schedules.upsert_schedule('zoned', '0 3 * * *', 'analytics_refresh', '{}', null, null, $1)`,
        [zone],
      );
    expect(rows[0]).toMatchObject({
      schedule_id: null,
      validation_failure_message: expect.stringMatching(/^time_zone must be an IANA time zone name/),
    });
    const after = await db.query(
      `select (select count(*) from schedules.schedule)::int as s, (select count(*) from schedules.schedule_version)::int as v`,
    );
    expect(after.rows).toEqual(before.rows);
  });
});
