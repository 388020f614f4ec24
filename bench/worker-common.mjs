// The worker side of the parent/worker protocol, shared by bench/worker-*.mjs. Each worker
// process boots its system, says `ready`, starts consuming on `go`, records every handler start,
// and on `stop` shuts its system down gracefully and sends back what it recorded and its peak RSS.
//
//   parent -> worker: { type: 'go' } | { type: 'stop' }
//   worker -> parent: { type: 'ready' } | { type: 'started', at, startMs } | { type: 'progress', handled, distinct }
//                     | { type: 'handled-all', at } | { type: 'result', seqs, times, maxRssKb, cpuMs, cpuFromGoMs, firstAt,
//                       startedAt, allocation, unhandledRejections }
//                     | { type: 'unhandled-rejection', error } | { type: 'failed', error }
import { appendFileSync, writeFileSync } from 'node:fs';
import inspector from 'node:inspector';
import { getHeapSpaceStatistics, writeHeapSnapshot } from 'node:v8';
import { now } from './clock.mjs';

const PROGRESS_EVERY_MS = 500;
const MAX_LOGGED_REJECTIONS = 3;

/** Handler starts in arrival order, in typed arrays so recording costs next to nothing. */
class Recorder {
  constructor(expected) {
    this.expected = expected;
    this.seqs = new Int32Array(expected + 1024);
    this.times = new Float64Array(expected + 1024);
    this.count = 0;
    this.seen = new Uint8Array(expected);
    this.distinct = 0;
    this.onAllSeen = () => {};
    /** When the first handler started, and the process's CPU then: the drain is timed from there. */
    this.firstAt = Number.NaN;
    this.cpuAtFirst = undefined;
  }

  record(seq) {
    const at = now();
    if (this.count === 0) {
      this.firstAt = at;
      this.cpuAtFirst = process.cpuUsage();
    }
    if (this.count === this.seqs.length) this.grow();
    this.seqs[this.count] = seq;
    this.times[this.count] = at;
    this.count++;
    if (seq >= 0 && seq < this.expected && !this.seen[seq]) {
      this.seen[seq] = 1;
      if (++this.distinct === this.expected) this.onAllSeen(at);
    }
  }

  grow() {
    const seqs = new Int32Array(this.seqs.length * 2);
    seqs.set(this.seqs);
    const times = new Float64Array(this.times.length * 2);
    times.set(this.times);
    this.seqs = seqs;
    this.times = times;
  }
}

/**
 * BENCH_MEM_TRACE=<file>: samples process.memoryUsage() every BENCH_MEM_TRACE_MS (50) ms and writes
 * the samples (t ms, rss, heapTotal, heapUsed, external, arrayBuffers in MB, and marks) as JSON
 * lines to `<file>` when the worker stops. Off by default: costs nothing then.
 */
function startMemTrace() {
  const file = process.env.BENCH_MEM_TRACE;
  if (!file) return { mark() {}, write() {} };
  const t0 = performance.now();
  const samples = [];
  const sample = (mark) => {
    const m = process.memoryUsage();
    const mb = (x) => Math.round(x / 104857.6) / 10;
    samples.push({
      t: Math.round(performance.now() - t0),
      rss: mb(m.rss),
      heapTotal: mb(m.heapTotal),
      heapUsed: mb(m.heapUsed),
      external: mb(m.external),
      arrayBuffers: mb(m.arrayBuffers),
      ...(mark ? { mark } : {}),
    });
  };
  const timer = setInterval(sample, Number(process.env.BENCH_MEM_TRACE_MS ?? 50));
  timer.unref();
  sample('start');
  return {
    mark(label) {
      sample(label);
      if (label === 'ready')
        samples.push({
          spacesAtReady: Object.fromEntries(
            getHeapSpaceStatistics().map((x) => [
              x.space_name,
              [x.space_size, x.space_used_size, x.physical_space_size].map((v) => Math.round(v / 104857.6) / 10),
            ]),
          ),
        });
    },
    write() {
      clearInterval(timer);
      sample('stopped');
      samples.push({
        spaces: Object.fromEntries(
          getHeapSpaceStatistics().map((x) => [
            x.space_name,
            [x.space_size, x.space_used_size, x.physical_space_size].map((v) => Math.round(v / 104857.6) / 10),
          ]),
        ),
      });
      if (globalThis.gc) {
        globalThis.gc();
        sample('after-gc');
      }
      samples.push({ maxRss: Math.round(process.resourceUsage().maxRSS / 102.4) / 10 });
      appendFileSync(file, `${samples.map((s) => JSON.stringify(s)).join('\n')}\n`);
    },
  };
}

