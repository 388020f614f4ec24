// The RSS floor: the stack QueueBox runs on (Nest + TypeORM + pg) booted with nothing of QueueBox,
// the way worker-queuebox.mjs boots its application (a warm-up boot and close before `ready`, the
// boot itself on `go`). Handles no message; its peak RSS is what the RSS target is measured above.
import { createStackApp } from './queuebox-lib.mjs';
import { serveWorker } from './worker-common.mjs';

serveWorker(async (config) => {
  const boot = () => createStackApp({ url: config.url, poolSize: config.poolSize });
  if (process.env.BENCH_QB_WARMUP !== '0') await (await boot()).app.close();
  let app;
  return {
    async start() {
      const stack = await boot();
      app = stack.app;
      // One query through TypeORM's pool, as an application's first request makes.
      await stack.dataSource.query('SELECT 1');
    },
    stop: () => app?.close(),
  };
});
