/** How the CLI prints: aligned text columns for people, JSON with --json for scripts. */

export interface Io {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

/** A value as one table cell: dates as ISO text, objects as compact JSON, nothing as "-". */
function cell(value: unknown): string {
  if (value === null || value === undefined) return '-';
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  return JSON.stringify(value);
}

/** Rows as a table of the given columns, one line per row, headed by the column names. */
export function table(rows: readonly Record<string, unknown>[], columns: readonly string[]): string {
  const cells = rows.map((row) => columns.map((c) => cell(row[c])));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i]!.length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.toUpperCase())), ...cells.map(line)].join('\n') + '\n';
}

/** One record as "key: value" lines. */
export function record(row: Record<string, unknown>): string {
  const width = Math.max(...Object.keys(row).map((k) => k.length));
  return (
    Object.entries(row)
      .map(([k, v]) => `${k.padEnd(width)}  ${cell(v)}`)
      .join('\n') + '\n'
  );
}

export function json(value: unknown): string {
  return JSON.stringify(value, null, 2) + '\n';
}
