// The app both runner examples test (examples/vitest, examples/jest): an entity, its migration and
// a service that writes an order and its outbox message in one transaction, against a real
// PostgreSQL database the test creates for itself and drops afterwards.
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import { OutboxService, QueueBoxMigrations, QueueBoxModule } from 'queuebox';
import { QueueBoxTesting, RecordingPublisher } from 'queuebox/testing';
import { Column, DataSource, Entity, type MigrationInterface, PrimaryGeneratedColumn, type QueryRunner } from 'typeorm';

@Entity({ name: 'orders' })
export class Order {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ name: 'customer_id', type: 'text' })
  customerId!: string;

  @Column({ type: 'integer' })
  total!: number;
}

export class CreateOrders1764547200000 implements MigrationInterface {
  readonly name = 'CreateOrders1764547200000';
  async up(queryRunner: QueryRunner) {
    await queryRunner.query(
      'CREATE TABLE orders (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), customer_id text NOT NULL, total integer NOT NULL)',
    );
  }
  async down(queryRunner: QueryRunner) {
    await queryRunner.query('DROP TABLE orders');
  }
}

@Injectable()
export class OrdersService {
  // Injected by type: this needs the decorator metadata the runner's TypeScript transform emits.
  constructor(
    private readonly dataSource: DataSource,
    private readonly outbox: OutboxService,
  ) {}

  placeOrder(customerId: string, total: number) {
    return this.dataSource.transaction(async (manager) => {
      const order = await manager.save(Order, { customerId, total });
      await this.outbox.enqueue(manager, { destination: 'billing', key: customerId, payload: { orderId: order.id, total } });
      return order;
    });
  }
}

async function onServer(serverUrl: string, sql: string) {
  const client = new Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

export interface OrdersTestApp {
  orders: OrdersService;
  publisher: RecordingPublisher;
  qb: QueueBoxTesting;
  /** Closes the app and drops its database. */
  close(): Promise<void>;
}

/** The app with QueueBox's background workers off and a RecordingPublisher, on a new database. */
export async function startOrdersTestApp(): Promise<OrdersTestApp> {
  const serverUrl = process.env.QUEUEBOX_PG_URL ?? process.env.DATABASE_URL;
  if (!serverUrl) throw new Error('Set QUEUEBOX_PG_URL or DATABASE_URL (the npm run example:* scripts start an embedded PostgreSQL)');
  const databaseName = `qb_example_${randomBytes(6).toString('hex')}`;
  await onServer(serverUrl, `CREATE DATABASE ${databaseName}`);
  const url = new URL(serverUrl);
  url.pathname = `/${databaseName}`;
  const publisher = new RecordingPublisher();

  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: url.toString(),
        entities: [Order],
        migrations: [...QueueBoxMigrations, CreateOrders1764547200000],
        migrationsRun: true,
      }),
      QueueBoxModule.forRoot({ workers: false, outbox: { publisher } }),
    ],
    providers: [OrdersService],
  })
  class TestAppModule {}

  const moduleRef = await Test.createTestingModule({ imports: [TestAppModule] }).compile();
  const app = await moduleRef.init();
  return {
    orders: app.get(OrdersService),
    publisher,
    qb: QueueBoxTesting.from(app),
    async close() {
      await app.close();
      await onServer(serverUrl, `DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`);
    },
  };
}
