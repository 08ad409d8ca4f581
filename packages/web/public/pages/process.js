// @ts-check
// #/process/<name>/<root id> — one process: its supervision tree, the fact timeline of
// every node, and which of its queue tasks retention pruned.
import { api } from '../lib/api-client.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { fmtTime, stateBadge, taskLink, timeCell } from '../lib/format.js';
import { live, showPaused, SLOW_REFRESH_MS } from '../lib/live.js';

/**
 * A node of the supervision tree and the nodes below it.
 * @param {any} node a node of GET /api/processes/{process}/{root_id} `tree`
 * @returns {HTMLLIElement}
 */
function treeNode(node) {
  return h(
    'li',
    { 'data-process': node.process, 'data-root-id': node.root_id, 'data-status': node.status },
    h(
      'div',
      { class: `node node-${node.status}` },
      h('a', { href: `#/process/${node.process}/${node.root_id}` }, `${node.process} #${node.root_id}`),
      ' ',
      stateBadge(node.status),
      h(
        'span',
        { class: 'muted small' },
        ` attempts ${node.attempts}` +
          (node.failed_attempts ? ` (${node.failed_attempts} failed)` : '') +
          ` · supervisor runs ${node.supervisor_runs} · last fact ${fmtTime(node.last_fact_at)}`,
      ),
      node.failure ? h('div', { class: 'error small' }, node.failure.reason ?? JSON.stringify(node.failure)) : null,
    ),
    node.children?.length ? h('ul', {}, node.children.map(treeNode)) : null,
  );
}

/**
 * A fact of the timeline.
 * @typedef {{ at: string, process: string, root_id: number, fact: string, attempt_id: number | null, detail: any }} Fact
 */

/**
 * What retention dropped of a process's queue tasks (its queue_history_pruned facts): the
 * task ids, their set and when, or null when nothing was dropped.
 * @param {Fact[]} pruned
 */
function prunedNotice(pruned) {
  if (!pruned.length) return null;
  return h(
    'div',
    { class: 'notice', role: 'note', 'data-testid': 'pruned-notice' },
    h('strong', {}, 'Queue history pruned. '),
    'Retention dropped the queue’s records (leases, errors, completions) of these tasks; the process’s own facts below are kept. ',
    h('a', { href: '#/history' }, 'History and retention'),
    h(
      'ul',
      {},
      pruned.map((f) =>
        h(
          'li',
          { 'data-dropped-at': f.detail.dropped_at },
          `${f.process} #${f.root_id}: task${f.detail.task_ids.length === 1 ? '' : 's'} `,
          f.detail.task_ids.map((/** @type {number} */ t) => `#${t}`).join(', '),
          ` (set of task ids ${f.detail.lower_bound}–${f.detail.upper_bound - 1}) dropped ${fmtTime(f.detail.dropped_at)}`,
        ),
      ),
    ),
  );
}

/**
 * @param {string} name the process
 * @param {string} id its root id
 */
export async function processPage(name, id) {
  const tree = h('div');
  const notice = h('div');
  const timeline = h('div');
  put(
    main,
    h('h1', {}, `${name} #${id}`),
    notice,
    section('Supervision tree', tree),
    section('Fact timeline (all nodes, millisecond times)', timeline),
  );
  await live(async () => {
    const [data] = await Promise.all([
      api(`/api/processes/${encodeURIComponent(name)}/${encodeURIComponent(id)}`),
      showPaused(),
    ]);
    put(tree, h('ul', { class: 'tree', 'data-testid': 'process-tree' }, treeNode(data.tree)));
    /** @type {Fact[]} */
    const facts = [...data.timeline].sort((a, b) => new Date(a.at).getTime() - new Date(b.at).getTime());
    const pruned = facts.filter((f) => f.fact === 'queue_history_pruned');
    const prunedIds = new Set(pruned.flatMap((f) => f.detail.task_ids));
    put(notice, prunedNotice(pruned));
    // An attempt names the queue task that carried it: a link while the queue keeps it.
    const queueTask = (/** @type {Fact} */ f) =>
      f.fact === 'attempt' && f.detail?.task_id
        ? prunedIds.has(f.detail.task_id)
          ? h('span', { class: 'muted', 'data-testid': 'pruned-task' }, `task #${f.detail.task_id} (pruned) `)
          : h('span', {}, 'task ', taskLink(f.detail.task_id), ' ')
        : null;
    put(
      timeline,
      table(
        ['at', 'node', 'fact', 'attempt', 'detail'],
        facts.map((f) =>
          h(
            'tr',
            { 'data-fact': f.fact },
            timeCell(f.at),
            h('td', {}, h('a', { href: `#/process/${f.process}/${f.root_id}` }, `${f.process} #${f.root_id}`)),
            h('td', {}, stateBadge(f.fact)),
            h('td', {}, f.attempt_id ?? ''),
            h(
              'td',
              {},
              queueTask(f),
              Object.keys(f.detail ?? {}).length ? h('code', {}, JSON.stringify(f.detail)) : '',
            ),
          ),
        ),
        { 'data-testid': 'timeline' },
      ),
    );
  }, SLOW_REFRESH_MS);
}
