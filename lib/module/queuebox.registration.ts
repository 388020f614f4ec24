import { Inject, Injectable, type OnApplicationShutdown, type Type } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import { type QueueBoxEntry, QueueBoxRegistry } from '../core/queuebox.registry';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import type { QueueBoxIdentity } from '../types/instance';

/**
 * Puts this QueueBox in the application's registry. In the constructor, on purpose: Nest creates
 * every provider of every module before it calls any `onModuleInit`, so by the first of those
 * every QueueBox is known (a `@PullHandler` naming one that is not can be refused), and two of one
 * name fail start-up before any worker runs. A tenant is put there by `QueueBoxTenants.attach`
 * once its context is up instead: the registry it shares is the running application's, whose
 * watchers (the Prometheus exporter) read an entry's providers as soon as it is added.
 */
@Injectable()
export class QueueBoxRegistration implements OnApplicationShutdown {
  readonly entry: QueueBoxEntry;

  constructor(
    private readonly registry: QueueBoxRegistry,
    @Inject(QUEUEBOX_IDENTITY) instance: QueueBoxIdentity,
    @Inject(QUEUEBOX_DATA_SOURCE) dataSource: DataSource,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) options: ResolvedQueueBoxOptions,
    moduleRef: ModuleRef,
  ) {
    this.entry = {
      name: instance.name,
      dataSource,
      dataSourceName: instance.dataSource,
      tables: options.tables,
      tenant: instance.tenant,
      get: <T>(type: Type<T>) => moduleRef.get(type, { strict: true }),
    };
    if (!instance.tenant) registry.add(this.entry);
  }

  onApplicationShutdown(): void {
    this.registry.remove(this.entry);
  }
}
