// QueueBox worker process: a Nest application context with TypeORM and QueueBoxModule. W1-W4: the
// outbox worker publishes through a no-op Publisher that only records the message. W5
// (`config.options.inbox`): only the inbox relay runs, with a route that records the message and
// forwards it to the outbox, or only the pull worker, with a @PullHandler provider that records it.
import { createQueueBoxApp, loadQueueBox, pullBatchSize } from './queuebox-lib.mjs';
import { serveWorker } from './worker-common.mjs';

/**
 * BENCH_QB_PUBLISH_DELAY_MS: every publish call (one message, or one publishBatch call) waits that
 * long first, as a broker's round trip would (0, unset: none).
 */
const publishDelayMs = Number(process.env.BENCH_QB_PUBLISH_DELAY_MS ?? 0);
const roundTrip = () => new Promise((resolve) => setTimeout(resolve, publishDelayMs));

/** The app's options and providers for each run, and which workers run once it goes. */
function outboxSetup(config, record) {
  const publisher = {
    async publish(message) {
      if (publishDelayMs > 0) await roundTrip();
      record(message.payload);
    },
  };
  // BENCH_QB_PUBLISH_BATCH=1: the publisher has publishBatch too (issue 36), one call for the
  // messages claimed together, up to outbox.publishBatchSize (BENCH_QB_PUBLISH_BATCH_SIZE);
  // `ordered`: it also sets keepsBatchOrder, so a head's followers go in calls too.
  const batchMode = process.env.BENCH_QB_PUBLISH_BATCH;
  if (batchMode === '1' || batchMode === 'ordered') {
    publisher.publishBatch = async (messages) => {
      if (publishDelayMs > 0) await roundTrip();
      for (const message of messages) record(message.payload);
    };
    publisher.keepsBatchOrder = batchMode === 'ordered';
  }
  return { options: { outbox: { publisher, ...config.options } }, providers: [], workers: { outbox: true, relay: false, pull: false } };
}

function inboxSetup(config, record) {
  const { consumer, source, destination, concurrency, ...worker } = config.options.inbox;
  if (consumer === 'relay') {
    // The route runs under the row's claim, before the forward transaction: it records first thing,
    // as every handler of the benchmark does. The outbox worker does not run, so no publisher is needed.
    const route = (message) => {
      record(message.payload);
      return { destination, key: message.aggregateId, payload: message.payload };
    };
    return {
      options: { inbox: { relay: { routes: { [source]: route }, concurrency, ...worker } } },
      providers: [],
      workers: { outbox: false, relay: true, pull: false },
    };
  }
  // A provider class with a @PullHandler method, decorated by hand (plain .mjs has no decorators).
  // The batch form (`batch`: several messages, one transaction) when this QueueBox offers it;
  // BENCH_PULL_BATCH=1 measures the one-message form.
  const { queuebox, nestCommon } = loadQueueBox();
  const batch = pullBatchSize();
  class BenchPullConsumer {
    // A no-op inside the handler's transaction: QueueBox completes the row(s) in it and commits.
    async handle(messageOrMessages) {
      if (Array.isArray(messageOrMessages)) for (const message of messageOrMessages) record(message.payload);
      else record(messageOrMessages.payload);
    }
  }
  const proto = BenchPullConsumer.prototype;
  const handlerOptions = batch > 1 ? { concurrency, batch } : { concurrency };
  queuebox.PullHandler(source, handlerOptions)(proto, 'handle', Object.getOwnPropertyDescriptor(proto, 'handle'));
  nestCommon.Injectable()(BenchPullConsumer);
  return { options: { pull: { ...worker } }, providers: [BenchPullConsumer], workers: { outbox: false, relay: false, pull: true } };
}

serveWorker(async (config, record) => {
  const setup = config.options.inbox ? inboxSetup(config, record) : outboxSetup(config, record);
  const boot = (workers) =>
    createQueueBoxApp({ url: config.url, poolSize: config.poolSize, options: { workers, ...setup.options }, providers: setup.providers });

  // The application is booted on `go` with its worker on, as an application runs it: the worker
  // and its LISTEN connection start at bootstrap (with `workers: false` and a hand-started
  // poller, nothing would listen). So that this boot costs what it costs in a running process, and
  // not module loading and a cold JIT, the same application is booted once with no worker before
  // `ready`, and closed.
  // BENCH_QB_WARMUP=0 skips it (memory experiments).
  if (process.env.BENCH_QB_WARMUP !== '0') {
    const warmUp = await boot(false);
    await warmUp.app.close();
  }

  let app;
  return {
    async start() {
      ({ app } = await boot(setup.workers));
    },
    // app.close() stops the workers (they wait for work in flight), then closes TypeORM.
    stop: () => app?.close(),
  };
});
