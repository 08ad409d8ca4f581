// A vitest reporter that fails the run when a project listed in vitest.workspace.ts ran
// no test: vitest 4 ignores a workspace file by itself, and a glob that matches nothing
// would otherwise pass silently.
import type { Reporter, TestModule } from 'vitest/node';

export default class EveryProjectReporter implements Reporter {
  constructor(private readonly expected: string[]) {}

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const counts = new Map<string, number>(this.expected.map((name) => [name, 0]));
    for (const module of testModules) {
      const name = module.project.name;
      let tests = 0;
      for (const _ of module.children.allTests()) tests++;
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
  }
}
