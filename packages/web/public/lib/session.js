// @ts-check
// Who is logged in, and what they may do: GET /api/session with this tab's credential,
// the access bar at the top of every page, the login screen, and the action buttons that
// are disabled while the user may not change anything.
import { api, ApiError, forget, remember } from './api-client.js';
import { byId, h, messageOf, put, section } from './dom.js';
import { main } from './page.js';
import { nextGeneration } from './live.js';

/**
 * GET /api/session.
 * @typedef {{ user: string | null, level: string | null, can_change: boolean, open_reads: boolean }} Session
 */

/** @type {Session | null} null until known, or while a login is needed. */
let session = null;
/** The session of this tab (null until known, or while a login is needed). */
export const currentSession = () => session;
/** Forgets the session (the credential was refused). */
export const endSession = () => {
  session = null;
};
/** Whether this tab may make changes. */
export const canWrite = () => Boolean(session?.can_change);
const READ_ONLY_TITLE = 'Read-only: changes need an operator (log in at the top of the page)';

/** What runs after a login that worked (the page), and after a log out (the login). */
const after = { login: () => {}, logout: () => {} };
/**
 * @param {{ login: () => void, logout: () => void }} handlers
 */
export function afterAccessChange(handlers) {
  Object.assign(after, handlers);
}

/**
 * The name and token fields and their form; a login that works shows the page.
 * @param {{ testid: string, inputTestid: string, nameTestid: string, button: string, error: HTMLElement }} options
 */
function loginForm({ testid, inputTestid, nameTestid, button, error }) {
  const name = h('input', {
    name: 'user',
    placeholder: 'name (optional)',
    autocomplete: 'username',
    size: 14,
    'data-testid': nameTestid,
    'aria-label': 'user name',
  });
  const input = h('input', {
    type: 'password',
    name: 'token',
    placeholder: 'API token',
    autocomplete: 'off',
    'data-testid': inputTestid,
    'aria-label': 'API token',
  });
  return h(
    'form',
    {
      class: 'inline',
      'data-testid': testid,
      onsubmit: async (e) => {
        e.preventDefault();
        if (!input.value.trim()) return;
        remember(input.value.trim(), name.value.trim());
        input.value = '';
        const ok = await loadSession();
        if (!ok) {
          forget();
          await loadSession();
          put(error, 'The name or token was refused.');
          return;
        }
        showAccess();
        after.login();
      },
    },
    h('label', {}, 'name', name),
    h('label', {}, 'token', input),
    h('button', { type: 'submit' }, button),
  );
}

/** The access bar: who is logged in and at what level, or how to unlock when reads are open. */
export function showAccess() {
  const el = byId('access');
  if (!session) {
    el.className = 'access locked';
    put(el, h('span', { 'data-testid': 'access-state' }, 'Not logged in.'));
    return;
  }
  if (session.user) {
    el.className = `access ${session.can_change ? 'unlocked' : 'locked'}`;
    put(
      el,
      h(
        'span',
        { 'data-testid': 'access-state' },
        'Logged in as ',
        h('strong', { 'data-testid': 'access-user' }, session.user),
        ' (',
        h('span', { 'data-testid': 'access-level' }, session.level),
        session.can_change
          ? '). Actions enabled: the credential is kept in this tab only. '
          : '). Read-only: actions are disabled. ',
      ),
      h(
        'a',
        {
          href: '#',
          'data-testid': 'forget-token',
          onclick: (e) => {
            e.preventDefault();
            forget();
            after.logout();
          },
        },
        'Log out',
      ),
    );
    return;
  }
  // Reads are open and nobody is logged in.
  const error = h('span', { class: 'error', role: 'alert', 'data-testid': 'token-error' });
  el.className = 'access locked';
  put(
    el,
    h(
      'span',
      { 'data-testid': 'access-state' },
      h('strong', {}, 'Read-only. '),
      "Cancel, pause, redrive and the other actions need an operator's API token: ",
      h('code', {}, 'npm start'),
      ' prints it; a deployment sets it as ',
      h('code', {}, 'API_TOKEN'),
      ' or in ',
      h('code', {}, 'API_USERS'),
      '.',
    ),
    loginForm({
      testid: 'token-form',
      inputTestid: 'token-input',
      nameTestid: 'token-user',
      button: 'Unlock',
      error,
    }),
    error,
  );
}

/** Reads GET /api/session with this tab's credential; false when it is refused (401). */
export async function loadSession() {
  try {
    session = /** @type {Session} */ (await api('/api/session'));
    return true;
  } catch (error) {
    session = null;
    if (error instanceof ApiError && error.status === 401) return false;
    throw error;
  }
}

/**
 * The login screen, shown instead of a page while a credential is needed.
 * @param {string} [message]
 */
export function showLogin(message) {
  nextGeneration();
  showAccess();
  const error = h('p', { class: 'error', role: 'alert', 'data-testid': 'login-error' }, message ?? '');
  put(
    main,
    h('h1', {}, 'Log in'),
    section(
      null,
      h(
        'p',
        {},
        'This dashboard needs an API credential: a token, with its user name or without. ',
        h('code', {}, 'npm start'),
        ' prints the local ones; a deployment sets them in ',
        h('code', {}, 'API_USERS'),
        ' (or ',
        h('code', {}, 'API_TOKEN'),
        ' for one operator). It is kept in this tab only.',
      ),
      loginForm({
        testid: 'login-form',
        inputTestid: 'login-token',
        nameTestid: 'login-name',
        button: 'Log in',
        error,
      }),
      error,
    ),
  );
}

/**
 * A button for a change: disabled while read-only; runs `action`, shows its outcome in `out`
 * (nothing when it returns null).
 * @param {string} label
 * @param {import('./dom.js').Attrs} attrs
 * @param {() => Promise<import('./dom.js').Child>} action
 * @param {HTMLElement} [out]
 */
export function actionButton(label, attrs, action, out) {
  const button = h(
    'button',
    {
      type: 'button',
      ...attrs,
      disabled: !canWrite() || attrs.disabled,
      title: canWrite() ? attrs.title : READ_ONLY_TITLE,
      onclick: async () => {
        button.disabled = true;
        try {
          const message = await action();
          if (out && message) put(out, message);
        } catch (err) {
          if (out) put(out, h('span', { class: 'error', role: 'alert' }, messageOf(err)));
        } finally {
          button.disabled = !canWrite();
        }
      },
    },
    label,
  );
  return button;
}
