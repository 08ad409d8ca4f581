// @ts-check
// #/task/<id> — one task: its fields, actions (cancel, run now, redrive), payload and
// result, the tasks it waits for and those waiting for it, leases and how each ended,
// errors, failed attempts, completion, and the changes made to it through the API.
import { api, mutate } from '../lib/api-client.js';
import { fieldsTable, h, put, section, table } from '../lib/dom.js';
import { main } from '../lib/page.js';
import { fmtTime, json, stateBadge, taskLink, timeCell } from '../lib/format.js';
import { live, showPaused } from '../lib/live.js';
import { actionButton } from '../lib/session.js';
import { auditTable } from './audit.js';

/**
 * How a lease ended, from the task's facts.
 * @param {any} l a lease of GET /api/tasks/{id}
 * @param {any} t GET /api/tasks/{id}
 */
function leaseEnd(l, t) {
  if (l.live) return 'live (running)';
  if (t.completion?.task_lease_id === l.task_lease_id) return `completed ${t.completion.outcome}`;
  if (t.failed_attempts.some((/** @type {any} */ f) => f.task_lease_id === l.task_lease_id))
    return 'failed attempt (retried)';
  if (l.released_at) return 'released by its worker';
  if (l.revoked_at) return 'revoked (stale worker)';
  if (t.errors.some((/** @type {any} */ e) => e.task_lease_id === l.task_lease_id))
    return 'error reported, then expired';
  return 'expired';
}

/**
 * @param {string} id the task id, from the page's address
 */
