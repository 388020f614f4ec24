import 'reflect-metadata';
import { subscribe } from 'node:diagnostics_channel';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConsoleLogger, Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module';
import { BillingLedger } from './billing/billing-ledger';
import { openDatabase } from './database';
import { OrdersService } from './orders/orders.service';
import { SampleOrdersJob } from './orders/sample-orders.job';
import { Shutdown } from './shutdown';

const MESSAGES_TIMEOUT_MS = 15_000;
// Were there a message for the rolled-back order, it would have had several polls (200 ms each) to turn up.
const STRAY_MESSAGE_WAIT_MS = 1_000;
const SHUTDOWN_SIGNALS = ['SIGINT', 'SIGTERM'] as const;
// `npm start -- --keep-running` or SAMPLE_KEEP_RUNNING=1: stay up after the checks, so the printed
// dashboard URL can be opened; Ctrl-C then shuts down as usual.
const KEEP_RUNNING = process.argv.includes('--keep-running') || process.env.SAMPLE_KEEP_RUNNING === '1';

// Nest colours its log whenever NO_COLOR is unset; colour only a terminal, so piped output stays plain text.
const consoleLogger = new ConsoleLogger({ colors: !process.env.NO_COLOR && process.stdout.isTTY === true });
Logger.overrideLogger(consoleLogger);
const logger = new Logger('SampleApp');
const shutdown = new Shutdown(SHUTDOWN_SIGNALS);

// Any code can follow QueueBox's outcomes on node:diagnostics_channel (docs/events.md).
let publishedEvents = 0;
subscribe('queuebox:published', () => {
  publishedEvents++;
});

/** A check of the sample itself failed; its message says all, no stack trace needed. */
class SampleCheckFailed extends Error {}

async function main(): Promise<void> {
  const { url } = await shutdown.unlessBegun(shutdown.closeDatabase(openDatabase()));
  const app = await shutdown.unlessBegun(
    shutdown.closeApp(NestFactory.create(AppModule.forRoot(url), { abortOnError: false, logger: consoleLogger })),
  );
  // Nest closes the app on these signals: QueueBox stops claiming and drains, then TypeORM disconnects.
  app.enableShutdownHooks([...SHUTDOWN_SIGNALS]);
  // Port 0: any free port; the outbox publisher looks the real one up when it publishes.
  await shutdown.unlessBegun(app.listen(Number(process.env.PORT ?? 0), '127.0.0.1'));
  logger.log(`Listening on ${await app.getUrl()}; billing receives messages at POST /billing/events`);
  logger.log(`Dashboard: ${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/queuebox/ (from this machine; docs/dashboard.md)`);

  const { committed, declined } = await shutdown.unlessBegun(app.get(SampleOrdersJob).run());
  const ledger = app.get(BillingLedger);
  logger.log(`Waiting for billing to receive ${committed.length} messages...`);
  const arrived = ledger.waitForOrders(committed.map((order) => order.id));
  await shutdown.unlessBegun(
    withTimeout(arrived, MESSAGES_TIMEOUT_MS, () => {
      const received = committed.filter((order) => ledger.hasOrder(order.id)).length;
      return `Billing received messages for only ${received} of ${committed.length} committed orders within ${MESSAGES_TIMEOUT_MS / 1000} s; the QueueBox lines above say why.`;
    }),
  );
  await shutdown.unlessBegun(sleep(STRAY_MESSAGE_WAIT_MS));

  const orders = app.get(OrdersService);
  logger.log(`Summary: published ${committed.length} messages, one per committed order, and billing received each of them.`);
  for (const order of declined) {
    if (ledger.hasOrder(order.id) || (await shutdown.unlessBegun(orders.exists(order.id)))) {
      throw new SampleCheckFailed(`Rolled-back order ${order.id} left a trace: the outbox message must not outlive its transaction.`);
    }
    logger.log(`Summary: order ${order.id} (${order.customerId}) was rolled back: no orders row, and its message never arrived.`);
  }
  await shutdown.unlessBegun(reportOperations(await app.getUrl(), committed.length));
  if (KEEP_RUNNING) {
    logger.log(
      `Keeping running (--keep-running): open ${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/queuebox/ in a browser; Ctrl-C stops the app and the database.`,
    );
    return; // the listening server keeps the process up until a signal begins the shutdown
  }
  await shutdown.begin(0, 'all messages arrived');
}

/** What an operator would see now: the readiness probe, the Prometheus counter, the events. */
async function reportOperations(baseUrl: string, expected: number): Promise<void> {
  const url = baseUrl.replace('[::1]', '127.0.0.1');
  const ready = await fetch(`${url}/health/ready`);
  const health = (await ready.json()) as { status: string };
  if (ready.status !== 200 || health.status !== 'ok')
    throw new SampleCheckFailed(`GET /health/ready answered ${ready.status} ${JSON.stringify(health)}`);
  const overview = await fetch(`${url}/queuebox/api/default/overview`);
  const rows = ((await overview.json()) as { rows?: { name: string; finishedPerMinute: number[] }[] }).rows ?? [];
  const sentNow = rows.find((r) => r.name === 'billing')?.finishedPerMinute.reduce((a, b) => a + b, 0) ?? 0;
  if (overview.status !== 200 || sentNow < expected)
    throw new SampleCheckFailed(
      `GET /queuebox/api/default/overview answered ${overview.status} with ${sentNow} billing messages sent in the last hour`,
    );
  const metrics = await (await fetch(`${url}/metrics`)).text();
  const series = 'queuebox_outbox_messages_published_total{destination="billing",queuebox="default"}';
  const published = Number(
    metrics
      .split('\n')
      .find((line) => line.startsWith(`${series} `))
      ?.split(' ')[1] ?? 0,
  );
  if (published < expected || publishedEvents < expected) {
    throw new SampleCheckFailed(
      `Expected ${expected} publishes in /metrics and on queuebox:published, saw ${published} and ${publishedEvents}.`,
    );
  }
  logger.log(
    `Summary: GET /health/ready is up; GET /metrics has ${series} ${published}; queuebox:published fired ${publishedEvents} times; the dashboard counts ${sentNow} billing messages sent in the last hour.`,
  );
}

async function withTimeout<T>(promise: Promise<T>, ms: number, describeTimeout: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    // Unref'd: a wait abandoned by a shutdown must not hold the process open.
    timer = setTimeout(() => reject(new SampleCheckFailed(describeTimeout())), ms).unref();
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

main().catch((error: unknown) => {
  // Errors after a shutdown began are its consequences (the app closing under a running job), not news.
  if (shutdown.hasBegun) return;
  logger.error(error instanceof SampleCheckFailed ? error.message : error);
  void shutdown.begin(1, 'the sample failed');
});
