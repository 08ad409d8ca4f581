// @ts-check
// The API reference page: renders /api/openapi.json (the document the server generates
// from its schemas) as a list of operations by tag, each with its parameters, request body
// and answers. Everything is local: no CDN, no script but this one and the dashboard's
// shared modules. Text goes in as text nodes only. The request carries the dashboard's
// credential of this tab (lib/api-client.js), when there is one.
import { authorization } from './lib/api-client.js';
import { byId, h, messageOf, put } from './lib/dom.js';

const main = byId('reference');

/**
 * Indented JSON in a block.
 * @param {unknown} value
 */
const json = (value) => h('pre', {}, JSON.stringify(value, null, 2));

/**
 * An operation's parameters (OpenAPI Parameter objects).
 * @param {any[]} parameters
 */
function parametersTable(parameters) {
  return h(
    'table',
    {},
    h('tr', {}, h('th', {}, 'name'), h('th', {}, 'in'), h('th', {}, 'required'), h('th', {}, 'schema')),
    parameters.map((p) =>
      h(
        'tr',
        {},
        h('td', {}, h('code', {}, p.name)),
        h('td', {}, p.in),
        h('td', {}, p.required ? 'yes' : 'no'),
        h('td', {}, h('code', {}, JSON.stringify({ ...p.schema }))),
      ),
    ),
  );
}

/**
 * One operation, folded: its method, path and summary, then what it takes and answers.
 * @param {string} path
 * @param {string} method
 * @param {any} op an OpenAPI Operation object
 */
function operation(path, method, op) {
  const summary = h(
    'summary',
    {},
    h('span', { class: `method method-${method}` }, method.toUpperCase()),
    h('code', { class: 'path' }, path),
    h('span', {}, op.summary ?? ''),
    op['x-access'] === 'operator' ? h('span', { class: 'access-operator' }, 'operator') : null,
  );
  /** @type {[string, any][]} */
  const bodies = op.requestBody ? Object.entries(op.requestBody.content) : [];
  /** @type {[string, any][]} */
  const answers = Object.entries(op.responses);
  const body = h(
    'div',
    {},
    h('p', { class: 'muted' }, `operationId ${op.operationId}`),
    op.parameters?.length ? [h('h3', {}, 'Parameters'), parametersTable(op.parameters)] : null,
    op.requestBody
      ? [
          h('h3', {}, `Request body${op.requestBody.required ? '' : ' (optional)'}`),
          bodies.map(([type, media]) => [h('p', {}, type), json(media.schema)]),
        ]
      : null,
    h('h3', {}, 'Answers'),
    answers.map(([status, answer]) =>
      h(
        'details',
        {},
        h('summary', {}, `${status} ${answer.description}`),
        Object.entries(answer.content ?? {}).map(([type, media]) => [
          h('p', {}, type),
          json(/** @type {any} */ (media).schema),
        ]),
      ),
    ),
  );
  return h('details', { class: 'op', id: op.operationId }, summary, body);
}

/**
 * The document, by tag.
 * @param {any} doc the OpenAPI document
 */
function render(doc) {
  /** @type {Map<string, HTMLElement[]>} */
  const byTag = new Map((doc.tags ?? []).map((/** @type {{ name: string }} */ t) => [t.name, []]));
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(/** @type {Record<string, any>} */ (ops))) {
      const tag = op.tags?.[0] ?? 'other';
      const items = byTag.get(tag) ?? [];
      items.push(operation(path, method, op));
      byTag.set(tag, items);
    }
  }
  put(
    main,
    h('h1', {}, `${doc.info.title} ${doc.info.version}`),
    h('p', {}, doc.info.description ?? ''),
    h('p', { class: 'muted' }, `OpenAPI ${doc.openapi} · ${Object.keys(doc.paths).length} paths`),
    [...byTag].map(([tag, items]) => h('section', {}, h('h2', {}, tag), items)),
  );
  if (location.hash) document.getElementById(location.hash.slice(1))?.setAttribute('open', '');
}

async function load() {
  try {
    const auth = authorization();
    // Relative to the page, as the dashboard's requests: it works under a path prefix.
    const response = await fetch('api/openapi.json', { headers: auth ? { authorization: auth } : {} });
    if (response.status === 401)
      throw new Error('The API needs a credential: log in on the dashboard first, then come back.');
    if (!response.ok) throw new Error(`GET /api/openapi.json answered ${response.status}`);
    render(await response.json());
  } catch (error) {
    put(main, h('p', { class: 'error' }, messageOf(error)));
  }
}

void load();
