#!/usr/bin/env node
// The `queuebox` command (package.json "bin"). See docs/cli.md, or run `queuebox --help`.
import { runCli } from './cli';

runCli(process.argv.slice(2), {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
  env: process.env,
}).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    // runCli handles every error; this is a bug, and its message may not be masked, so say little.
    process.stderr.write(`queuebox: internal error (${error instanceof Error ? error.name : typeof error})\n`);
    process.exitCode = 1;
  },
);
