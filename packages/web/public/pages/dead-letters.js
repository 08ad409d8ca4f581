// @ts-check
// #/dead-letters — tasks that completed failed (with no error handler) or abandoned, not
// yet redriven: redrive one, the selected, or every one the filter shows.
import { api, mutate } from '../lib/api-client.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { stateBadge, taskLink, timeCell } from '../lib/format.js';
import { live, showPaused } from '../lib/live.js';
import { actionButton } from '../lib/session.js';

/**
 * @param {URLSearchParams} params `task_type`, `before`
 */
export async function deadLetters(params) {
  await showPaused();
  const q = new URLSearchParams();
  for (const k of ['task_type', 'before']) {
    const v = params.get(k);
    if (v) q.set(k, v);
  }
  const type = params.get('task_type');
  const note = h('p', { 'data-testid': 'redrive-result', role: 'status' });
  const list = h('div');
  /** @type {Set<number>} */
  const sel = new Set();
  const bulk = h(
    'p',
    { class: 'actions' },
    actionButton(
      'Redrive selected',
      { 'data-testid': 'redrive-selected' },
      async () => {
        if (!sel.size) return 'select dead letters first';
        const r = await mutate('/api/dead-letters/redrive', { task_ids: [...sel] });
        sel.clear();
        await refresh();
        return `redriven ${r.redriven} of ${r.results.length}`;
      },
      note,
    ),
    actionButton(
      `Redrive all ${type ?? ''} dead letters (up to 500)`,
      { class: 'secondary', 'data-testid': 'redrive-matching' },
      async () => {
        if (!confirm('Redrive every dead letter shown by this filter (up to 500)?')) return null;
        const r = await mutate('/api/dead-letters/redrive', {
          filter: type ? { task_type: type } : {},
          limit: 500,
        });
        await refresh();
        return `redriven ${r.redriven} of ${r.results.length}`;
      },
      note,
    ),
  );
  /** @param {any} d a dead letter of GET /api/dead-letters */
  const row = (d) => {
    const box = h('input', {
      type: 'checkbox',
      'aria-label': `select task ${d.task_id}`,
      checked: sel.has(d.task_id),
      onchange: () => {
        if (box.checked) sel.add(d.task_id);
        else sel.delete(d.task_id);
      },
    });
    return h(
      'tr',
      { 'data-task-id': d.task_id },
      h('td', {}, box),
      h('td', {}, taskLink(d.task_id)),
      h('td', {}, d.task_type),
      h('td', {}, stateBadge(d.outcome)),
      h('td', { class: 'num' }, d.attempts),
      timeCell(d.completed_at),
      h('td', {}, d.last_error ?? ''),
      h(
        'td',
        {},
        actionButton(
          'Redrive',
          { 'data-testid': `redrive-${d.task_id}` },
          async () => {
            const r = await mutate(`/api/dead-letters/${d.task_id}/redrive`);
            await refresh();
            return [h('span', { class: 'ok' }, `Task #${d.task_id} redriven as `), taskLink(r.new_task_id)];
          },
          note,
        ),
      ),
    );
  };
  async function refresh() {
    const data = await api(`/api/dead-letters?${q}`);
    put(
      list,
      table(['', '#', 'type', 'outcome', 'attempts', 'completed', 'last error', ''], data.dead_letters.map(row), {
        'data-testid': 'dead-letters',
      }),
      data.next_before ? h('p', {}, h('a', { href: `#/dead-letters?before=${data.next_before}` }, 'Older →')) : null,
    );
  }
  put(
    main,
    h('h1', {}, 'Dead letters'),
    h('p', { class: 'muted' }, 'Tasks that completed failed (with no error handler) or abandoned, not yet redriven.'),
    note,
    section(null, bulk, list),
  );
  await live(refresh);
}
