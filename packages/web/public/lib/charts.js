// @ts-check
// The overview's charts of the last hour, as inline SVG: one frame (axis, time labels,
// the scale, a legend), stacked bars of completions per minute, and one line of pending
// tasks per task type.
import { h, s } from './dom.js';

const W = 600;
const H = 140;
const PALETTE = ['#2b6cb0', '#c05621', '#2f855a', '#6b46c1', '#b83280', '#2c7a7b', '#975a16', '#4a5568', '#c53030'];

/**
 * The frame every chart shares: an SVG of the last hour with its baseline, time labels and
 * scale, then the legend below it.
 * @param {{ label: string, testid: string, scale: string, marks: SVGElement[], legend: import('./dom.js').Child }} chart
 */
function hourChart({ label, testid, scale, marks, legend }) {
  return h(
    'div',
    {},
    s(
      'svg',
      {
        class: 'chart',
        viewBox: `0 0 ${W} ${H + 14}`,
        preserveAspectRatio: 'none',
        role: 'img',
        'aria-label': label,
        'data-testid': testid,
      },
      s('line', { x1: 0, y1: H, x2: W, y2: H, stroke: '#d9dee4' }),
      marks,
      s('text', { x: 0, y: H + 12 }, '-60 min'),
      s('text', { x: W - 24, y: H + 12 }, 'now'),
      s('text', { x: 0, y: 10 }, scale),
    ),
    h('div', { class: 'legend' }, legend),
  );
}

/**
 * A legend entry: a swatch (a class, or a colour drawn in SVG) and its text.
 * @param {{ swatchClass?: string, color?: string, index?: number }} swatch
 * @param {string} text
 */
function legendEntry({ swatchClass, color, index }, text) {
  return h(
    'span',
    {},
    color
      ? h(
          'span',
          { class: 'swatch', 'data-color': index },
          s('svg', { width: 12, height: 12 }, s('rect', { width: 12, height: 12, fill: color })),
        )
      : h('span', { class: `swatch ${swatchClass}` }),
    text,
  );
}

/**
 * Completions of a bucket (GET /api/overview `throughput`).
 * @typedef {{ bucket_start: string, task_type: string, outcome: string, completed: number }} ThroughputBucket
 */

/**
 * Completions per bucket over the window, succeeded below the other outcomes.
 * @param {ThroughputBucket[]} buckets
 * @param {number} windowSeconds
 * @param {number} bucketSeconds
 */
export function throughputChart(buckets, windowSeconds, bucketSeconds) {
  const n = Math.ceil(windowSeconds / bucketSeconds);
  const start = Date.now() - windowSeconds * 1000;
  const ok = new Array(n).fill(0);
  const other = new Array(n).fill(0);
  for (const b of buckets) {
    const i = Math.min(
      n - 1,
      Math.max(0, Math.floor((new Date(b.bucket_start).getTime() - start) / (bucketSeconds * 1000))),
    );
    (b.outcome === 'succeeded' ? ok : other)[i] += b.completed;
  }
  const max = Math.max(1, ...ok.map((v, i) => v + other[i]));
  const bw = W / n;
  /** @type {SVGElement[]} */
  const bars = [];
  for (let i = 0; i < n; i++) {
    const hOk = (ok[i] / max) * (H - 20);
    const hOther = (other[i] / max) * (H - 20);
    if (ok[i])
      bars.push(
        s(
          'rect',
          { class: 'bar-succeeded', x: i * bw + 1, y: H - hOk, width: Math.max(1, bw - 2), height: hOk },
          s('title', {}, `${ok[i]} succeeded`),
        ),
      );
    if (other[i])
      bars.push(
        s(
          'rect',
          { class: 'bar-other', x: i * bw + 1, y: H - hOk - hOther, width: Math.max(1, bw - 2), height: hOther },
          s('title', {}, `${other[i]} failed/abandoned/cancelled/validation_failed`),
        ),
      );
  }
  return hourChart({
    label: 'completions per minute, last hour',
    testid: 'throughput-chart',
    scale: `max ${max}/min`,
    marks: bars,
    legend: [
      legendEntry({ swatchClass: 'swatch-ok' }, 'succeeded'),
      legendEntry({ swatchClass: 'swatch-bad' }, 'failed, abandoned, cancelled, validation failed'),
    ],
  });
}

/**
 * Pending tasks of a type at the end of a bucket (GET /api/overview `depth`).
 * @typedef {{ bucket_end: string, task_type: string, depth: number }} DepthBucket
 */

/**
 * One line per task type that had pending tasks in the hour.
 * @param {DepthBucket[]} buckets
 */
export function depthChart(buckets) {
  /** @type {Map<string, DepthBucket[]>} */
  const byType = new Map();
  for (const b of buckets) {
    const points = byType.get(b.task_type) ?? [];
    points.push(b);
    byType.set(b.task_type, points);
  }
  const series = [...byType.entries()].filter(([, points]) => points.some((p) => p.depth > 0));
  const max = Math.max(1, ...series.flatMap(([, points]) => points.map((p) => p.depth)));
  const color = (/** @type {number} */ k) => PALETTE[k % PALETTE.length];
  const last = (/** @type {DepthBucket[]} */ points) => points[points.length - 1]?.depth;
  const lines = series.map(([type, points], k) => {
    const step = W / Math.max(1, points.length - 1);
    const d = points.map((p, i) => `${(i * step).toFixed(1)},${(H - (p.depth / max) * (H - 16)).toFixed(1)}`).join(' ');
    return s(
      'polyline',
      { points: d, fill: 'none', stroke: color(k), 'stroke-width': 2 },
      s('title', {}, `${type}: ${last(points)} pending now`),
    );
  });
  return hourChart({
    label: 'pending tasks per type, last hour',
    testid: 'depth-chart',
    scale: `max ${max}`,
    marks: lines,
    legend: series.length
      ? series.map(([type, points], k) => legendEntry({ color: color(k), index: k }, `${type} (${last(points)})`))
      : h('span', { class: 'muted' }, 'no pending tasks in the last hour'),
  });
}
