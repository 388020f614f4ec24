// graphile-worker process: `run()` with one no-op task, `bench`, that only records the job.
import { Logger, run } from 'graphile-worker';
import { serveWorker } from './worker-common.mjs';

// Errors and warnings only: the worker logs a line per job at info level.
const logger = new Logger((scope) => (level, message) => {
  if (level === 'error' || level === 'warning') console.error(`[graphile-worker ${scope.label ?? ''}] ${level}: ${message}`);
});

serveWorker(async (config, record) => {
  let runner;
  return {
    async start() {
      runner = await run({
        noHandleSignals: true,
        logger,
        taskList: {
          bench: async (payload) => {
            record(payload);
          },
        },
        parsedCronItems: [],
        preset: { worker: { connectionString: config.url, ...config.options } },
      });
    },
    async stop() {
      await runner?.stop();
    },
  };
});
