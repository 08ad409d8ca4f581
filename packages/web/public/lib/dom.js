// @ts-check
// Building the page: elements from a tag, attributes and children (text always goes in as
// text nodes, never as markup), and the page's shared blocks (sections, tables).

/**
 * What a child may be: a node, text (numbers are written as text), nothing (null,
 * undefined, false: left out), or a list of these, nested to any depth.
 * @typedef {Node | string | number | null | undefined | false | ChildList} Child
 * @typedef {Child[]} ChildList
 */
/**
 * Attributes: `on<event>` names a listener; true writes an empty attribute; null,
 * undefined and false leave it out.
 * @typedef {Record<string, string | number | boolean | null | undefined | ((event: Event) => unknown)>} Attrs
 */

const HTML = 'http://www.w3.org/1999/xhtml';
const SVG = 'http://www.w3.org/2000/svg';

/**
 * @param {Element} el
 * @param {Attrs} attrs
 * @param {Child[]} children
 */
function fill(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  // Children may be nested lists (a map that returns [link, ' '] pairs): flatten fully,
  // so a node is appended as a node and never stringified.
  el.append(...nodes(children));
}

/**
 * The children as nodes and strings, flattened, with null, undefined and false left out.
 * @param {Child[]} children
 * @returns {(Node | string)[]}
 */
function nodes(children) {
  /** @type {(Node | string)[]} */
  const out = [];
  /** @param {Child} c */
  const add = (c) => {
    if (Array.isArray(c)) c.forEach(add);
    else if (c !== null && c !== undefined && c !== false) out.push(c instanceof Node ? c : String(c));
  };
  children.forEach(add);
  return out;
}

/**
 * Builds an HTML element: h('a', {href: '#/'}, 'text', child, [children], ...).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Attrs} [attrs]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs = {}, ...children) {
  const el = /** @type {HTMLElementTagNameMap[K]} */ (document.createElementNS(HTML, tag));
  fill(el, attrs, children);
  return el;
}

/**
 * Builds an SVG element, as h() an HTML one.
 * @template {keyof SVGElementTagNameMap} K
 * @param {K} tag
 * @param {Attrs} [attrs]
 * @param {...Child} children
 * @returns {SVGElementTagNameMap[K]}
 */
export function s(tag, attrs = {}, ...children) {
  const el = /** @type {SVGElementTagNameMap[K]} */ (document.createElementNS(SVG, tag));
  fill(el, attrs, children);
  return el;
}

/**
 * Replaces el's children; nested lists are flattened and null, undefined and false left out.
 * @param {Element} el
 * @param {...Child} children
 */
export function put(el, ...children) {
  el.replaceChildren(...nodes(children));
}

/**
 * An element of index.html, which is there by construction.
 * @param {string} id
 * @returns {HTMLElement}
 */
export function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html has no #${id}`);
  return el;
}

/**
 * A section with an optional heading.
 * @param {string | null} title
 * @param {...Child} children
 */
export const section = (title, ...children) => h('section', {}, title ? h('h2', {}, title) : null, ...children);

/** Column headings whose cells hold numbers (right-aligned). */
const NUMERIC =
  /^(#|count|pending|ready|running|retrying|scheduled|workers|tasks|hours|need|in flight|attempts|depth|bytes)/i;

/**
 * A table with a heading row; "nothing here" when there are no rows.
 * @param {string[]} headers
 * @param {Child[]} rows
 * @param {Attrs} [attrs]
 */
export function table(headers, rows, attrs = {}) {
  return h(
    'table',
    attrs,
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headers.map((x) => h('th', { class: NUMERIC.test(x) ? 'num' : '' }, x)),
      ),
    ),
    h(
      'tbody',
      {},
      rows.length ? rows : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'nothing here')),
    ),
  );
}

/**
 * A table of name and value rows.
 * @param {[string, Child][]} fields
 * @param {Attrs} [attrs]
 */
export function fieldsTable(fields, attrs = {}) {
  return h(
    'table',
    { class: 'fields', ...attrs },
    h(
      'tbody',
      {},
      fields.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))),
    ),
  );
}

/**
 * An error's message (anything thrown).
 * @param {unknown} error
 */
export const messageOf = (error) => (error instanceof Error ? error.message : String(error));
