/**
 * A small writer for the Prometheus text exposition format (version 0.0.4): families
 * with HELP and TYPE lines, label values escaped.
 */
export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
export type Labels = Record<string, string | number>;

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

const escapeLabel = (v: string): string => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
const escapeHelp = (v: string): string => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');

export function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

export function formatLabels(labels: Labels): string {
  const entries = Object.entries(labels);
  if (entries.length === 0) return '';
  return `{${entries.map(([k, v]) => `${k}="${escapeLabel(String(v))}"`).join(',')}}`;
}

export class Exposition {
  readonly #lines: string[] = [];

  family(name: string, type: MetricType, help: string): this {
    this.#lines.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`);
    return this;
  }

  sample(name: string, labels: Labels, value: number): this {
    this.#lines.push(`${name}${formatLabels(labels)} ${formatValue(value)}`);
    return this;
  }

  /** Histogram samples: cumulative `counts` per bound in `bounds`, then +Inf, _sum, _count. */
  histogram(name: string, labels: Labels, bounds: number[], counts: number[], sum: number, count: number): this {
    bounds.forEach((b, i) => this.sample(`${name}_bucket`, { ...labels, le: formatValue(b) }, counts[i] ?? 0));
    this.sample(`${name}_bucket`, { ...labels, le: '+Inf' }, count);
    this.sample(`${name}_sum`, labels, sum);
    this.sample(`${name}_count`, labels, count);
    return this;
  }

  toString(): string {
    return `${this.#lines.join('\n')}\n`;
  }
}

/** The duration bucket bounds (seconds), the same as admin.duration_buckets() in SQL. */
export const DURATION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
