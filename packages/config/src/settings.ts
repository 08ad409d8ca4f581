/**
 * Settings from environment variables and command-line flags, one table per program.
 *
 * A program describes each setting once: its variable, its flag (if it has one), a zod
 * schema that turns the raw string into the typed value, its default and one line of help.
 * From that table come the typed configuration, the errors and the `--help` text, so the
 * three cannot disagree.
 *
 *   const WORKER = defineConfig({
 *     program: 'queue-worker',
 *     summary: 'Claims tasks from the PostgreSQL queue and runs them.',
 *     settings: {
 *       databaseUrl: { env: 'DATABASE_URL', flag: 'database-url', required: true, secret: true, schema: postgresUrl, help: '...' },
 *       concurrency: { env: 'CONCURRENCY', flag: 'concurrency', default: '10', schema: wholeNumber(1, 1000), help: '...' },
 *     },
 *   });
 *   const config = WORKER.command(process.argv.slice(2), process.env); // typed config, or an exit code
 *
 * Rules, the same for every program:
 * - a flag wins over its variable; an empty or blank value counts as unset;
 * - a default is a raw string parsed by the schema like any value (so `--help` shows
 *   exactly what is applied);
 * - every bad value is reported, one line each: `VARIABLE (--flag): what is wrong, got "value"`
 *   (the value is left out for secrets); a missing required one is
 *   `VARIABLE (--flag): is required (help)`;
 * - on the command line, bad settings exit with code 2 and `--help` prints the table and
 *   exits 0.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';

/** One setting of a program. */
export interface Setting<S extends z.ZodType = z.ZodType> {
  /** The environment variable. */
  env: string;
  /** The command-line flag without its dashes; none: the setting is read from the environment only. */
  flag?: string;
  /** One line for `--help`. */
  help: string;
  /** Parses the raw string into the value. */
  schema: S;
  /** The raw value used when the setting is unset, or a function computing it at load time. */
  default?: string | (() => string);
  /** How `--help` shows a computed default (e.g. "host-pid-random"). */
  defaultText?: string;
  /** Unset is an error. */
  required?: boolean;
  /** Never echo the value in an error (passwords, tokens, URLs that may carry a password). */
  secret?: boolean;
}

export type Settings = Record<string, Setting>;

/** The typed configuration of a settings table: required or defaulted settings are always present. */
export type ConfigOf<T extends Settings> = {
  [K in keyof T]: T[K] extends { required: true } | { default: string | (() => string) }
    ? z.output<T[K]['schema']>
    : z.output<T[K]['schema']> | undefined;
};

/** Bad settings: one line per problem in `problems`; the message lists them all. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

export interface ConfigSpec<T extends Settings> {
  /** The program's name, for `--help` and error output. */
  program: string;
  /** What the program does, a sentence or two for `--help`. */
  summary: string;
  settings: T;
  /**
   * Checks across settings, run after each setting was parsed. A setting that was bad is
   * absent from `config`. `report(key, message)` adds a problem line for that setting;
   * `report(null, line)` adds a line as it is. `given(key)` says whether the setting was
   * set at all (by its flag or its variable), valid or not.
   */
  refine?: (
    config: Partial<ConfigOf<T>>,
    report: (key: keyof T | null, message: string) => void,
    given: (key: keyof T) => boolean,
  ) => void;
}

export type Env = Record<string, string | undefined>;

export interface Output {
  write(text: string): unknown;
}

export interface Config<T extends Settings> {
  readonly program: string;
  readonly settings: T;
  /** The label of a setting in errors: `VARIABLE (--flag)`. */
  label(key: keyof T): string;
  /** Reads the settings from `env`, overridden by flags in `argv`; 'help' when `--help` was given. Throws ConfigError. */
  read(env: Env, argv?: string[]): ConfigOf<T> | 'help';
  /** The table `--help` prints, one row per setting (for documentation checks). */
  rows(): { env: string; flag?: string; default: string; help: string }[];
  /** The `--help` text. */
  help(): string;
  /**
   * For a command line: the configuration, or the exit code after writing `--help` to
   * `stdout` (0) or the problems to `stderr` (2).
   */
  command(argv: string[], env: Env, streams?: { stdout: Output; stderr: Output }): ConfigOf<T> | number;
}

const blank = (v: string | undefined): v is undefined => v === undefined || v.trim() === '';

/** One message per issue; object paths (not array positions) lead the message, e.g. `client_email: ...`. */
export function issueText(error: z.ZodError): string {
  return error.issues
    .map((issue) => {
      const path = issue.path.filter((p): p is string => typeof p === 'string');
      return `${path.length > 0 ? `${path.join('.')}: ` : ''}${issue.message}`;
    })
    .join('; ');
}

