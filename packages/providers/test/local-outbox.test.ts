import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EmailPayload, SmsPayload } from '@org/contracts';
import {
  createLocalEmailOutboxProvider,
  createLocalSmsOutboxProvider,
  readOutbox,
  defaultOutboxDir,
} from '@org/providers';
import { ctx } from './helpers.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'outbox-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('local outbox', () => {
  it('writes each email as a readable JSON file', async () => {
    const provider = createLocalEmailOutboxProvider({ dir: join(dir, 'email') });
    expect(provider.name).toBe('local-outbox');
    const payload = {
      idempotency_key: 'a-1',
      from_address: 'noreply@example.com',
      to_address: 'bob@example.com',
      subject: 'Hi',
      html: '<b>x</b>',
    };
    const result = await provider.send(payload, ctx());
    expect(result).toMatchObject({
      provider: 'local-outbox',
      file: join(dir, 'email', `${(result as { id: string }).id}.json`),
    });

    const files = await readdir(join(dir, 'email'));
    expect(files).toEqual([`${(result as { id: string }).id}.json`]);
    const text = await readFile(join(dir, 'email', files[0]), 'utf8');
    expect(text).toContain('\n  "channel": "email"'); // pretty-printed for humans
    expect(JSON.parse(text)).toMatchObject({ channel: 'email', task_id: '1', task_lease_id: '2', payload });

    const second = await provider.send({ ...payload, subject: 'Second' }, ctx());
    const messages = await readOutbox<EmailPayload>(join(dir, 'email'));
    expect(messages.map((m) => m.payload.subject)).toEqual(['Hi', 'Second']);
    expect(messages[1].id).toBe((second as { id: string }).id);
  });

  it('writes SMS with the default sender filled in', async () => {
    const provider = createLocalSmsOutboxProvider({ dir: join(dir, 'sms'), fromNumber: '+15550001111' });
    await provider.send({ to_number: '+14155550100', body: 'code 1' }, ctx());
    const [message] = await readOutbox<SmsPayload>(join(dir, 'sms'));
    expect(message).toMatchObject({
      channel: 'sms',
      payload: { to_number: '+14155550100', from_number: '+15550001111', body: 'code 1' },
    });
  });

  it('reads a missing outbox as empty', async () => {
    expect(await readOutbox(join(dir, 'nope'))).toEqual([]);
  });

  it('defaults to <repo>/.data/outbox', () => {
    expect(defaultOutboxDir).toMatch(/\/\.data\/outbox$/);
    expect(createLocalEmailOutboxProvider().dir).toBe(join(defaultOutboxDir, 'email'));
    expect(createLocalSmsOutboxProvider().dir).toBe(join(defaultOutboxDir, 'sms'));
  });
});
