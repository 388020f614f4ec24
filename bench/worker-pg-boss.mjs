// pg-boss process: `concurrency` work() loops on one queue (v10 has no per-worker concurrency
// option: each work() call is one polling loop that fetches a batch and hands it to the handler).
import PgBoss from 'pg-boss';
import { serveWorker } from './worker-common.mjs';

const MAX_LOGGED_ERRORS = 5;

serveWorker(async (config, record) => {
  const { queue, loops, batchSize, pollingIntervalSeconds } = config.options;
  // Defaults otherwise (maintenance and cron supervision on), as an application runs it.
  const boss = new PgBoss({ connectionString: config.url, max: config.poolSize });
  let errors = 0;
  boss.on('error', (error) => {
    if (++errors <= MAX_LOGGED_ERRORS) console.error(`[pg-boss] ${error.message}`);
  });
  await boss.start();
  return {
    async start() {
      for (let i = 0; i < loops; i++) {
        await boss.work(queue, { batchSize, pollingIntervalSeconds }, async (jobs) => {
          for (const job of jobs) record(job.data);
        });
      }
    },
    async stop() {
      await boss.stop({ graceful: true, wait: true, timeout: 5000 });
    },
  };
});
