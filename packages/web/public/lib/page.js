// @ts-check
// The dashboard's frame (index.html): where pages render, and an error shown in place of a page.
import { byId, h, messageOf, put } from './dom.js';

/** Where pages render. */
export const main = byId('main');

/**
 * Shows an error in place of the page.
 * @param {unknown} error
 */
export function fail(error) {
  put(main, h('p', { class: 'error', role: 'alert' }, messageOf(error)));
}
