/**
 * Who may use the API: named users, each with a level and a token.
 *
 * - `read` may call every GET route (except payload search by value);
 * - `operator` may also change things (every POST) and search payloads by value.
 *
 * A request presents `Authorization: Bearer <token>` (the token names its user) or
 * `Authorization: Basic base64(<name>:<token>)`. Tokens are compared as SHA-256 digests
 * with crypto.timingSafeEqual, against every user's digest without stopping at a match, so
 * the time taken says nothing about which token (or how much of one) was right.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

export const LEVELS = ['read', 'operator'] as const;
export type Level = (typeof LEVELS)[number];

/** A configured user: name, level and token (API_USERS, API_USERS_FILE, API_TOKEN). */
export interface ApiUser {
  name: string;
  level: Level;
  token: string;
}

/** The user a request was made by (no token). */
export interface Principal {
  name: string;
  level: Level;
}

export const USER_NAME = /^[A-Za-z0-9_.@-]{1,100}$/;
export const MIN_TOKEN = 16;
export const MAX_TOKEN = 1000;
/** The name of the user API_TOKEN defines (an operator). */
export const API_TOKEN_USER = 'api-token';

const digest = (text: string): Buffer => createHash('sha256').update(text).digest();

/**
 * Parses `name:level:token` entries, separated by commas or new lines; blank lines and lines
 * starting with `#` are skipped. The token is everything after the second colon. Throws an
 * Error naming the entry (by position and name, never its token) for a bad one.
 */
export function parseUsers(text: string): ApiUser[] {
  const users: ApiUser[] = [];
  const entries = text
    .split(/[\n,]/)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  entries.forEach((entry, index) => {
    const where = `entry ${index + 1}`;
    const first = entry.indexOf(':');
    const second = first < 0 ? -1 : entry.indexOf(':', first + 1);
    if (second < 0) throw new Error(`${where}: must be name:level:token`);
    const name = entry.slice(0, first);
    const level = entry.slice(first + 1, second);
    const token = entry.slice(second + 1);
    if (!USER_NAME.test(name)) throw new Error(`${where}: name must be 1 to 100 letters, digits, _ . @ or -`);
    if (!(LEVELS as readonly string[]).includes(level))
      throw new Error(`${where} (${name}): level must be ${LEVELS.join(' or ')}`);
    if (token.length < MIN_TOKEN || token.length > MAX_TOKEN)
      throw new Error(`${where} (${name}): token must be ${MIN_TOKEN} to ${MAX_TOKEN} characters`);
    if (/\s/.test(token)) throw new Error(`${where} (${name}): token must not contain white space`);
    users.push({ name, level: level as Level, token });
  });
  return users;
}

/** Problems with a set of users taken together (duplicate names or tokens), one line each. */
export function userProblems(users: ApiUser[]): string[] {
  const problems: string[] = [];
  const names = new Set<string>();
  const tokens = new Set<string>();
  for (const user of users) {
    if (names.has(user.name)) problems.push(`user ${user.name} is defined twice`);
    names.add(user.name);
    if (tokens.has(user.token)) problems.push(`user ${user.name} has the token of another user`);
    tokens.add(user.token);
  }
  return problems;
}

/** The configured users, ready to check requests against. */
export class Credentials {
  private readonly users: { principal: Principal; digest: Buffer }[];
  private readonly dummy = digest('no such user');

  constructor(users: ApiUser[]) {
    if (users.length === 0) throw new Error('at least one API user is required (API_TOKEN or API_USERS)');
    const problems = userProblems(users);
    if (problems.length) throw new Error(problems.join('; '));
    this.users = users.map((u) => ({ principal: { name: u.name, level: u.level }, digest: digest(u.token) }));
  }

  /** The users' names and levels (no tokens). */
  list(): Principal[] {
    return this.users.map((u) => u.principal);
  }

  /** The user an Authorization header names, or null (absent, malformed or wrong). */
  authenticate(header: string | undefined): Principal | null {
    if (typeof header !== 'string') return null;
    const match = /^(Bearer|Basic)[ \t]+(\S+)$/i.exec(header.trim());
    if (!match) return null;
    if (match[1]!.toLowerCase() === 'bearer') return this.byToken(match[2]!);
    const decoded = Buffer.from(match[2]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 1) return null;
    return this.byNameAndToken(decoded.slice(0, colon), decoded.slice(colon + 1));
  }

  private byToken(token: string): Principal | null {
    const given = digest(token);
    let found: Principal | null = null;
    // Every digest is compared: no early exit.
    for (const user of this.users) if (timingSafeEqual(given, user.digest) && !found) found = user.principal;
    return found;
  }

  private byNameAndToken(name: string, token: string): Principal | null {
    const user = this.users.find((u) => u.principal.name === name);
    const ok = timingSafeEqual(digest(token), user?.digest ?? this.dummy);
    return user && ok ? user.principal : null;
  }
}

/** True when `level` grants what `needed` asks for. */
export const allows = (level: Level, needed: Level): boolean => LEVELS.indexOf(level) >= LEVELS.indexOf(needed);
