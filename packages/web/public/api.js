// The API reference page: renders /api/openapi.json (the document the server generates
// from its schemas) as a list of operations by tag, each with its parameters, request body
// and answers. Everything is local: no CDN, no script but this one. Text goes in with
// textContent only.
// The dashboard's credential of this tab (app.js): a token, with a user name or without.
const TOKEN_KEY = 'queue-api-token';
const USER_KEY = 'queue-api-user';
const main = document.getElementById('reference');

/** An element with text and children. */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === 'text') node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

const json = (value) => el('pre', { text: JSON.stringify(value, null, 2) });

function parametersTable(parameters) {
  const table = el('table');
  table.append(
    el(
      'tr',
      {},
      el('th', { text: 'name' }),
      el('th', { text: 'in' }),
      el('th', { text: 'required' }),
      el('th', { text: 'schema' }),
    ),
  );
  for (const p of parameters) {
    const schema = { ...p.schema };
    table.append(
      el(
        'tr',
        {},
        el('td', {}, el('code', { text: p.name })),
        el('td', { text: p.in }),
        el('td', { text: p.required ? 'yes' : 'no' }),
        el('td', {}, el('code', { text: JSON.stringify(schema) })),
      ),
    );
  }
  return table;
}

function operation(path, method, op) {
  const summary = el(
    'summary',
    {},
    el('span', { class: `method method-${method}`, text: method.toUpperCase() }),
    el('code', { class: 'path', text: path }),
    el('span', { text: op.summary ?? '' }),
    op['x-access'] === 'operator' ? el('span', { class: 'access-operator', text: 'operator' }) : null,
  );
  const body = el('div');
  body.append(el('p', { class: 'muted', text: `operationId ${op.operationId}` }));
  if (op.parameters?.length) body.append(el('h3', { text: 'Parameters' }), parametersTable(op.parameters));
  if (op.requestBody) {
    body.append(el('h3', { text: `Request body${op.requestBody.required ? '' : ' (optional)'}` }));
    for (const [type, media] of Object.entries(op.requestBody.content))
      body.append(el('p', { text: type }), json(media.schema));
  }
  body.append(el('h3', { text: 'Answers' }));
  for (const [status, answer] of Object.entries(op.responses)) {
    const details = el('details', {}, el('summary', { text: `${status} ${answer.description}` }));
    for (const [type, media] of Object.entries(answer.content ?? {}))
      details.append(el('p', { text: type }), json(media.schema));
    body.append(details);
  }
  return el('details', { class: 'op', id: op.operationId }, summary, body);
}

function render(doc) {
  main.replaceChildren(
    el('h1', { text: `${doc.info.title} ${doc.info.version}` }),
    el('p', { text: doc.info.description ?? '' }),
    el('p', { class: 'muted', text: `OpenAPI ${doc.openapi} · ${Object.keys(doc.paths).length} paths` }),
  );
  const byTag = new Map((doc.tags ?? []).map((t) => [t.name, []]));
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const tag = op.tags?.[0] ?? 'other';
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push(operation(path, method, op));
    }
  }
  for (const [tag, items] of byTag) main.append(el('section', {}, el('h2', { text: tag }), ...items));
  if (location.hash) document.getElementById(location.hash.slice(1))?.setAttribute('open', '');
}

/** The Authorization header of the dashboard's credential (Basic with a name, else Bearer), if any. */
function authorization() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return {};
  const name = sessionStorage.getItem(USER_KEY);
  if (!name) return { authorization: `Bearer ${token}` };
  const bytes = new TextEncoder().encode(`${name}:${token}`);
  return { authorization: `Basic ${btoa(String.fromCharCode(...bytes))}` };
}

async function load() {
  try {
    const response = await fetch('api/openapi.json', { headers: authorization() });
    if (response.status === 401)
      throw new Error('The API needs a credential: log in on the dashboard first, then come back.');
    if (!response.ok) throw new Error(`GET /api/openapi.json answered ${response.status}`);
    render(await response.json());
  } catch (error) {
    main.replaceChildren(el('p', { class: 'error', text: String(error.message ?? error) }));
  }
}

load();
