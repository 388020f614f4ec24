import { after, before } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { createTestApp, type TestApp } from './app';
import type { TestDatabase } from './database';
import { HttpRecorder } from './http-recorder';
import type { WorkerProcess } from './processes';

/** What the chaos tests share: the producer, the destination the workers publish to, and the worker processes. */
export interface ChaosBench {
  /** An app on the test database that runs no worker: the test enqueues and administers through it. */
  producer: TestApp;
  dataSource: DataSource;
  /** The HTTP destination of the worker processes' publishes, at `publishUrl`. */
  recorder: HttpRecorder;
  publishUrl: string;
  /** The worker processes the test started (`startWorker`): those still running when the block ends are killed. */
  workers: WorkerProcess[];
}

/**
 * Registers the hooks of a chaos block on `db` (call it in the block's body): the producer and the
 * recorder start before its tests; after them every worker process still running is killed
 * (SIGKILL) and waited for, then the recorder stops and the producer closes. Its members are set
 * from the block's `before` hooks on (`workers` at once).
 */
export function useChaosBench(db: TestDatabase): ChaosBench {
  const bench = { workers: [] } as unknown as ChaosBench;
  before(async () => {
    bench.producer = await createTestApp(db.url, { workers: false });
    bench.dataSource = bench.producer.app.get(getDataSourceToken());
    bench.recorder = new HttpRecorder();
    bench.publishUrl = await bench.recorder.start();
  });
  after(async () => {
    for (const worker of bench.workers) worker.child.kill('SIGKILL');
    await Promise.all(bench.workers.map((worker) => worker.exited));
    await bench.recorder?.stop();
    await bench.producer?.app.close();
  });
  return bench;
}
