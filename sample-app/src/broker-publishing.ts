// Outbox messages published through @nestjs/microservices clients: "billing" over RabbitMQ, "audit"
// over NATS, each chosen by its destination (named publishers), consumed back by @EventPattern
// handlers of this same app. Run it with `npm run example:brokers` (needs RabbitMQ and NATS:
// AMQP_URL, default amqp://guest:guest@127.0.0.1:5672, and NATS_URL, default nats://127.0.0.1:4222;
// embedded PostgreSQL unless DATABASE_URL is set). docs/publishing.md explains each part.
import 'reflect-metadata';
import { Controller, Injectable, Logger, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientsModule, Ctx, EventPattern, NatsContext, Payload, RmqContext, Transport } from '@nestjs/microservices';
import { TypeOrmModule } from '@nestjs/typeorm';
import { ClientProxyPublisher, OutboxService, PermanentPublishError, QueueBoxMigrations, QueueBoxModule } from 'queuebox';
import { DataSource } from 'typeorm';
import { openDatabase } from './database';

const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const BILLING_QUEUE = 'queuebox_example_billing';
const TIMEOUT_MS = 15_000;

const logger = new Logger('BrokerExample');

/** The receiving side: what another service would run. */
@Injectable()
class Received {
  readonly ids = new Set<string>();
  private waiting?: { count: number; resolve: () => void };

  add(id: string): void {
    this.ids.add(id);
    if (this.waiting && this.ids.size >= this.waiting.count) this.waiting.resolve();
  }

  until(count: number): Promise<void> {
    if (this.ids.size >= count) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiting = { count, resolve };
    });
  }
}

@Controller()
class Consumers {
  constructor(private readonly received: Received) {}

  @EventPattern<string>('billing', Transport.RMQ)
  billing(@Payload() invoice: unknown, @Ctx() context: RmqContext): void {
    // The id is the AMQP message id and the X-Message-Id header: deduplicate on it.
    const { messageId, headers } = context.getMessage().properties;
    logger.log(`RabbitMQ billing: ${JSON.stringify(invoice)} id=${messageId} key=${headers?.['X-QueueBox-Key']}`);
    this.received.add(messageId);
  }

  @EventPattern<string>('audit', Transport.NATS)
  audit(@Payload() entry: unknown, @Ctx() context: NatsContext): void {
    const id = context.getHeaders()?.get('X-Message-Id') ?? '';
    logger.log(`NATS audit: ${JSON.stringify(entry)} id=${id}`);
    this.received.add(id);
  }
}

function appModule(databaseUrl: string) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: databaseUrl,
        migrations: [...QueueBoxMigrations],
        migrationsRun: true,
        logging: ['error'],
      }),
      // isGlobal: QueueBox instantiates the publisher classes in its own module, where the client tokens must be visible.
      ClientsModule.register({
        isGlobal: true,
        clients: [
          {
            name: 'BILLING_RMQ',
            transport: Transport.RMQ,
            options: { urls: [AMQP_URL], queue: BILLING_QUEUE, queueOptions: { durable: true } },
          },
          { name: 'AUDIT_NATS', transport: Transport.NATS, options: { servers: [NATS_URL] } },
        ],
      }),
      QueueBoxModule.forRoot({
        outbox: {
          // By default a message goes to the publisher named like its destination.
          publishers: {
            billing: ClientProxyPublisher.for('BILLING_RMQ'),
            audit: ClientProxyPublisher.for('AUDIT_NATS'),
          },
          pollIntervalMs: 100,
          publishTimeout: '5s',
          retry: {
            attempts: 8,
            backoff: { delay: '500ms', factor: 2, maxDelay: '1m' },
            retryIf: (error) => !(error instanceof PermanentPublishError),
          },
        },
      }),
    ],
    controllers: [Consumers],
    providers: [Received],
  })
  class BrokerExampleModule {}
  return BrokerExampleModule;
}

async function main(): Promise<void> {
  const database = await openDatabase();
  try {
    const app = await NestFactory.create(appModule(database.url), { abortOnError: false });
    app.connectMicroservice({
      transport: Transport.RMQ,
      options: { urls: [AMQP_URL], queue: BILLING_QUEUE, queueOptions: { durable: true } },
    });
    app.connectMicroservice({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
    try {
      await app.startAllMicroservices();
      await app.init();
      const outbox = app.get(OutboxService);
      const sent = await app.get(DataSource).transaction((manager) =>
        outbox.enqueueMany(manager, [
          { destination: 'billing', key: 'customer-7', payload: { invoice: 1001, totalCents: 4200 } },
          { destination: 'audit', payload: { action: 'invoice.created', invoice: 1001 } },
        ]),
      );
      const received = app.get(Received);
      const timeout = new Promise<never>((_, reject) =>
        setTimeout(
          () => reject(new Error(`not every message arrived within ${TIMEOUT_MS} ms; see the QueueBox lines above`)),
          TIMEOUT_MS,
        ).unref(),
      );
      await Promise.race([received.until(sent.length), timeout]);
      const missing = sent.filter((s) => !received.ids.has(s.messageId));
      if (missing.length > 0) throw new Error(`messages ${missing.map((m) => m.messageId).join(', ')} arrived with other ids`);
      logger.log(`Done: ${sent.length} messages published from the outbox and consumed with their X-Message-Id.`);
    } finally {
      await app.close();
    }
  } finally {
    await database.stop();
  }
}

main().catch((error: unknown) => {
  logger.error(error instanceof Error ? error.message : String(error));
  process.exitCode = 1;
});
