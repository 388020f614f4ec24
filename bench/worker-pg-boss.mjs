// pg-boss process: one work() call on one queue with `localConcurrency` workers (pg-boss 12),
// each fetching a batch and handing it to the handler.
import { PgBoss } from 'pg-boss';
import { serveWorker } from './worker-common.mjs';

const MAX_LOGGED_ERRORS = 5;

serveWorker(async (config, record) => {
  const { queue, work } = config.options;
  // Defaults otherwise (maintenance and supervision on), as an application runs it; LISTEN/NOTIFY
  // on, so the queue's `notify` wakes the workers.
  const boss = new PgBoss({ connectionString: config.url, max: config.poolSize, useListenNotify: true });
  let errors = 0;
  boss.on('error', (error) => {
    if (++errors <= MAX_LOGGED_ERRORS) console.error(`[pg-boss] ${error.message}`);
  });
  await boss.start();
  return {
    async start() {
      await boss.work(queue, work, async (jobs) => {
        for (const job of jobs) record(job.data);
      });
    },
    async stop() {
      await boss.stop({ graceful: true, wait: true, timeout: 5000 });
    },
  };
});
