import 'reflect-metadata';
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { HttpPublisher } from '../../lib/publishers/http.publisher';
import { QueueBoxTesting, RecordingPublisher } from '../../lib/testing';
import { describeWithDatabase } from '../support/database';

@Injectable()
class Orders {
  constructor(
    private readonly dataSource: DataSource,
    private readonly outbox: OutboxService,
  ) {}
  place(id: string) {
    return this.dataSource.transaction((manager) => this.outbox.enqueue(manager, { destination: 'billing', key: id, payload: { id } }));
  }
}

/** The app as production runs it: background workers on, an HTTP publisher to a host that does not exist. */
function appModule(url: string, async: boolean) {
  const production = { outbox: { publisher: new HttpPublisher({ destinations: { billing: 'http://billing.invalid/events' } }) } };
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, logging: false }),
      async ? QueueBoxModule.forRootAsync({ useFactory: async () => production }) : QueueBoxModule.forRoot(production),
    ],
    providers: [Orders],
  })
  class AppModule {}
  return AppModule;
}

describeWithDatabase('QueueBoxTesting.overrideOptions: a whole app under Test.createTestingModule', (db) => {
  for (const async of [false, true]) {
    it(`replaces the options of ${async ? 'forRootAsync' : 'forRoot'} (workers off, recording publisher)`, async () => {
      const publisher = new RecordingPublisher();
      const moduleRef = await QueueBoxTesting.overrideOptions(Test.createTestingModule({ imports: [appModule(db.url, async)] }), {
        workers: false,
        outbox: { publisher },
      }).compile();
      const app = await moduleRef.init();
      try {
        const { messageId } = await app.get(Orders).place(`order-${async}`);
        const { published, failed } = await QueueBoxTesting.from(app).drainOutbox();
        assert.deepEqual(failed, []);
        assert.deepEqual(
          published.map((message) => message.messageId),
          [messageId],
        );
        assert.deepEqual(
          publisher.messages.map((message) => message.messageId),
          [messageId],
        );
      } finally {
        await app.close();
      }
    });
  }
});
