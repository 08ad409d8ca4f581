// @ts-check
// #/processes — the roots of one business process (a tab per process), newest first with
// stuck and failed ones at the top of each page.
import { api } from '../lib/api-client.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { stateBadge, timeCell } from '../lib/format.js';
import { live, showPaused, SLOW_REFRESH_MS } from '../lib/live.js';

/** Roots per page (GET /api/processes/{process}). */
const PAGE = 50;

/**
 * @param {URLSearchParams} params `process`, `before`
 */
export async function processes(params) {
  const [names] = /** @type {[string[], unknown]} */ (
    await Promise.all([api('/api/processes').then((r) => r.processes), showPaused()])
  );
  const current = params.get('process') ?? names[0];
  const list = h('div');
  put(
    main,
    h('h1', {}, 'Processes'),
    h(
      'nav',
      { class: 'tabs', 'data-testid': 'process-nav' },
      names.map((n) => h('a', { href: `#/processes?process=${n}`, class: n === current ? 'current' : '' }, n)),
    ),
    h(
      'p',
      { class: 'muted' },
      'Newest roots first, with stuck and failed ones at the top of each page. Stuck: nothing recorded for 10 minutes, or the last three attempts failed (for a parent: a node below it).',
    ),
    section(null, list),
  );
  if (!current) return;
  await live(async () => {
    const q = new URLSearchParams();
    const before = params.get('before');
    if (before) q.set('before', before);
    const data = await api(`/api/processes/${encodeURIComponent(current)}?${q}`);
    /** @type {any[]} */
    const roots = data.roots;
    put(
      list,
      table(
        ['root', 'status', 'attempts', 'stuck or failed below', 'started', 'last fact', 'subject'],
        roots.map((r) =>
          h(
            'tr',
            { 'data-root-id': r.root_id },
            h('td', {}, h('a', { href: `#/process/${current}/${r.root_id}` }, `${current} #${r.root_id}`)),
            h('td', {}, stateBadge(r.status)),
            h('td', { class: 'num' }, r.attempts),
            h('td', { class: 'num' }, r.stuck_descendants || ''),
            timeCell(r.created_at),
            timeCell(r.last_fact_at),
            h('td', {}, h('code', {}, JSON.stringify(r.subject))),
          ),
        ),
        { 'data-testid': 'process-roots' },
      ),
      roots.length === PAGE
        ? h(
            'p',
            {},
            h(
              'a',
              { href: `#/processes?process=${current}&before=${Math.min(...roots.map((r) => r.root_id))}` },
              'Older →',
            ),
          )
        : null,
    );
  }, SLOW_REFRESH_MS);
}
