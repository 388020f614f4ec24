// QueueBox worker process: a Nest application context with TypeORM and QueueBoxModule, whose
// outbox worker publishes through a no-op Publisher that only records the message.
import { createQueueBoxApp } from './queuebox-lib.mjs';
import { serveWorker } from './worker-common.mjs';

serveWorker(async (config, record) => {
  const publisher = {
    async publish(message) {
      record(message.payload);
    },
  };
  const boot = (workers) =>
    createQueueBoxApp({ url: config.url, poolSize: config.poolSize, options: { workers, outbox: { publisher, ...config.options } } });

  // The application is booted on `go` with the outbox worker on, as an application runs it: the
  // poller and its LISTEN connection start at bootstrap (with `workers: false` and a hand-started
  // poller, nothing would listen). So that this boot costs what it costs in a running process, and
  // not module loading and a cold JIT, the same application is booted once with no worker before
  // `ready`, and closed.
  const warmUp = await boot(false);
  await warmUp.app.close();

  let app;
  return {
    async start() {
      ({ app } = await boot({ outbox: true, relay: false, pull: false }));
    },
    // app.close() stops the poller (it waits for in-flight publishes), then closes TypeORM.
    stop: () => app?.close(),
  };
});
