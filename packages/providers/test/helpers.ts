import type { ProviderContext } from '@org/contracts';

/** A provider context for tests. */
export function ctx(signal: AbortSignal = new AbortController().signal): ProviderContext {
  return { taskId: '1', taskLeaseId: '2', taskType: 'test', signal };
}

/** A pino-compatible logger that records calls. */
export function memoryLogger() {
  const lines: { level: 'warn' | 'info'; obj: unknown; msg: string | undefined }[] = [];
  const rec = (level: 'warn' | 'info') => (obj: unknown, msg?: string) => {
    lines.push(typeof obj === 'string' ? { level, obj: undefined, msg: obj } : { level, obj, msg });
  };
  return { lines, warn: rec('warn'), info: rec('info') };
}
