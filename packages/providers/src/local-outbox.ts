// Local mode for email and SMS: each message becomes a JSON file in an outbox folder
// instead of leaving the machine. Humans read the files; tests use `readOutbox`.
import { randomUUID } from 'node:crypto';
import { mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  emailPayload,
  smsPayload,
  type EmailPayload,
  type Provider,
  type ProviderContext,
  type SmsPayload,
} from '@org/contracts';
import { defaultDataDir, throwIfAborted } from './internal.js';

/** `<repo>/.data/outbox`: the default outbox root (`email/` and `sms/` below it). */
export const defaultOutboxDir = defaultDataDir('outbox');

export interface LocalOutboxOptions {
  /** The folder the messages are written to. Default `<repo>/.data/outbox/email` (or `/sms`). */
  dir?: string;
  /** Sender written for emails whose payload has none. */
  defaultFrom?: string;
  /** Sender written for SMS whose payload has none. Default `+15005550006`. */
  fromNumber?: string;
}

/** One file in the outbox. */
export interface OutboxMessage<P = EmailPayload | SmsPayload> {
  /** Also the file name without `.json`: `<timestamp>-<uuid>`. */
  id: string;
  channel: 'email' | 'sms';
  written_at: string;
  task_id: string;
  task_lease_id: string;
  task_type: string;
  /** The payload as the provider got it (for SMS, `from_number` filled in). */
  payload: P;
}

/** What `send` resolves to: the `worker_payload` of the success handler. */
export interface LocalOutboxResult {
  provider: 'local-outbox';
  id: string;
  /** Absolute path of the written file. */
  file: string;
}

async function writeMessage(
  dir: string,
  message: Omit<OutboxMessage, 'id' | 'written_at'>,
): Promise<LocalOutboxResult> {
  await mkdir(dir, { recursive: true });
  const now = new Date();
  // Sortable by time, unique by uuid.
  const id = `${now.toISOString().replace(/[:.]/g, '-')}-${randomUUID()}`;
  const file = join(dir, `${id}.json`);
  const full: OutboxMessage = { id, written_at: now.toISOString(), ...message };
  // Write then rename, so a reader never sees half a file.
  const tmp = join(dir, `.${id}.tmp`);
  await writeFile(tmp, `${JSON.stringify(full, null, 2)}\n`, 'utf8');
  await rename(tmp, file);
  return { provider: 'local-outbox', id, file };
}

function contextFields(context: ProviderContext) {
  return { task_id: context.taskId, task_lease_id: context.taskLeaseId, task_type: context.taskType };
}

/** The `email` provider of local mode: writes `<dir>/<id>.json` per email. */
export function createLocalEmailOutboxProvider(
  options: LocalOutboxOptions = {},
): Provider<EmailPayload> & { dir: string } {
  const dir = options.dir ?? join(defaultOutboxDir, 'email');
  return {
    name: 'local-outbox',
    dir,
    payloadSchema: emailPayload,
    async send(payload: EmailPayload, context: ProviderContext): Promise<LocalOutboxResult> {
      throwIfAborted(context.signal, 'local-outbox');
      const from_address = payload.from_address || options.defaultFrom;
      return writeMessage(dir, {
        channel: 'email',
        ...contextFields(context),
        payload: { ...payload, ...(from_address ? { from_address } : {}) },
      });
    },
  };
}

/** The `sms` provider of local mode: writes `<dir>/<id>.json` per SMS. */
export function createLocalSmsOutboxProvider(options: LocalOutboxOptions = {}): Provider<SmsPayload> & { dir: string } {
  const dir = options.dir ?? join(defaultOutboxDir, 'sms');
  const fromNumber = options.fromNumber ?? '+15005550006';
  return {
    name: 'local-outbox',
    dir,
    payloadSchema: smsPayload,
    async send(payload: SmsPayload, context: ProviderContext): Promise<LocalOutboxResult> {
      throwIfAborted(context.signal, 'local-outbox');
      return writeMessage(dir, {
        channel: 'sms',
        ...contextFields(context),
        payload: { ...payload, from_number: payload.from_number ?? fromNumber },
      });
    },
  };
}

/**
 * The messages in an outbox folder, oldest first. A missing folder is an empty outbox.
 * `readOutbox<EmailPayload>(dir)` types the payloads.
 */
export async function readOutbox<P = EmailPayload | SmsPayload>(dir: string): Promise<OutboxMessage<P>[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const files = names.filter((n) => n.endsWith('.json') && !n.startsWith('.')).sort();
  return Promise.all(
    files.map(async (name) => JSON.parse(await readFile(join(dir, name), 'utf8')) as OutboxMessage<P>),
  );
}
