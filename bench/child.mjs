// The parent side of the worker protocol (see worker-common.mjs): spawns `node bench/worker-*.mjs`
// and turns its messages into promises.
import { fork } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// Workers still running, so an interrupted run can end them before it drops their databases.
const live = new Set();

/** Kills every worker still running (SIGKILL) and waits for them to exit. */
export function killAllWorkers() {
  return Promise.all([...live].map((worker) => worker.kill()));
}

function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Nobody may be waiting for it when the worker dies: that must not become an unhandled rejection.
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/**
 * Starts a worker process. `config` is passed in BENCH_WORKER_CONFIG; `onProgress({ handled,
 * distinct })` is called about twice a second once it runs, `onRejection(text)` for each promise
 * rejection nobody handled in the worker. With `cpuProfile`, the worker runs
 * with `--cpu-prof` and writes its profile to `cpuProfile.dir` when it exits (BENCH_CPU_PROF=go:
 * a profile of the drain only, from `go` until the parent saw the work finished).
 */
export function spawnWorker({ script, config, onProgress = () => {}, onRejection = () => {}, cpuProfile }) {
  // BENCH_WORKER_NODE_FLAGS: extra Node/V8 flags for the worker processes (memory experiments).
  const execArgv = (process.env.BENCH_WORKER_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
  const env = { ...process.env, BENCH_WORKER_CONFIG: JSON.stringify(config) };
  if (cpuProfile) {
    mkdirSync(cpuProfile.dir, { recursive: true });
    // BENCH_CPU_PROF=go: only from `go` until the work was seen finished (worker-common.mjs).
    if (process.env.BENCH_CPU_PROF === 'go') env.BENCH_CPU_PROF_GO = `${cpuProfile.dir}/${cpuProfile.name}.cpuprofile`;
    else execArgv.push('--cpu-prof', `--cpu-prof-dir=${cpuProfile.dir}`, `--cpu-prof-name=${cpuProfile.name}.cpuprofile`);
  }
  const child = fork(fileURLToPath(new URL(script, import.meta.url)), [], {
    env,
    // The parent's own binary (bench/node.mjs: Node 26 unless BENCH_NODE=current), said outright.
    execPath: process.execPath,
    execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const ready = deferred();
  const started = deferred();
  const handledAll = deferred();
  const result = deferred();
  const exited = deferred();
  const pending = [ready, started, handledAll, result];
  child.on('message', (message) => {
    if (message.type === 'ready') ready.resolve();
    else if (message.type === 'started') started.resolve(message);
    else if (message.type === 'progress') onProgress(message);
    else if (message.type === 'handled-all') handledAll.resolve(message.at);
    else if (message.type === 'unhandled-rejection') onRejection(message.error);
    else if (message.type === 'result') result.resolve(message);
    else if (message.type === 'failed') for (const d of pending) d.reject(new Error(`worker failed: ${message.error}`));
  });
  child.on('error', (error) => {
    for (const d of pending) d.reject(error);
  });
  child.on('exit', (code, signal) => {
    const error = new Error(`worker exited early (${signal ?? `code ${code}`})`);
    for (const d of pending) d.reject(error);
    exited.resolve({ code, signal });
    live.delete(worker);
  });
  const worker = {
    pid: child.pid,
    ready: ready.promise,
    started: started.promise,
    handledAll: handledAll.promise,
    exited: exited.promise,
    go: () => child.send({ type: 'go' }),
    /** Asks for a graceful stop; resolves to the worker's `result` message. */
    stop() {
      if (child.connected) child.send({ type: 'stop' });
      return result.promise;
    },
    kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      return exited.promise;
    },
  };
  live.add(worker);
  return worker;
}

/** How often each worker of a group reports progress: the group's "handled all" waits for the sum. */
const GROUP_PROGRESS_EVERY_MS = 50;

/**
 * `count` worker processes of one system that share the work (BENCH_WORKERS), behind the interface
 * of one worker: ready, started and exited once all are; `go`, `stop` and `kill` go to every one;
 * `handledAll` once the sum of the messages each has seen reaches `expected` (each reports it every
 * 50 ms, so the parent's done-poll starts at most that late; the poll, not this sum, says the work
 * is finished); `stop` resolves to one result, their handler starts merged in time order (one
 * clock for every process: clock.mjs), CPU summed, peak RSS the largest of them. One worker is
 * `spawnWorker` itself.
 */
export function spawnWorkerGroup({ count, onProgress = () => {}, cpuProfile, ...spec }) {
  if (count === 1) return spawnWorker({ ...spec, cpuProfile, onProgress });
  const expected = spec.config.expected;
  const seen = new Array(count).fill(0);
  const handledAll = deferred();
  const workers = Array.from({ length: count }, (_, i) =>
    spawnWorker({
      ...spec,
      config: { ...spec.config, progressEveryMs: GROUP_PROGRESS_EVERY_MS },
      cpuProfile: cpuProfile ? { ...cpuProfile, name: `${cpuProfile.name}_${i}` } : undefined,
      onProgress: (message) => {
        seen[i] = message.distinct;
        const distinct = seen.reduce((sum, n) => sum + n, 0);
        onProgress({ handled: message.handled, distinct: Math.min(distinct, expected) });
        if (distinct >= expected) handledAll.resolve(performance.timeOrigin + performance.now());
      },
    }),
  );
  const all = (pick) => Promise.all(workers.map(pick));
  const failed = Promise.race(workers.map((worker) => worker.exited.then(() => worker.handledAll)));
  failed.catch((error) => handledAll.reject(error));
  return {
    pid: workers[0].pid,
    ready: all((worker) => worker.ready),
    started: all((worker) => worker.started).then((started) => ({
      at: Math.min(...started.map((s) => s.at)),
      startMs: Math.max(...started.map((s) => s.startMs)),
    })),
    handledAll: handledAll.promise,
    exited: all((worker) => worker.exited),
    go: () => {
      for (const worker of workers) worker.go();
    },
    async stop() {
      return mergeResults(await all((worker) => worker.stop()));
    },
    kill: () => all((worker) => worker.kill()),
  };
}

/** The results of a group's workers as one (see spawnWorkerGroup). */
function mergeResults(results) {
  const starts = results.flatMap((result) => result.seqs.map((seq, i) => [result.times[i], seq]));
  starts.sort((a, b) => a[0] - b[0]);
  const sum = (pick) => results.reduce((total, result) => total + (pick(result) ?? 0), 0);
  const firstAts = results.map((result) => result.firstAt).filter((at) => !Number.isNaN(at) && at !== null);
  return {
    type: 'result',
    startedAt: Math.min(...results.map((result) => result.startedAt)),
    firstAt: firstAts.length > 0 ? Math.min(...firstAts) : Number.NaN,
    seqs: starts.map((start) => start[1]),
    times: starts.map((start) => start[0]),
    maxRssKb: Math.max(...results.map((result) => result.maxRssKb)),
    idleRssKb: Math.max(...results.map((result) => result.idleRssKb ?? 0)) || null,
    cpuMs: sum((result) => result.cpuMs),
    cpuFromGoMs: sum((result) => result.cpuFromGoMs),
    allocation: null,
    unhandledRejections: sum((result) => result.unhandledRejections),
  };
}