export function defineConfig<const T extends Settings>(spec: ConfigSpec<T>): Config<T> {
  const keys = Object.keys(spec.settings) as (keyof T & string)[];
  const withFlags = keys.filter((k) => spec.settings[k]!.flag !== undefined);
  const label = (key: keyof T) => {
    const s = spec.settings[key]!;
    return s.flag ? `${s.env} (--${s.flag})` : s.env;
  };

  const read = (env: Env, argv: string[] = []): ConfigOf<T> | 'help' => {
    let flags: Record<string, string | boolean | undefined>;
    const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {
      help: { type: 'boolean', short: 'h' },
    };
    for (const k of withFlags) options[spec.settings[k]!.flag!] = { type: 'string' };
    try {
      flags = parseArgs({ args: argv, options, strict: true, allowPositionals: false }).values;
    } catch (error) {
      throw new ConfigError([error instanceof Error ? error.message : String(error)]);
    }
    if (flags.help) return 'help';

    const problems: string[] = [];
    const config: Partial<Record<keyof T, unknown>> = {};
    const set = new Set<keyof T>();
    for (const key of keys) {
      const s = spec.settings[key]!;
      const fromFlag = s.flag !== undefined ? (flags[s.flag] as string | undefined) : undefined;
      let raw = !blank(fromFlag) ? fromFlag : !blank(env[s.env]) ? env[s.env] : undefined;
      if (raw !== undefined) set.add(key);
      if (raw === undefined && s.default !== undefined) raw = typeof s.default === 'function' ? s.default() : s.default;
      if (raw === undefined) {
        if (s.required) problems.push(`${label(key)}: is required (${s.help})`);
        else config[key] = undefined;
        continue;
      }
      const parsed = s.schema.safeParse(raw);
      if (parsed.success) {
        config[key] = parsed.data;
        continue;
      }
      const shown = s.secret ? '' : `, got ${JSON.stringify(raw.length > 60 ? `${raw.slice(0, 60)}...` : raw)}`;
      problems.push(`${label(key)}: ${issueText(parsed.error)}${shown}`);
    }
    // Settings that were bad are left out, so refine checks only the values that parsed.
    const parsedOnly = Object.fromEntries(Object.entries(config).filter(([, v]) => v !== undefined)) as Partial<
      ConfigOf<T>
    >;
    spec.refine?.(
      parsedOnly,
      (key, message) => problems.push(key === null ? message : `${label(key)}: ${message}`),
      (key) => set.has(key),
    );
    if (problems.length > 0) throw new ConfigError(problems);
    return config as ConfigOf<T>;
  };

  const table = () =>
    keys.map((k) => {
      const s = spec.settings[k]!;
      const dflt = s.required
        ? '(required)'
        : (s.defaultText ?? (typeof s.default === 'string' ? s.default : s.default ? '(computed)' : '(unset)'));
      return { env: s.env, ...(s.flag ? { flag: s.flag } : {}), default: dflt, help: s.help };
    });

  const help = (): string => {
    const rows = table().map((r) => [r.flag ? `--${r.flag}` : '', r.env, r.default, r.help]);
    const header =
      withFlags.length > 0 ? ['flag', 'variable', 'default', 'meaning'] : ['', 'variable', 'default', 'meaning'];
    const all = [header, ...rows, ['--help', '', '', 'print this and exit']];
    const width = [0, 1, 2].map((i) => Math.max(...all.map((r) => r[i]!.length)));
    const line = (r: string[]) =>
      `  ${withFlags.length > 0 ? `${r[0]!.padEnd(width[0]!)}  ` : ''}${r[1]!.padEnd(width[1]!)}  ${r[2]!.padEnd(width[2]!)}  ${r[3]}`.trimEnd();
    return [
      `Usage: ${spec.program} ${withFlags.length > 0 ? '[flags]' : '[--help]'}`,
      '',
      spec.summary,
      withFlags.length > 0
        ? 'Each setting is an environment variable or its flag; the flag wins.'
        : 'Settings are environment variables.',
      '',
      ...all.map(line),
      '',
    ].join('\n');
  };

  const command = (
    argv: string[],
    env: Env,
    streams: { stdout: Output; stderr: Output } = process,
  ): ConfigOf<T> | number => {
    let result: ConfigOf<T> | 'help';
    try {
      result = read(env, argv);
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      streams.stderr.write(`${spec.program}: ${error.message}\nRun ${spec.program} --help for the list of settings.\n`);
      return 2;
    }
    if (result === 'help') {
      streams.stdout.write(help());
      return 0;
    }
    return result;
  };

  return { program: spec.program, settings: spec.settings, label, read, rows: table, help, command };
}

// --- schemas for raw strings, shared by every program ------------------------------------

/** A whole number in [min, max]. */
export const wholeNumber = (min: number, max: number) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, `must be a whole number between ${min} and ${max}`)
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));

/** A postgres:// or postgresql:// URL. */
export const postgresUrl = z
  .string()
  .trim()
  .refine((v) => /^postgres(ql)?:\/\//.test(v) && URL.canParse(v), 'must be a postgres:// or postgresql:// URL');

/** An http:// or https:// URL. */
export const httpUrl = z
  .string()
  .trim()
  .pipe(z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }));

/** A comma-separated list; blanks between commas are dropped. */
export const commaList = <S extends z.ZodType<unknown, string>>(item: S, atLeastOne = 'must name at least one') =>
  z
    .string()
    .transform((v) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    )
    .pipe(z.array(item).min(1, atLeastOne));

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** LOG_LEVEL and LOG_FORMAT, the same in every program. */
export const logSettings = (flags: boolean) =>
  ({
    logLevel: {
      env: 'LOG_LEVEL',
      ...(flags ? { flag: 'log-level' } : {}),
      default: 'info',
      help: LOG_LEVELS.join(' | '),
      schema: z.enum(LOG_LEVELS, { error: `must be one of ${LOG_LEVELS.join(', ')}` }),
    },
    logFormat: {
      env: 'LOG_FORMAT',
      ...(flags ? { flag: 'log-format' } : {}),
      default: 'auto',
      help: 'json: one JSON object per line; pretty: for people; auto: pretty when stdout is a terminal',
      schema: z.enum(LOG_FORMATS, { error: `must be one of ${LOG_FORMATS.join(', ')}` }),
    },
  }) satisfies Settings;
