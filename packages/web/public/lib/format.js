// @ts-check
// Numbers, times and sizes as the pages show them, and the small links and badges every
// page uses.
import { h } from './dom.js';

/** The task states, in the order the pages list them. */
export const STATES = [
  'scheduled',
  'ready',
  'running',
  'retrying',
  'succeeded',
  'failed',
  'abandoned',
  'cancelled',
  'validation_failed',
  // Waiting for its dependencies (docs/flow-control.md): counted with the outcomes, from
  // the task counts, not from the queues' pending counts.
  'waiting',
];
/** The states of a task not yet completed whose counts the Queues listing has. */
export const PENDING = ['scheduled', 'ready', 'running', 'retrying'];

/**
 * @param {number} n
 * @param {number} [w]
 */
const pad = (n, w = 2) => String(n).padStart(w, '0');

/**
 * Local time with milliseconds: 2026-11-23 18:53:41.123.
 * @param {string | number | Date | null | undefined} v
 */
export function fmtTime(v) {
  if (!v) return '';
  const d = new Date(v);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/**
 * A table cell with a time (the ISO text in its title).
 * @param {string | null | undefined} v
 */
export const timeCell = (v) => h('td', { class: 'time', title: v ?? '' }, fmtTime(v));

/**
 * 42.5 → '42.5 s', 600 → '10.0 min', 7200 → '2.0 h'.
 * @param {number | null | undefined} seconds
 */
export function fmtAge(seconds) {
  if (seconds === null || seconds === undefined) return '';
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

/**
 * 1536 → '1.5 kB' (powers of 1024, as pg_size_pretty).
 * @param {number | null | undefined} n
 */
export function fmtBytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

/**
 * 604800 → '7 d', 5400 → '1.5 h'.
 * @param {number} seconds
 */
export function fmtWindow(seconds) {
  if (seconds >= 86_400) return `${+(seconds / 86_400).toFixed(1)} d`;
  if (seconds >= 3600) return `${+(seconds / 3600).toFixed(1)} h`;
  if (seconds >= 60) return `${+(seconds / 60).toFixed(1)} min`;
  return `${seconds} s`;
}

/**
 * A number with `digits` decimals, or a dash when there is none.
 * @param {number | string | null | undefined} v
 * @param {number} [digits]
 */
export const num = (v, digits = 0) => (v === null || v === undefined ? '—' : Number(v).toFixed(digits));

/**
 * Indented JSON.
 * @param {unknown} v
 */
export const json = (v) => JSON.stringify(v, null, 2);

/**
 * A datetime-local input value (local time) to ISO 8601 with the zone.
 * @param {string} v
 */
export const localToIso = (v) => (v ? new Date(v).toISOString() : '');

/**
 * ISO 8601 to a datetime-local input value (local time).
 * @param {string | null} v
 */
export function isoToLocal(v) {
  if (!v) return '';
  const d = new Date(v);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/**
 * A state (or status) as a coloured badge.
 * @param {string} state
 */
export const stateBadge = (state) => h('span', { class: `state state-${state}` }, state);

/**
 * A link to a task's page.
 * @param {number | string} id
 */
export const taskLink = (id) => h('a', { href: `#/task/${id}` }, `#${id}`);
