// The Node.js binary the whole benchmark runs on: the parent and every worker process. By default
// Node 26, installed once from the npm registry's `node-<os>-<arch>` package (no install scripts)
// into the cache .ci/run uses; BENCH_NODE=current keeps the node that started the run.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import os from 'node:os';
import { delimiter, dirname, join } from 'node:path';

const LINE = '26';
/** Set in the re-started process, so it does not re-start itself again. */
const REEXEC_ENV = 'BENCH_NODE_BINARY';

function platform() {
  const arch = { x64: 'x64', arm64: 'arm64' }[process.arch] ?? process.arch;
  return `${process.platform}-${arch}`;
}

/** bin/node of the Node line, installed into the CI cache (QUEUEBOX_CI_NODE_CACHE, as .ci/run) on first use. */
function installedNode(line) {
  const cache = join(process.env.QUEUEBOX_CI_NODE_CACHE ?? join(os.homedir(), '.cache', 'queuebox-ci-node'), line);
  const pkg = `node-${platform()}`;
  const binary = join(cache, 'node_modules', pkg, 'bin', 'node');
  if (!existsSync(binary)) {
    console.log(`Installing Node ${line} (${pkg}@${line} from the npm registry) into ${cache}`);
    const args = [
      'install',
      '--no-save',
      '--no-package-lock',
      '--no-audit',
      '--no-fund',
      '--ignore-scripts',
      '--prefix',
      cache,
      `${pkg}@${line}`,
    ];
    execFileSync('npm', args, { stdio: 'inherit', timeout: 600_000 });
    if (!existsSync(binary)) throw new Error(`npm installed ${pkg}@${line} but ${binary} is missing`);
  }
  return binary;
}

/**
 * Where the run stands: `{ binary, label }` when this process already is the benchmark's node,
 * or, when it is not, re-runs this script under that node (inheriting stdio, with its bin/ first
 * on PATH) and resolves to `{ exitCode }` of that run once it ends.
 */
export async function benchNode(script) {
  const wanted = process.env.BENCH_NODE ?? LINE;
  if (wanted === 'current') return { binary: process.execPath, label: 'BENCH_NODE=current: the node that started the run' };
  if (wanted !== LINE) throw new Error(`BENCH_NODE must be unset (Node ${LINE}) or 'current', got ${JSON.stringify(wanted)}`);
  if (process.env[REEXEC_ENV] === process.execPath)
    return { binary: process.execPath, label: `Node ${LINE} from the npm registry (node-${platform()}@${LINE})` };
  const binary = installedNode(LINE);
  const child = spawn(binary, [...process.execArgv, script, ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, [REEXEC_ENV]: binary, PATH: `${dirname(binary)}${delimiter}${process.env.PATH ?? ''}` },
  });
  // Ctrl-C reaches the whole process group: the child cleans up and exits, this one waits for it.
  // A SIGTERM sent to this process alone is passed on.
  process.on('SIGINT', () => {});
  process.on('SIGTERM', () => child.kill('SIGTERM'));
  const exitCode = await new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : 1)));
  });
  return { exitCode };
}
