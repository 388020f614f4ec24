// The worker side of the parent/worker protocol, shared by bench/worker-*.mjs. Each worker
// process boots its system, says `ready`, starts consuming on `go`, records every handler start,
// and on `stop` shuts its system down gracefully and sends back what it recorded and its peak RSS.
//
//   parent -> worker: { type: 'go' } | { type: 'stop' }
//   worker -> parent: { type: 'ready' } | { type: 'started', at, startMs } | { type: 'progress', handled, distinct }
//                     | { type: 'handled-all', at } | { type: 'result', seqs, times, maxRssKb, cpuMs, startedAt, unhandledRejections }
//                     | { type: 'unhandled-rejection', error } | { type: 'failed', error }
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
  }

  record(seq) {
    const at = now();
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
  const config = JSON.parse(process.env.BENCH_WORKER_CONFIG ?? '{}');
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
    const worker = await boot(config, (payload) => recorder.record(Number(payload.seq)));
    let progress;
    let startedAt = Number.NaN;
    let cpuAtGo;
    recorder.onAllSeen = (at) => void send({ type: 'handled-all', at });
    process.on('message', async (message) => {
      try {
        if (message.type === 'go') {
          startedAt = now();
          cpuAtGo = process.cpuUsage();
          await worker.start();
          await send({ type: 'started', at: startedAt, startMs: now() - startedAt });
          progress = setInterval(
            () => void send({ type: 'progress', handled: recorder.count, distinct: recorder.distinct }),
            PROGRESS_EVERY_MS,
          );
        } else if (message.type === 'stop') {
          clearInterval(progress);
          // CPU from `go` until the parent saw the work finished: boot and shutdown left out.
          const cpu = process.cpuUsage(cpuAtGo);
          await worker.stop();
          await send({
            type: 'result',
            startedAt,
            seqs: Array.from(recorder.seqs.subarray(0, recorder.count)),
            times: Array.from(recorder.times.subarray(0, recorder.count)),
            // Peak resident set size of this process over its whole life, in KiB.
            maxRssKb: process.resourceUsage().maxRSS,
            cpuMs: (cpu.user + cpu.system) / 1000,
            unhandledRejections,
          });
          process.exit(0);
        }
      } catch (error) {
        await send({ type: 'failed', error: String(error?.stack ?? error) });
        process.exit(1);
      }
    });
    await send({ type: 'ready' });
  } catch (error) {
    await send({ type: 'failed', error: String(error?.stack ?? error) });
    process.exit(1);
  }
}
