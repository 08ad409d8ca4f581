import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * True when `header` is `Bearer <token>` with the configured token. Both sides are hashed
 * first so the comparison is constant-time whatever their lengths.
 */
export function bearerMatches(header: string | undefined, token: string): boolean {
  if (typeof header !== 'string') return false;
  const match = /^Bearer[ \t]+(.+)$/i.exec(header.trim());
  if (!match) return false;
  const given = createHash('sha256').update(match[1]!.trim()).digest();
  const expected = createHash('sha256').update(token).digest();
  return timingSafeEqual(given, expected);
}
