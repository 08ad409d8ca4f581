import { createServer } from 'node:net';

/**
 * Whether something already listens on host:port (EADDRINUSE when we try): `npm start`
 * asks before it starts the web server, so that a second `npm start` beside a first says
 * what it does instead of crashing. Other errors (say, a host that is not ours) are thrown.
 */
export function portInUse(host: string, port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'EADDRINUSE') resolve(true);
      else reject(error);
    });
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve(false)));
  });
}