export async function taskPage(id) {
  const body = h('div');
  const out = h('p', { role: 'status', 'data-testid': 'action-result' });
  // This page's own heading: a refresh that ends after navigating away writes to it, not
  // to the next page's.
  const title = h('h1', { 'data-testid': 'task-title' }, `Task #${id}`);
  const changes = h('div');
  put(main, title, out, body, section('Changes made through the API', changes));
  await live(async () => {
    const [t, audit] = await Promise.all([
      api(`/api/tasks/${encodeURIComponent(id)}`),
      api(`/api/audit?task_id=${encodeURIComponent(id)}&limit=100`),
      showPaused(),
    ]);
    put(changes, auditTable(audit.changes, 'task-audit'));
    const task = t.task;
    put(
      title,
      `Task #${task.task_id} `,
      stateBadge(task.state),
      t.type_paused ? [' ', h('span', { class: 'state state-paused' }, `${task.task_type} paused`)] : null,
    );
    /** @type {[string, import('../lib/dom.js').Child][]} */
    const fields = [
      ['type', h('a', { href: `#/tasks?task_type=${task.task_type}` }, task.task_type)],
      ['state', stateBadge(task.state)],
      ['priority', task.priority],
      [
        'resource key',
        task.resource_key
          ? h('a', { href: `#/tasks?resource_key=${encodeURIComponent(task.resource_key)}` }, task.resource_key)
          : '—',
      ],
      ['max attempts', task.max_attempts],
      [
        'run timeout',
        task.timeout_ms != null
          ? `${task.timeout_ms} ms (this task's)`
          : task.type_timeout_ms != null
            ? `${task.type_timeout_ms} ms (its type's)`
            : 'none',
      ],
      ['enqueued', fmtTime(task.enqueued_at)],
      ['scheduled', fmtTime(task.scheduled_at)],
    ];
    if (t.run_now_at) fields.push(['run now requested', fmtTime(t.run_now_at)]);
    if (t.progress) {
      // The latest progress report of the run (queues.task_progress), as the worker sent it.
      const p = t.progress;
      fields.push([
        'progress',
        h(
          'span',
          { 'data-testid': 'task-progress' },
          p.total ? h('progress', { max: String(p.total), value: String(p.done) }) : null,
          ` ${p.done}${p.total ? ` / ${p.total}` : ''}${p.note ? ` · ${p.note}` : ''} · reported ${fmtTime(p.reported_at)}`,
        ),
      ]);
    }
    if (t.process)
      fields.push([
        'business process',
        h(
          'a',
          { href: `#/process/${t.process.process}/${t.process.root_id}`, 'data-testid': 'process-link' },
          `${t.process.process} #${t.process.root_id}`,
        ),
      ]);
    if (t.redriven_from) fields.push(['redriven from', taskLink(t.redriven_from)]);
    if (t.redriven_to) fields.push(['redriven as', taskLink(t.redriven_to)]);
    const actions = [];
    // A running task is cancelled too: its worker aborts it at its next heartbeat.
    if (['waiting', 'scheduled', 'ready', 'retrying', 'running'].includes(task.state))
      actions.push(
        actionButton(
          task.state === 'running' ? 'Cancel (stops at the next heartbeat)' : 'Cancel',
          { class: 'danger', 'data-testid': 'cancel-task' },
          async () => {
            const r = await mutate('/api/tasks/cancel', {
              task_ids: [task.task_id],
              reason: 'cancelled from the task page',
            });
            return `cancel: ${r.results[0].result}`;
          },
          out,
        ),
      );
    if (task.state === 'scheduled')
      actions.push(
        actionButton(
          'Run now',
          { 'data-testid': 'run-now-task' },
          async () => {
            const r = await mutate('/api/tasks/run-now', { task_ids: [task.task_id] });
            return `run now: ${r.results[0].result}`;
          },
          out,
        ),
      );
    if (['failed', 'abandoned'].includes(task.state) && !t.redriven_to)
      actions.push(
        actionButton(
          'Redrive',
          { 'data-testid': 'redrive-task' },
          async () => {
            const r = await mutate('/api/dead-letters/redrive', { task_ids: [task.task_id] });
            return r.results[0].new_task_id
              ? ['redriven as ', taskLink(r.results[0].new_task_id)]
              : `redrive: ${r.results[0].result}`;
          },
          out,
        ),
      );
    const heartbeats = (/** @type {number} */ leaseId) =>
      t.heartbeats.filter((/** @type {any} */ x) => x.task_lease_id === leaseId);
    put(
      body,
      section(
        null,
        fieldsTable(fields, { 'data-testid': 'task-fields' }),
        actions.length ? h('p', { class: 'actions' }, actions) : null,
      ),
      h(
        'div',
        { class: 'grid2' },
        section('Payload', h('pre', { 'data-testid': 'payload' }, json(task.payload))),
        section(
          'Result',
          t.results?.length
            ? t.results.map((/** @type {any} */ r) =>
                h(
                  'div',
                  {},
                  h('p', { class: 'muted' }, `lease ${r.task_lease_id} · ${fmtTime(r.recorded_at)}`),
                  h('pre', { 'data-testid': 'result' }, json(r.result)),
                ),
              )
            : h('p', { class: 'muted', 'data-testid': 'result' }, 'no result recorded'),
        ),
      ),
      t.dependencies?.length || t.dependents?.length
        ? section(
            'Dependencies',
            h(
              'div',
              { class: 'grid2' },
              section(
                'Waits for',
                t.dependencies?.length
                  ? table(
                      ['task', 'type', 'outcome'],
                      t.dependencies.map((/** @type {any} */ d) =>
                        h(
                          'tr',
                          {},
                          h('td', {}, taskLink(d.task_id)),
                          h('td', {}, d.task_type),
                          h('td', {}, d.outcome ? stateBadge(d.outcome) : 'pending'),
                        ),
                      ),
                      { 'data-testid': 'dependencies' },
                    )
                  : h('p', { class: 'muted', 'data-testid': 'dependencies' }, 'none'),
              ),
              section(
                'Waited for by',
                t.dependents?.length
                  ? table(
                      ['task', 'type', 'state'],
                      t.dependents.map((/** @type {any} */ d) =>
                        h(
                          'tr',
                          {},
                          h('td', {}, taskLink(d.task_id)),
                          h('td', {}, d.task_type),
                          h('td', {}, stateBadge(d.state)),
                        ),
                      ),
                      { 'data-testid': 'dependents' },
                    )
                  : h('p', { class: 'muted', 'data-testid': 'dependents' }, 'none'),
              ),
            ),
          )
        : null,
      section(
        'Leases',
        table(
          ['lease', 'worker', 'leased', 'expires', 'heartbeats', 'last heartbeat', 'ended'],
          t.leases.map((/** @type {any} */ l) =>
            h(
              'tr',
              { 'data-lease-id': l.task_lease_id },
              h('td', {}, l.task_lease_id),
              h('td', {}, h('a', { href: `#/tasks?worker_id=${encodeURIComponent(l.worker_id)}` }, l.worker_id)),
              timeCell(l.leased_at),
              timeCell(l.expires_at),
              h('td', { class: 'num' }, l.extensions),
              timeCell(heartbeats(l.task_lease_id).at(-1)?.extended_at),
              h('td', {}, leaseEnd(l, t)),
            ),
          ),
          { 'data-testid': 'leases' },
        ),
      ),
      section(
        'Errors',
        table(
          ['at', 'lease', 'message'],
          t.errors.map((/** @type {any} */ e) =>
            h(
              'tr',
              {},
              timeCell(e.created_at),
              h('td', {}, e.task_lease_id ?? ''),
              h('td', {}, h('pre', {}, e.error_message)),
            ),
          ),
          { 'data-testid': 'errors' },
        ),
      ),
      t.failed_attempts.length
        ? section(
            'Failed attempts (retried)',
            table(
              ['failed', 'retry at', 'lease'],
              t.failed_attempts.map((/** @type {any} */ f) =>
                h('tr', {}, timeCell(f.failed_at), timeCell(f.retry_at), h('td', {}, f.task_lease_id ?? '')),
              ),
            ),
          )
        : null,
      section(
        'Completion',
        t.completion
          ? h(
              'p',
              { 'data-testid': 'completion' },
              stateBadge(t.completion.outcome),
              ' at ',
              fmtTime(t.completion.completed_at),
              t.completion.task_lease_id ? ` under lease ${t.completion.task_lease_id}` : '',
              t.cancellation ? ` · ${t.cancellation.reason || 'no reason given'}` : '',
            )
          : h('p', { class: 'muted', 'data-testid': 'completion' }, 'not completed'),
      ),
    );
  });
}
