// Preloaded (`--import`, through NODE_OPTIONS: scripts/test.mjs sets it) into every process of a
// test run: the test runner, each test file, and the processes the tests start (the fixtures of
// test/fixtures). A DeprecationWarning raised from QueueBox's own code (a frame of lib/ in its
// stack, compiled or not, outside node_modules) fails the run: the process that raised it exits
// non-zero, and it is written to QUEUEBOX_DEPRECATIONS_FILE, which scripts/test.mjs reads at the
// end (a fixture's exit code may go unread by its test). A deprecation raised only by other code
// (a dependency, a test) is written down as well and reported, without failing the run.
import { appendFileSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Where QueueBox's own code runs from (its sources through source maps, their test build, the package build), as paths and as URLs. */
const OWN_CODE = [join(root, 'lib'), join(root, '.build', 'lib'), join(root, 'dist')].flatMap((dir) => [
  dir + sep,
  `${pathToFileURL(dir).href}/`,
]);

// Async frames count: the frame of lib/ that awaited the call may be the tenth or later.
Error.stackTraceLimit = Math.max(Error.stackTraceLimit, 50);

/** Whether a frame of `stack` is QueueBox's own code. */
export function raisedByQueueBox(stack) {
  return stack
    .split('\n')
    .slice(1)
    .some(
      (frame) =>
        !frame.includes('/node_modules/') && !frame.includes(`${sep}node_modules${sep}`) && OWN_CODE.some((dir) => frame.includes(dir)),
    );
}

let raised = false;
process.on('warning', (warning) => {
  if (warning.name !== 'DeprecationWarning') return;
  const ours = raisedByQueueBox(warning.stack ?? '');
  const record = { ours, message: warning.message, stack: warning.stack, process: process.argv.slice(1).join(' '), pid: process.pid };
  if (process.env.QUEUEBOX_DEPRECATIONS_FILE) appendFileSync(process.env.QUEUEBOX_DEPRECATIONS_FILE, `${JSON.stringify(record)}\n`);
  if (!ours) return;
  raised = true;
  process.stderr.write(`\nQueueBox raised a DeprecationWarning (the run fails):\n${warning.stack}\n`);
});
process.on('exit', (code) => {
  if (raised && code === 0) process.exitCode = 1;
});