/**
 * V8's sampling heap profiler over the drain, counting the objects the GC collected too (so: every
 * allocation, sampled): the W2 allocation run (`config.allocation`, from the end of the start call
 * until the parent saw the work finished, so the application's boot and shutdown are left out), or
 * BENCH_ALLOC_PROF=<file> (from `go` to the stop, as before). The profile is written as a
 * .heapprofile to the file; `stop()` resolves to `{ bytes, file }`, bytes the sum of every node's
 * self size: V8 scales each sample by its probability, so the sum estimates all bytes allocated.
 */
function allocationProfiler(config) {
  const file = config.allocation?.file ?? process.env.BENCH_ALLOC_PROF;
  if (!file) return { async start() {}, async stop() {} };
  const session = new inspector.Session();
  session.connect();
  const post = (method, params) => new Promise((resolve, reject) => session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))));
  return {
    start: () =>
      post('HeapProfiler.startSampling', {
        samplingInterval: config.allocation?.samplingInterval ?? 4096,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: process.env.BENCH_ALLOC_PROF_MINOR !== '0',
      }),
    async stop() {
      const { profile } = await post('HeapProfiler.stopSampling');
      writeFileSync(file, JSON.stringify(profile));
      let bytes = 0;
      const nodes = [profile.head];
      while (nodes.length > 0) {
        const node = nodes.pop();
        bytes += node.selfSize;
        nodes.push(...node.children);
      }
      return { bytes, file };
    },
  };
}

/**
 * BENCH_CPU_PROF_GO=<file> (set by child.mjs under BENCH_CPU_PROF=go): V8's CPU profiler from
 * `go` until the parent saw the work finished (boot and shutdown left out, unlike
 * BENCH_CPU_PROF=1's whole-process `--cpu-prof`), written as a .cpuprofile to `<file>`
 * (bench/profile-summary.mjs summarizes it).
 */
function drainCpuProfiler() {
  const file = process.env.BENCH_CPU_PROF_GO;
  if (!file) return { async start() {}, async stop() {} };
  const session = new inspector.Session();
  session.connect();
  const post = (method, params) => new Promise((resolve, reject) => session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))));
  return {
    async start() {
      await post('Profiler.enable');
      await post('Profiler.setSamplingInterval', { interval: 500 });
      await post('Profiler.start');
    },
    async stop() {
      const { profile } = await post('Profiler.stop');
      writeFileSync(file, JSON.stringify(profile));
    },
  };
}

/** The message and the outermost stack frame: where the promise nobody awaited was made. */
function describeRejection(error) {
  const frames = String(error?.stack ?? '')
    .split('\n')
    .filter((line) => line.trim().startsWith('at '));
  const where = frames.length ? ` (${frames[frames.length - 1].trim().replace(/\(.*node_modules\//, '(')})` : '';
  return `${error?.message ?? error}${where}`;
}

function send(message) {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send(message, () => resolve());
  });
}

/**
 * Runs a worker process. `boot(config, record)` connects the system and returns `{ start(), stop() }`;
 * its handler must call `record(payload)` first thing, with the message's payload `{ seq, key }`.
 * The config comes from the parent in BENCH_WORKER_CONFIG.
 */
