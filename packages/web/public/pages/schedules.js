// @ts-check
// #/schedules — recurring schedules (cron read in each schedule's time zone), their next
// fire and last runs; enable and disable.
import { api, mutate } from '../lib/api-client.js';
import { h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { fmtTime, stateBadge, taskLink, timeCell } from '../lib/format.js';
import { live, showPaused, SLOW_REFRESH_MS } from '../lib/live.js';
import { actionButton } from '../lib/session.js';

export async function schedules() {
  await showPaused();
  const out = h('p', { role: 'status', 'data-testid': 'action-result' });
  const list = h('div');
  put(
    main,
    h('h1', {}, 'Schedules'),
    h('p', { class: 'muted' }, "Recurring schedules (cron read in each schedule's time zone) and their last runs."),
    out,
    section(null, list),
  );
  /** @param {any} x a schedule of GET /api/schedules */
  const row = (x) =>
    h(
      'tr',
      { 'data-schedule': x.name },
      h('td', {}, x.name),
      h('td', {}, h('code', {}, x.cron), ' ', h('span', { class: 'muted' }, x.time_zone ?? 'UTC')),
      h('td', {}, x.task_type),
      h('td', {}, stateBadge(x.enabled ? 'enabled' : 'disabled')),
      timeCell(x.next_fire_at),
      h(
        'td',
        {},
        x.last_runs.length
          ? h(
              'ul',
              { class: 'runs' },
              x.last_runs.map((/** @type {any} */ r) =>
                h(
                  'li',
                  {},
                  fmtTime(r.fire_at),
                  ' ',
                  r.task_id ? [taskLink(r.task_id), ' ', stateBadge(r.task_state ?? 'unknown')] : stateBadge(r.outcome),
                ),
              ),
            )
          : h('span', { class: 'muted' }, 'never ran'),
      ),
      h(
        'td',
        {},
        actionButton(
          x.enabled ? 'Disable' : 'Enable',
          { class: x.enabled ? 'secondary' : '', 'data-testid': `${x.enabled ? 'disable' : 'enable'}-${x.name}` },
          async () => {
            await mutate(`/api/schedules/${encodeURIComponent(x.name)}/${x.enabled ? 'disable' : 'enable'}`, {});
            await refresh();
            return `${x.name} ${x.enabled ? 'disabled' : 'enabled'}`;
          },
          out,
        ),
      ),
    );
  async function refresh() {
    const data = await api('/api/schedules');
    put(
      list,
      table(['schedule', 'cron', 'task type', 'enabled', 'next fire', 'last runs', ''], data.schedules.map(row), {
        'data-testid': 'schedules',
      }),
    );
  }
  await live(refresh, SLOW_REFRESH_MS);
}
