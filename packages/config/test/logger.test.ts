// One log shape for every program: level names (never numbers), ISO time, service, pid,
// msg; JSON lines when stdout is not a terminal, pino-pretty when it is or when asked.
import { execFileSync } from 'node:child_process';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createLogger } from '@org/config';

const memory = () => {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  return { stream, text: () => chunks.join('') };
};

// Runs a logger in a child process whose stdout is a pipe, or a terminal (util-linux `script`).
const packageDir = fileURLToPath(new URL('..', import.meta.url));
const snippet =
  "import('@org/config').then(({ createLogger }) => { createLogger({ service: 'probe', level: 'info' }).info({ event: 'hello', token: 'sekret' }, 'hi there'); })";
const inChild = (env: Record<string, string> = {}) =>
  execFileSync(process.execPath, ['-e', snippet], {
    cwd: packageDir,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, ...env },
  });
const inTerminal = () =>
  execFileSync('script', ['-qec', `${JSON.stringify(process.execPath)} -e ${JSON.stringify(snippet)}`, '/dev/null'], {
    cwd: packageDir,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, TERM: 'xterm' },
  });

describe('createLogger', () => {
  it('writes JSON lines with the shared shape when stdout is not a terminal', () => {
    const lines = inChild().trim().split('\n');
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]) as Record<string, unknown>;
    expect(line).toMatchObject({
      level: 'info',
      service: 'probe',
      event: 'hello',
      msg: 'hi there',
      token: '[redacted]',
    });
    expect(line.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(typeof line.pid).toBe('number');
    expect(Object.keys(line).slice(0, 4)).toEqual(['level', 'time', 'service', 'pid']);
  });

  it('is human-readable when stdout is a terminal', () => {
    const out = inTerminal();
    expect(out).toMatch(/INFO/);
    expect(out).toContain('[probe] hi there');
    expect(out).toContain('\u001b['); // coloured
    expect(out).not.toContain('"msg"');
    expect(out).not.toContain('sekret');
  });

  it('pretty when forced, JSON when forced, whatever the destination', () => {
    const pretty = memory();
    createLogger({ service: 'probe', format: 'pretty', destination: pretty.stream }).warn(
      { event: 'x', task_id: 7 },
      'careful',
    );
    expect(pretty.text()).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] WARN: \[probe\] careful \{"event":"x","task_id":7\}\n$/);
    expect(pretty.text()).not.toContain('\u001b['); // no colours into a non-terminal

    const json = memory();
    createLogger({ service: 'probe', format: 'json', destination: json.stream }).error('bad');
    expect(JSON.parse(json.text())).toMatchObject({ level: 'error', service: 'probe', msg: 'bad' });

    const auto = memory();
    createLogger({ service: 'probe', destination: auto.stream, level: 'debug' }).debug('quiet');
    expect(JSON.parse(auto.text())).toMatchObject({ level: 'debug', msg: 'quiet' });
  });

  it('pretty prints each entry on one line: fields, nested objects, errors with their stacks, line breaks', () => {
    const out = memory();
    const log = createLogger({ service: 'probe', format: 'pretty', destination: out.stream });
    log.warn({ event: 'x', task_id: 7, nested: { a: 1, b: ['two', 'three'] } }, 'careful');
    log.error({ err: new Error('boom') }, 'failed');
    log.error(new Error('bare'));
    log.info(
      { error: Object.assign(new Error('as error'), { code: 'E1' }), note: 'line1\nline2' },
      'multi\nline\r\nmessage',
    );
    log.child({ task_id: '9' }).info('child');
    log.info('plain');
    const lines = out.text().split('\n');
    expect(lines.pop()).toBe(''); // every entry ends its line
    expect(lines).toHaveLength(6);
    for (const line of lines) expect(line).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] (INFO|WARN|ERROR): \[probe\] /);
    expect(lines[0]).toContain('careful {"event":"x","task_id":7,"nested":{"a":1,"b":["two","three"]}}');
    expect(lines[1]).toContain('[probe] failed {"err":{"type":"Error","message":"boom","stack":"Error: boom\\n    at ');
    expect(lines[2]).toContain('[probe] bare {"err":{"type":"Error","message":"bare"');
    expect(lines[3]).toContain('[probe] multi\\nline\\r\\nmessage {"error":{');
    expect(lines[3]).toContain('"code":"E1"');
    expect(lines[3]).toContain('"note":"line1\\nline2"');
    expect(lines[4]).toContain('[probe] child {"task_id":"9"}');
    expect(lines[5]).toMatch(/\[probe\] plain$/);
  });

  it('redacts secrets in fields, one level down, in errors and in child bindings, leaving the objects given as they were', () => {
    const out = memory();
    const log = createLogger({ service: 'probe', format: 'json', destination: out.stream });
    const err = Object.assign(new Error('boom'), { password: 'p1', code: 'E1' });
    const fields = {
      event: 'x',
      token: 't1',
      config: { databaseUrl: 'postgres://u:pw@h/db', port: 5432 },
      req: { headers: { authorization: 'Bearer z', host: 'h' } },
      err,
      deep: { a: { password: 'three levels down: not a path we redact' } },
    };
    log.info(fields, 'one');
    // A raw request keeps its headers behind a getter of its prototype (http.IncomingMessage).
    class RawRequest {
      method = 'GET';
      get headers() {
        return { authorization: 'Bearer r1', host: 'h' };
      }
    }
    log.info({ req: new RawRequest() }, 'raw');
    log
      .child({ apiKey: 'k1', task_id: '7', nested: { secret: 's1' } })
      .child({ step: 2 })
      .warn('two');
    const [one, raw, two] = out
      .text()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(one).toMatchObject({
      token: '[redacted]',
      config: { databaseUrl: '[redacted]', port: 5432 },
      req: { headers: { authorization: '[redacted]', host: 'h' } },
      err: { type: 'Error', message: 'boom', password: '[redacted]', code: 'E1' },
      deep: { a: { password: 'three levels down: not a path we redact' } },
    });
    expect(raw).toMatchObject({ req: { method: 'GET', headers: { authorization: '[redacted]', host: 'h' } } });
    expect(two).toMatchObject({ apiKey: '[redacted]', task_id: '7', nested: { secret: '[redacted]' }, step: 2 });
    expect(out.text()).not.toMatch(/t1|pw@|Bearer|p1|k1|s1|r1/);
    // The caller's objects are as they were.
    expect(fields.config.databaseUrl).toBe('postgres://u:pw@h/db');
    expect(fields.req.headers.authorization).toBe('Bearer z');
    expect(err.password).toBe('p1');
  });

  it('respects the level', () => {
    const out = memory();
    const log = createLogger({ service: 'probe', level: 'warn', destination: out.stream });
    log.info('dropped');
    log.warn('kept');
    expect(
      out
        .text()
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { msg: string }).msg),
    ).toEqual(['kept']);
  });
});
