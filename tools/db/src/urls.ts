/** Returns `url` with its database, and optionally its user and password, replaced. */
export function withDatabase(url: string, database: string, user?: string, password?: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(database)}`;
  if (user !== undefined) u.username = encodeURIComponent(user);
  if (password !== undefined) u.password = encodeURIComponent(password);
  return u.toString();
}

/** The URL with its password masked, for logs. */
export function redactUrl(url: string): string {
  const u = new URL(url);
  if (u.password) u.password = '***';
  return u.toString();
}
