// @ts-check
// #/tasks — the task list: filters (type, state, worker, resource key, enqueued between,
// a payload field's value), look-up by id, selection and bulk actions (cancel, run now,
// redrive, cancel all matching), newest first with paging.
import { api, mutate } from '../lib/api-client.js';
import { h, put, section } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { isoToLocal, localToIso, stateBadge, STATES, taskLink, timeCell } from '../lib/format.js';
import { live, REFRESH_MS, showPaused } from '../lib/live.js';
import { actionButton, canWrite } from '../lib/session.js';

const FILTERS = [
  'task_type',
  'state',
  'worker_id',
  'resource_key',
  'enqueued_from',
  'enqueued_to',
  'payload_path',
  'payload_value',
];
/** The selected task ids: kept while the list refreshes and pages. */
const selected = new Set();

/**
 * The outcome of a bulk action: how many of the tasks it reached, and the results seen.
 * @param {string} verb
 * @param {{ results: { result: string }[] }} r
 * @param {string} ok
 */
const results = (verb, r, ok) =>
  `${verb}: ${r.results.filter((x) => x.result === ok).length} of ${r.results.length} (${[...new Set(r.results.map((x) => x.result))].join(', ')})`;

/**
 * @param {URLSearchParams} params the filters
 */
export async function tasks(params) {
  const [types] = await Promise.all([api('/api/tasks/types'), showPaused()]);
  const q = new URLSearchParams();
  for (const k of [...FILTERS, 'before']) {
    const v = params.get(k);
    if (v) q.set(k, v);
  }
  const field = (/** @type {string} */ label, /** @type {HTMLElement} */ el) => h('label', {}, label, el);
  const typeSelect = h(
    'select',
    { name: 'task_type' },
    h('option', { value: '' }, 'any type'),
    types.task_types.map((/** @type {{ task_type: string }} */ t) =>
      h('option', { value: t.task_type, selected: params.get('task_type') === t.task_type }, t.task_type),
    ),
  );
  const stateSelect = h(
    'select',
    { name: 'state' },
    h('option', { value: '' }, 'any state'),
    STATES.map((st) => h('option', { value: st, selected: params.get('state') === st }, st)),
  );
  const text = (/** @type {string} */ name, /** @type {string} */ placeholder) =>
    h('input', { name, value: params.get(name) ?? '', placeholder, size: 14 });
  /** @type {Record<string, HTMLInputElement>} */
  const inputs = {
    worker_id: text('worker_id', 'worker id'),
    resource_key: text('resource_key', 'resource key'),
    enqueued_from: h('input', {
      type: 'datetime-local',
      name: 'enqueued_from',
      value: isoToLocal(params.get('enqueued_from')),
    }),
    enqueued_to: h('input', {
      type: 'datetime-local',
      name: 'enqueued_to',
      value: isoToLocal(params.get('enqueued_to')),
    }),
    payload_path: text('payload_path', 'e.g. send_email_task_id'),
    payload_value: text('payload_value', 'JSON or text'),
  };
  // Searching payloads by value is for operators only (the API answers 403 to others).
  if (!canWrite())
    for (const k of ['payload_path', 'payload_value']) {
      inputs[k].disabled = true;
      inputs[k].title = 'Payload search by value needs an operator';
    }
  const filters = h(
    'form',
    {
      class: 'inline',
      'data-testid': 'task-filters',
      onsubmit: (e) => {
        e.preventDefault();
        const p = new URLSearchParams();
        if (typeSelect.value) p.set('task_type', typeSelect.value);
        if (stateSelect.value) p.set('state', stateSelect.value);
        for (const [k, el] of Object.entries(inputs)) {
          const v = k.startsWith('enqueued_') ? localToIso(el.value) : el.value.trim();
          if (v) p.set(k, v);
        }
        selected.clear();
        location.hash = `#/tasks?${p}`;
      },
    },
    field('type', typeSelect),
    field('state', stateSelect),
    field('worker', inputs.worker_id),
    field('resource key', inputs.resource_key),
    field('enqueued from', inputs.enqueued_from),
    field('enqueued before', inputs.enqueued_to),
    field('payload field', inputs.payload_path),
    field('equals', inputs.payload_value),
    h('button', { type: 'submit' }, 'Filter'),
    h('a', { href: '#/tasks', class: 'button-link' }, 'Clear'),
  );
  const idInput = h('input', {
    name: 'task_id',
    placeholder: 'task id',
    inputmode: 'numeric',
    size: 10,
    'data-testid': 'lookup-input',
  });
  const lookup = h(
    'form',
    {
      class: 'inline',
      'data-testid': 'lookup-form',
      onsubmit: (e) => {
        e.preventDefault();
        const v = idInput.value.trim().replace(/^#/, '');
        if (/^\d+$/.test(v)) location.hash = `#/task/${v}`;
      },
    },
    h('label', {}, 'look up by id', idInput),
    h('button', { type: 'submit', class: 'secondary' }, 'Open'),
  );

  const out = h('p', { 'data-testid': 'action-result', role: 'status' });
  const selCount = h('span', { class: 'muted', 'data-testid': 'selection-count' });
  const list = h('div');
  const older = h('p');
  const state = params.get('state');
  /** @type {{ task_id: number }[]} */
  let current = [];
  const updateSelection = () => {
    selCount.textContent = `${selected.size} selected`;
  };
  const bulk = h(
    'div',
    { class: 'actions', 'data-testid': 'bulk-actions' },
    selCount,
    actionButton(
      'Cancel selected',
      { 'data-testid': 'cancel-selected' },
      async () => {
        if (!selected.size) return 'select pending tasks first';
        const r = await mutate('/api/tasks/cancel', {
          task_ids: [...selected],
          reason: 'cancelled from the dashboard',
        });
        selected.clear();
        await refresh();
        return results('cancelled', r, 'cancelled');
      },
      out,
    ),
    actionButton(
      'Run selected now',
      { 'data-testid': 'run-now-selected' },
      async () => {
        if (!selected.size) return 'select scheduled tasks first';
        const r = await mutate('/api/tasks/run-now', { task_ids: [...selected] });
        selected.clear();
        await refresh();
        return results('run now', r, 'run_now');
      },
      out,
    ),
    actionButton(
      'Redrive selected',
      { 'data-testid': 'redrive-selected' },
      async () => {
        if (!selected.size) return 'select dead letters first';
        const r = await mutate('/api/dead-letters/redrive', { task_ids: [...selected] });
        selected.clear();
        await refresh();
        return results('redriven', r, 'redriven');
      },
      out,
    ),
    ['waiting', 'scheduled', 'ready', 'retrying', null].includes(state ?? null) &&
      !params.get('worker_id') &&
      !params.get('resource_key') &&
      !params.get('payload_path') &&
      !params.get('enqueued_from') &&
      !params.get('enqueued_to')
      ? actionButton(
          `Cancel all matching ${params.get('task_type') ?? 'any type'} / ${state ?? 'waiting, scheduled, ready, retrying'} (up to 1000)`,
          { class: 'danger', 'data-testid': 'cancel-matching' },
          async () => {
            if (!confirm('Cancel every matching pending task (up to 1000)?')) return null;
            /** @type {{ task_type?: string, state?: string }} */
            const filter = {};
            const type = params.get('task_type');
            if (type) filter.task_type = type;
            if (state) filter.state = state;
            const r = await mutate('/api/tasks/cancel', {
              filter,
              limit: 1000,
              reason: 'cancelled by filter from the dashboard',
            });
            await refresh();
            return results('cancelled', r, 'cancelled');
          },
          out,
        )
      : null,
  );

  async function refresh() {
    const data = await api(`/api/tasks?${q}`);
    current = data.tasks;
    const all = h('input', {
      type: 'checkbox',
      'aria-label': 'select all on this page',
      checked: current.length > 0 && current.every((t) => selected.has(t.task_id)),
      onchange: () => {
        for (const t of current) {
          if (all.checked) selected.add(t.task_id);
          else selected.delete(t.task_id);
        }
        list.querySelectorAll('input[data-select]').forEach((c) => {
          /** @type {HTMLInputElement} */ (c).checked = all.checked;
        });
        updateSelection();
      },
    });
    /** @param {any} t a task of GET /api/tasks */
    const row = (t) => {
      const box = h('input', {
        type: 'checkbox',
        'data-select': t.task_id,
        'aria-label': `select task ${t.task_id}`,
        checked: selected.has(t.task_id),
        onchange: () => {
          if (box.checked) selected.add(t.task_id);
          else selected.delete(t.task_id);
          updateSelection();
        },
      });
      return h(
        'tr',
        { 'data-task-id': t.task_id },
        h('td', {}, box),
        h('td', {}, taskLink(t.task_id)),
        h('td', {}, t.task_type),
        h('td', {}, stateBadge(t.state)),
        h('td', { class: 'num' }, t.priority),
        h('td', {}, t.resource_key ?? ''),
        h('td', { class: 'num' }, t.lease_count),
        timeCell(t.enqueued_at),
        timeCell(t.completed_at ?? t.available_at),
      );
    };
    const rows = current.map(row);
    put(
      list,
      h(
        'table',
        { 'data-testid': 'task-list' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            h('th', {}, all),
            ...['#', 'type', 'state', 'priority', 'resource key', 'leases', 'enqueued', 'completed / available'].map(
              (x) => h('th', { class: x === 'leases' || x === 'priority' ? 'num' : '' }, x),
            ),
          ),
        ),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 9, class: 'muted' }, 'no task matches'))),
      ),
    );
    const next = new URLSearchParams(q);
    if (data.next_before) next.set('before', data.next_before);
    const newest = new URLSearchParams(q);
    newest.delete('before');
    put(
      older,
      h(
        'span',
        {},
        q.get('before') ? [h('a', { href: `#/tasks?${newest}` }, '← Newest'), ' '] : null,
        data.next_before ? h('a', { href: `#/tasks?${next}`, 'data-testid': 'older' }, 'Older →') : null,
      ),
    );
    updateSelection();
  }
  put(main, h('h1', {}, 'Tasks'), section(null, filters, lookup), section(null, bulk, out, list, older));
  // Filters that walk tasks newest first until a page matches (worker, time range, payload
  // field) may read far more rows than they show: those pages refresh every 30 s.
  const walking = ['worker_id', 'enqueued_from', 'enqueued_to', 'payload_path'].some((k) => params.get(k));
  await live(refresh, walking ? 30_000 : REFRESH_MS);
}
