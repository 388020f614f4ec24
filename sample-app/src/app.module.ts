import { type DynamicModule, Module } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { HttpPublisher, QueueBoxMigrations, QueueBoxModule } from 'queuebox';
import { BillingModule } from './billing/billing.module';
import { OpsModule } from './ops/ops.module';
import { CreateOrdersTable1764547200000 } from './orders/create-orders-table.migration';
import { Order } from './orders/order.entity';
import { OrdersModule } from './orders/orders.module';
import { ownUrl } from './own-url';

@Module({})
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest dynamic module is a class with a static factory.
export class AppModule {
  static forRoot(databaseUrl: string): DynamicModule {
    return {
      module: AppModule,
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: databaseUrl,
          entities: [Order],
          // Every QueueBox migration, then the app's own (TypeORM runs them in timestamp order).
          migrations: [...QueueBoxMigrations, CreateOrdersTable1764547200000],
          // Applies whatever is new at startup; TypeORM's migrations table makes a second run a no-op.
          migrationsRun: true,
          // Prints which migrations ran; errors of failed queries, too.
          logging: ['error', 'schema'],
          // Fail within seconds on a wrong DATABASE_URL (the default tries for about 30 s).
          retryAttempts: 2,
          retryDelay: 1000,
        }),
        QueueBoxModule.forRootAsync({
          inject: [HttpAdapterHost],
          useFactory: (adapterHost: HttpAdapterHost) => ({
            outbox: {
              // Billing is served by this same app, on a port known only once listen() has bound it (port
              // 0 picks a free one), so the URL is looked up at publish time.
              publisher: new HttpPublisher({
                destinations: (destination) => {
                  if (destination !== 'billing') return undefined; // no URL: the message is dead-lettered
                  const base = ownUrl(adapterHost);
                  // The poller starts at init, a moment before listen(). A message left pending by an earlier
                  // run may be claimed in between: throwing (unlike returning undefined) makes that a retry.
                  if (!base) throw new Error('billing is not listening yet');
                  return `${base}/billing/events`;
                },
              }),
              // Short, so the sample finishes quickly; the default is 1000 ms.
              pollIntervalMs: 200,
            },
          }),
        }),
        OrdersModule,
        BillingModule,
        OpsModule,
      ],
    };
  }
}