export async function serveWorker(boot) {
  const memTrace = startMemTrace();
  const config = JSON.parse(process.env.BENCH_WORKER_CONFIG ?? '{}');
  const allocProfile = allocationProfiler(config);
  // The W2 allocation run profiles the drain only; BENCH_ALLOC_PROF profiles from `go` to the stop.
  const drainOnlyAllocation = Boolean(config.allocation);
  const drainProfile = drainCpuProfiler();
  const recorder = new Recorder(config.expected);
  // The parent going away (Ctrl-C, a crash) must not leave a worker running.
  process.on('disconnect', () => process.exit(1));
  // A rejection nobody handles would end the process (Node's default); an application would
  // typically log it and go on. So does this, and the parent reports how many there were.
  let unhandledRejections = 0;
  process.on('unhandledRejection', (error) => {
    if (++unhandledRejections <= MAX_LOGGED_REJECTIONS) console.error(`[worker] unhandled rejection: ${error?.stack ?? error}`);
    void send({ type: 'unhandled-rejection', error: describeRejection(error) });
  });
  try {
    // BENCH_HEAP_SNAPSHOT_AT=<n>: a heap snapshot when the n-th message is recorded (diagnosis only).
    const snapshotAt = Number(process.env.BENCH_HEAP_SNAPSHOT_AT ?? 0);
    const worker = await boot(config, (payload) => {
      recorder.record(Number(payload.seq));
      if (recorder.count === snapshotAt) console.error(`[worker] heap snapshot ${writeHeapSnapshot()}`);
    });
    let progress;
    let startedAt = Number.NaN;
    let cpuAtGo;
    let allocatedFrom = 0;
    /** Resident set size at `go`, booted and idle, in KiB: what the drain's peak is measured from. */
    let idleRssKb = null;
    recorder.onAllSeen = (at) => void send({ type: 'handled-all', at });
    process.on('message', async (message) => {
      try {
        if (message.type === 'go') {
          idleRssKb = Math.round(process.memoryUsage.rss() / 1024);
          if (!drainOnlyAllocation) await allocProfile.start();
          await drainProfile.start();
          memTrace.mark('go');
          startedAt = now();
          cpuAtGo = process.cpuUsage();
          await worker.start();
          const startMs = now() - startedAt;
          if (drainOnlyAllocation) {
            allocatedFrom = recorder.count;
            await allocProfile.start();
          }
          await send({ type: 'started', at: startedAt, startMs });
          progress = setInterval(
            () => void send({ type: 'progress', handled: recorder.count, distinct: recorder.distinct }),
            config.progressEveryMs ?? PROGRESS_EVERY_MS,
          );
        } else if (message.type === 'stop') {
          // The peak of the drain, read first: the graceful stop and the result arrays built below
          // are the bench's, not the system's (they once added 11-33 MB to QueueBox's peak).
          const maxRssKb = process.resourceUsage().maxRSS;
          clearInterval(progress);
          // CPU from the first handler start (and from `go`) until the parent saw the work
          // finished: boot, start call and shutdown left out (the start call kept in the second).
          const cpu = process.cpuUsage(recorder.cpuAtFirst ?? cpuAtGo);
          const cpuFromGo = process.cpuUsage(cpuAtGo);
          const allocatedMessages = recorder.count - allocatedFrom;
          const allocation = drainOnlyAllocation ? { ...(await allocProfile.stop()), messages: allocatedMessages } : null;
          await drainProfile.stop();
          await worker.stop();
          if (!drainOnlyAllocation) await allocProfile.stop();
          memTrace.write();
          await send({
            type: 'result',
            startedAt,
            firstAt: recorder.firstAt,
            seqs: Array.from(recorder.seqs.subarray(0, recorder.count)),
            times: Array.from(recorder.times.subarray(0, recorder.count)),
            // Peak resident set size of this process from its start to the end of the drain, and at `go`, in KiB.
            maxRssKb,
            idleRssKb,
            cpuMs: (cpu.user + cpu.system) / 1000,
            cpuFromGoMs: (cpuFromGo.user + cpuFromGo.system) / 1000,
            allocation,
            unhandledRejections,
          });
          process.exit(0);
        }
      } catch (error) {
        await send({ type: 'failed', error: String(error?.stack ?? error) });
        process.exit(1);
      }
    });
    memTrace.mark('ready');
    await send({ type: 'ready' });
  } catch (error) {
    await send({ type: 'failed', error: String(error?.stack ?? error) });
    process.exit(1);
  }
}
