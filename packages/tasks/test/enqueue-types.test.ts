// typedEnqueue at compile time: the payload's type follows the task type. The
// `@ts-expect-error` lines below are checked by the project's type check
// (`npx tsc -p tsconfig.json` covers packages/*/test), which fails if any of them
// compiles; the test compiles a file with a wrong payload through TypeScript itself and
// reads the error.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import type { Id, Queryable } from '@org/queue-client';
import { defineTask, typedEnqueue, type PayloadOf } from '@org/tasks';

const fax = defineTask({
  name: 'fax',
  payload: z.object({ to: z.string(), pages: z.number().int().positive(), cover: z.string().optional() }),
  run: () => {},
});
const resize = defineTask({
  name: 'resize',
  payload: z.object({ url: z.url(), width: z.number().default(800) }),
  run: ({ width }) => {
    expectTypeOf(width).toEqualTypeOf<number>();
  },
});
const enqueueTask = typedEnqueue([fax, resize]);

// Never called: only compiled.
export async function compileChecks(app: Queryable): Promise<void> {
  expectTypeOf<PayloadOf<typeof fax>>().toEqualTypeOf<{ to: string; pages: number; cover?: string | undefined }>();
  // The schema's input: a field with a default may be left out when enqueueing.
  expectTypeOf<PayloadOf<typeof resize>>().toEqualTypeOf<{ url: string; width?: number | undefined }>();
  expectTypeOf(await enqueueTask(app, { taskType: 'fax', payload: { to: '+15550100', pages: 2 } })).toEqualTypeOf<Id>();
  await enqueueTask(app, { taskType: 'resize', payload: { url: 'https://example.com/a.png' }, priority: 5 });

  // @ts-expect-error pages must be a number
  await enqueueTask(app, { taskType: 'fax', payload: { to: '+15550100', pages: 'two' } });
  // @ts-expect-error pages is missing
  await enqueueTask(app, { taskType: 'fax', payload: { to: '+15550100' } });
  // @ts-expect-error fax's payload is not resize's
  await enqueueTask(app, { taskType: 'fax', payload: { url: 'https://example.com/a.png' } });
  // @ts-expect-error no definition of telex
  await enqueueTask(app, { taskType: 'telex', payload: {} });
  // @ts-expect-error an unknown option
  await enqueueTask(app, { taskType: 'fax', payload: { to: 'x', pages: 1 }, urgency: 'high' });
}

describe('tsc', () => {
  const here = dirname(fileURLToPath(import.meta.url));
  // Files that are never written: served to the compiler from memory, beside this one, so
  // that they resolve @org/tasks and zod as this test does.
  const file = (payload: string) => `
import { z } from 'zod';
import { defineTask, typedEnqueue } from '@org/tasks';
import type { Queryable } from '@org/queue-client';

const fax = defineTask({
  name: 'fax',
  payload: z.object({ to: z.string(), pages: z.number().int().positive() }),
  run: () => {},
});
const enqueueTask = typedEnqueue([fax]);
export const send = (app: Queryable) => enqueueTask(app, { taskType: 'fax', payload: ${payload} });
`;
  const sources = new Map([
    [join(here, '__right_payload__.ts'), file(`{ to: '+15550100', pages: 2 }`)],
    [join(here, '__wrong_type__.ts'), file(`{ to: '+15550100', pages: 'two' }`)],
    [join(here, '__missing_field__.ts'), file(`{ to: '+15550100' }`)],
  ]);

  /** Each in-memory file's errors, from one program. */
  function compile(): Map<string, string[]> {
    const options: ts.CompilerOptions = {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: ['node'],
    };
    const host = ts.createCompilerHost(options);
    const readFile = host.readFile.bind(host);
    const fileExists = host.fileExists.bind(host);
    const getSourceFile = host.getSourceFile.bind(host);
    host.readFile = (name) => sources.get(name) ?? readFile(name);
    host.fileExists = (name) => sources.has(name) || fileExists(name);
    host.getSourceFile = (name, language, onError, create) => {
      const text = sources.get(name);
      return text === undefined
        ? getSourceFile(name, language, onError, create)
        : ts.createSourceFile(name, text, language);
    };
    const program = ts.createProgram([...sources.keys()], options, host);
    const errors = new Map<string, string[]>([...sources.keys()].map((name) => [name.slice(here.length + 1), []]));
    for (const d of ts.getPreEmitDiagnostics(program)) {
      const name = d.file?.fileName;
      if (name && sources.has(name))
        errors.get(name.slice(here.length + 1))!.push(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    }
    return errors;
  }

  it('accepts the right payload and rejects a wrong one, naming the field', () => {
    const errors = compile();
    expect(errors.get('__right_payload__.ts')).toEqual([]);
    expect(errors.get('__wrong_type__.ts')).toHaveLength(1);
    expect(errors.get('__wrong_type__.ts')![0]).toMatch(/Type 'string' is not assignable to type 'number'/);
    expect(errors.get('__missing_field__.ts')).toHaveLength(1);
    expect(errors.get('__missing_field__.ts')![0]).toMatch(/Property 'pages' is missing/);
  });
});
