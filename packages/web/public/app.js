// @ts-check
// The operations dashboard: plain ES modules, no build step, nothing loaded from outside
// this server (the Content-Security-Policy allows only this origin). This module is the
// entry: it asks who this tab is and routes the hash to a page (pages/, one module each;
// the shared pieces in lib/). Hash routes:
//   #/ overview · #/tasks · #/task/<id> · #/dead-letters · #/queues · #/workers ·
//   #/schedules · #/processes · #/process/<name>/<root id> · #/history · #/audit
// Every read and change carries the credential given at the login screen (kept in this
// tab's sessionStorage only); GET /api/session says who that is and whether they may change.
// Data is rendered with textContent only. Pages refresh their data in place by short
// polling while the tab is visible, keeping selections and form input.
import { onRefused, forget, token } from './lib/api-client.js';
import { h, put } from './lib/dom.js';
import { fail, main } from './lib/page.js';
import { nextGeneration } from './lib/live.js';
import { afterAccessChange, currentSession, endSession, loadSession, showAccess, showLogin } from './lib/session.js';
import { auditPage } from './pages/audit.js';
import { deadLetters } from './pages/dead-letters.js';
import { historyPage } from './pages/history.js';
import { overview } from './pages/overview.js';
import { processPage } from './pages/process.js';
import { processes } from './pages/processes.js';
import { queues } from './pages/queues.js';
import { schedules } from './pages/schedules.js';
import { taskPage } from './pages/task.js';
import { tasks } from './pages/tasks.js';
import { workers } from './pages/workers.js';

/** Shows the page the address names. */
async function route() {
  if (!currentSession()) return;
  nextGeneration();
  const [path, query = ''] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(query);
  const parts = (path || '/').split('/').filter(Boolean);
  for (const a of document.querySelectorAll('header nav a')) {
    const href = a.getAttribute('href') ?? '';
    a.classList.toggle(
      'current',
      href.replace(/^#\/?/, '') === (parts[0] ?? '') ||
        (parts[0] === 'task' && href === '#/tasks') ||
        (parts[0] === 'process' && href === '#/processes'),
    );
  }
  try {
    if (parts.length === 0) await overview();
    else if (parts[0] === 'tasks') await tasks(params);
    else if (parts[0] === 'task' && parts[1]) await taskPage(parts[1]);
    else if (parts[0] === 'dead-letters') await deadLetters(params);
    else if (parts[0] === 'queues') await queues();
    else if (parts[0] === 'workers') await workers();
    else if (parts[0] === 'schedules') await schedules();
    else if (parts[0] === 'processes') await processes(params);
    else if (parts[0] === 'process' && parts[1] && parts[2]) await processPage(parts[1], parts[2]);
    else if (parts[0] === 'history') await historyPage();
    else if (parts[0] === 'audit') await auditPage(params);
    else put(main, h('p', {}, 'No such page. ', h('a', { href: '#/' }, 'Overview')));
  } catch (error) {
    fail(error);
  }
}

/**
 * Asks who this tab is; shows the login when needed, else the page.
 * @param {string} [message] said on the login screen
 * @returns {Promise<void>}
 */
async function boot(message) {
  try {
    if (!(await loadSession())) {
      if (token()) {
        forget();
        return boot('The credential was refused: log in again.');
      }
      return showLogin(message);
    }
  } catch (error) {
    return fail(error);
  }
  showAccess();
  return route();
}

// The credential was refused (or is needed): back to the login.
onRefused(() => {
  endSession();
  void boot('The credential was refused: log in again.');
});
afterAccessChange({ login: () => void route(), logout: () => void boot() });
window.addEventListener('hashchange', () => void route());
void boot();
