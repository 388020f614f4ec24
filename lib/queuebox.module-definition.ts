import { randomUUID } from 'node:crypto';
import { ConfigurableModuleBuilder, type DynamicModule, Logger, type Provider } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { QueueBoxConfigError } from './errors/queuebox.errors';
import { InboxReceiver } from './inbox/receiver/inbox-receiver';
import { createInboxReceiverController } from './inbox/receiver/inbox-receiver.controller';
import { type InboxReceiverOptions, resolveReceiverOptions } from './inbox/receiver/inbox-receiver.options';
import { checkSchemaVersion } from './migrations/schema-version';
import type { ResolvedQueueBoxOptions } from './options/options.resolved';
import { resolveOptions } from './options/options.resolver';
import { queryTimeoutFor } from './options/query-timeout';
import { instantiatePublishers } from './outbox/outbox-publishers';
import {
  QUEUEBOX_DATA_SOURCE,
  QUEUEBOX_DIALECT,
  QUEUEBOX_INSTANCE,
  QUEUEBOX_MODULE_OPTIONS,
  QUEUEBOX_RECEIVER_OPTIONS,
  QUEUEBOX_RESOLVED_OPTIONS,
} from './queuebox.constants';
import { createDialect } from './queuebox.dialect';
import type { QueueBoxInstanceName } from './queuebox.instance';
import { messages } from './queuebox.messages';
import type { QueueBoxModuleOptions } from './types/options';

/** Options that shape the module itself, given beside the options in both `forRoot` and `forRootAsync`. */
export interface QueueBoxModuleExtras {
  /** Name of the TypeORM DataSource (`TypeOrmModule.forRoot({ name })`). Default: the default DataSource. */
  dataSource?: string;
  /** Enables the HTTP receiver (`POST <path>/:source`). Off by default. */
  receiver?: InboxReceiverOptions;
}

function receiverParts(receiver: InboxReceiverOptions | undefined): Pick<DynamicModule, 'controllers' | 'providers'> {
  if (receiver === undefined) return { controllers: [], providers: [] };
  const options = resolveReceiverOptions(receiver);
  return {
    controllers: [createInboxReceiverController(options)],
    providers: [{ provide: QUEUEBOX_RECEIVER_OPTIONS, useValue: options }, InboxReceiver],
  };
}

function dataSourceProvider(name: string | undefined): Provider {
  return {
    provide: QUEUEBOX_DATA_SOURCE,
    inject: [{ token: getDataSourceToken(name), optional: true }],
    useFactory: (dataSource?: DataSource) => {
      if (!dataSource) throw new QueueBoxConfigError('dataSource', messages.dataSourceMissing(name));
      return dataSource;
    },
  };
}

/** Who this module instance is in the instances table: a new id at every start. */
function instanceProvider(dataSourceName: string | undefined): Provider {
  return {
    provide: QUEUEBOX_INSTANCE,
    useFactory: (): QueueBoxInstanceName => ({ id: randomUUID(), dataSource: dataSourceName ?? 'default' }),
  };
}

/**
 * Nest hands `forRoot`'s options on as a key-by-key copy (`copy[key] = value`), in which an own
 * `__proto__` key (JSON.parse makes one) sets the copy's prototype instead: the key would vanish
 * unseen. Put it back as an own property of the options provider's value, so the option check
 * reports it as an unknown option like any other.
 */
function keepOwnProtoKey(providers: Provider[], given: object): Provider[] {
  const key = Object.getOwnPropertyDescriptor(given, '__proto__');
  if (!key) return providers;
  return providers.map((provider) => {
    if (typeof provider !== 'object' || provider === null || !('useValue' in provider) || provider.provide !== QUEUEBOX_MODULE_OPTIONS) {
      return provider;
    }
    const options = { ...(provider.useValue as object) };
    Object.defineProperty(options, '__proto__', { ...key, enumerable: true });
    return { ...provider, useValue: options };
  });
}

const schemaLogger = new Logger('QueueBox:Schema');
const optionsLogger = new Logger('QueueBox:Options');

const coreProviders: Provider[] = [
  {
    provide: QUEUEBOX_RESOLVED_OPTIONS,
    inject: [QUEUEBOX_MODULE_OPTIONS, ModuleRef],
    useFactory: (options: QueueBoxModuleOptions, moduleRef: ModuleRef) => {
      const resolved = resolveOptions(options);
      for (const line of resolved.deprecations) optionsLogger.warn(line);
      return instantiatePublishers(resolved, moduleRef);
    },
  },
  {
    provide: QUEUEBOX_DIALECT,
    inject: [QUEUEBOX_DATA_SOURCE, QUEUEBOX_RESOLVED_OPTIONS, QUEUEBOX_INSTANCE],
    useFactory: async (dataSource: DataSource, options: ResolvedQueueBoxOptions, instance: QueueBoxInstanceName) => {
      const dialect = createDialect(dataSource, options.tables, { queryTimeoutMs: queryTimeoutFor(options), instanceId: instance.id });
      if (dataSource.isInitialized) {
        // The recorded migrations first: a missing one is named as the migration to run, not as the table it creates.
        await checkSchemaVersion(dataSource, options, schemaLogger);
        await dialect.schemaCheck();
      }
      return dialect;
    },
  },
];

export const {
  ConfigurableModuleClass: QueueBoxConfigurableModule,
  OPTIONS_TYPE: QUEUEBOX_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: QUEUEBOX_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<QueueBoxModuleOptions>({ moduleName: 'QueueBox', optionsInjectionToken: QUEUEBOX_MODULE_OPTIONS })
  .setClassMethodName('forRoot')
  .setExtras<QueueBoxModuleExtras>({ dataSource: undefined, receiver: undefined }, (definition, extras) => {
    const receiver = receiverParts(extras.receiver);
    return {
      ...definition,
      global: true,
      controllers: receiver.controllers,
      providers: [
        // `extras` is Nest's spread of forRoot's options (extras and options alike): it keeps an own `__proto__`.
        ...keepOwnProtoKey(definition.providers ?? [], extras),
        dataSourceProvider(extras.dataSource),
        instanceProvider(extras.dataSource),
        ...coreProviders,
        ...(receiver.providers ?? []),
      ],
    };
  })
  .build();
