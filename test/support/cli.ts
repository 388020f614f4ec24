import { execFile } from 'node:child_process';
import { join } from 'node:path';

/** The compiled CLI of this build. */
const CLI = join(__dirname, '..', '..', 'lib', 'cli', 'main.js');

/** How a run of the CLI ended: its exit code and what it printed. */
export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `queuebox <args>` as users run it: the compiled CLI in a process of its own (60 s at most).
 * The database URL comes from `args` or `env` only: the runner's own DATABASE_URL and
 * QUEUEBOX_DATABASE_URL are left out.
 */
export function runQueueBoxCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<CliRun> {
  const base = { ...process.env };
  delete base.DATABASE_URL;
  delete base.QUEUEBOX_DATABASE_URL;
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...base, ...env }, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}
