// JSON the client sends: serialised here, so that what JSON.stringify cannot serialise is
// a QueueError naming the value rather than a RangeError or TypeError from deep inside it.
import { QueueError } from './errors.js';

/**
 * The database's limit on a payload's nesting (queues.max_payload_depth()): a payload
 * with a value more than 64 levels below its top is refused (54000, `too_large`).
 */
export const MAX_PAYLOAD_DEPTH = 64;

/**
 * True when `value` has a value more than `maxDepth` levels below its top (the top is
 * level 0, its members level 1, as in the database's jsonpath `strict $.**{n}`). Walks
 * without recursion, depth first, and stops at the first value too deep, so any depth
 * (and a cycle) is safe to ask about and cheap to refuse. Object members that JSON leaves
 * out (undefined, functions, symbols) and values serialised by their own toJSON (a Date)
 * do not count.
 */
export function isNestedDeeperThan(value: unknown, maxDepth: number): boolean {
  const stack: { value: unknown; level: number }[] = [{ value, level: 0 }];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const v = top.value;
    if (v === null || typeof v !== 'object' || typeof (v as { toJSON?: unknown }).toJSON === 'function') continue;
    const children = Array.isArray(v)
      ? (v as unknown[])
      : Object.values(v).filter((c) => c !== undefined && typeof c !== 'function' && typeof c !== 'symbol');
    if (children.length === 0) continue;
    if (top.level + 1 > maxDepth) return true;
    for (const child of children) stack.push({ value: child, level: top.level + 1 });
  }
  return false;
}

/**
 * JSON.stringify(value), or a QueueError for what it cannot serialise: nesting so deep
 * that its recursion runs out of stack (`too_large`, in the database's words when the
 * value is also deeper than `maxDepth`: "<what> is nested deeper than 64 levels"), a text
 * over the engine's string limit (`too_large`), a cycle or a BigInt (`invalid_input`).
 * Serialising first costs nothing for the values that serialise; only a failure is
 * examined.
 */
export function toJsonText(value: unknown, what: string, maxDepth?: number): string {
  try {
    return JSON.stringify(value);
  } catch (err) {
    throw serialisationError(err, value, what, maxDepth);
  }
}

/** The QueueError for a value JSON.stringify refused with `err`. */
export function serialisationError(err: unknown, value: unknown, what: string, maxDepth?: number): QueueError {
  const reason = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  if (!(err instanceof RangeError)) {
    return new QueueError(`${what} cannot be sent as JSON (${reason})`, 'invalid_input', undefined, { cause: err });
  }
  const message =
    maxDepth !== undefined && isNestedDeeperThan(value, maxDepth)
      ? `${what} is nested deeper than ${maxDepth} levels`
      : `${what} is too deeply nested or too large to send as JSON (${reason})`;
  return new QueueError(message, 'too_large', undefined, { cause: err });
}
