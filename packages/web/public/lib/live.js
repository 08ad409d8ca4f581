// @ts-check
// Live refresh: a page's data is read again in place while the page is shown and the tab
// is visible, keeping selections and form input; the header says when it was last read.
import { api } from './api-client.js';
import { byId, h, messageOf, put } from './dom.js';
import { fmtTime } from './format.js';

/** Most pages refresh this often. */
export const REFRESH_MS = 2000;
/** Pages that read the whole claim index (overview, queues, workers: cost follows pending work) refresh this often. */
export const PENDING_REFRESH_MS = 5000;
/** The overview's windows (24 h outcomes, the hour's charts, capacity) refresh this often. */
export const WINDOW_REFRESH_MS = 60_000;
/** Pages whose reads grow with what they show (process trees, schedules) refresh this often. */
export const SLOW_REFRESH_MS = 10_000;

/** Counts the pages shown: a page's refresh stops once another page (or the login) is shown. */
let generation = 0;
/** A new page is shown: the refreshes of the one before stop. */
export function nextGeneration() {
  generation++;
}

/**
 * Calls `refresh` now and every `everyMs` while this page is shown and the tab is visible.
 * A refresh updates parts of the page in place. The first call's failure is the page's
 * (thrown, shown by the router); later ones are shown beside the "updated" time and retried.
 * @param {() => Promise<void>} refresh
 * @param {number} [everyMs]
 */
export async function live(refresh, everyMs = REFRESH_MS) {
  const mine = generation;
  const stamp = byId('updated');
  const tick = async () => {
    if (mine !== generation) return;
    if (document.visibilityState !== 'hidden') {
      try {
        await refresh();
        stamp.textContent = `updated ${fmtTime(new Date())}`;
        stamp.className = '';
      } catch (error) {
        stamp.textContent = `refresh failed: ${messageOf(error)}`;
        stamp.className = 'error';
      }
    }
    if (mine === generation) setTimeout(() => void tick(), everyMs);
  };
  await refresh();
  stamp.textContent = `updated ${fmtTime(new Date())}`;
  stamp.className = '';
  setTimeout(() => void tick(), everyMs);
}

/**
 * A queue (GET /api/queues), as far as the header needs it.
 * @typedef {{ task_type: string, paused: boolean }} QueueSummary
 */

/**
 * The paused task types, shown in the header on every page. Pages that read the queues
 * anyway pass them; the others read them at most every PAUSED_REFRESH_MS (a read of the
 * claim index).
 */
const PAUSED_REFRESH_MS = 30_000;
/** @type {{ at: number, queues: QueueSummary[] | null }} */
let pausedCache = { at: 0, queues: null };

/**
 * Shows the paused task types in the header; the queues, read when not given.
 * @param {QueueSummary[]} [queues]
 * @returns {Promise<QueueSummary[]>}
 */
export async function showPaused(queues) {
  if (!queues && pausedCache.queues && Date.now() - pausedCache.at < PAUSED_REFRESH_MS) queues = pausedCache.queues;
  /** @type {QueueSummary[]} */
  const list = queues ?? (await api('/api/queues')).queues;
  if (list !== pausedCache.queues) pausedCache = { at: Date.now(), queues: list };
  const paused = list.filter((q) => q.paused);
  put(
    byId('paused'),
    paused.length
      ? h(
          'a',
          { href: '#/queues', 'data-testid': 'paused-banner' },
          `Paused: ${paused.map((q) => q.task_type).join(', ')}`,
        )
      : null,
  );
  return list;
}
