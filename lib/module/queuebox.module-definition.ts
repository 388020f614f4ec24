import { randomUUID } from 'node:crypto';
import { ConfigurableModuleBuilder, type DynamicModule, Logger, type Provider } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import {
  DEFAULT_QUEUEBOX,
  QUEUEBOX_DATA_SOURCE,
  QUEUEBOX_DIALECT,
  QUEUEBOX_IDENTITY,
  QUEUEBOX_MODULE_OPTIONS,
  QUEUEBOX_RECEIVER_OPTIONS,
  QUEUEBOX_RESOLVED_OPTIONS,
  QUEUEBOX_TENANT_HANDLERS,
} from '../common/queuebox.constants';
import { createDialect } from '../core/create-dialect';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { InboxRelay } from '../inbox/inbox.relay';
import { InboxReceiver } from '../inbox/receiver/inbox-receiver';
import { createInboxReceiverController } from '../inbox/receiver/inbox-receiver.controller';
import { type InboxReceiverOptions, resolveReceiverOptions } from '../inbox/receiver/inbox-receiver.options';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import { QueueBoxInstance } from '../instance/queuebox.instance';
import { checkSchemaOnce } from '../migrations/schema-version';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { resolveOptions } from '../options/options.resolver';
import { queryTimeoutFor } from '../options/query-timeout';
import { OutboxPoller } from '../outbox/outbox.poller';
import { instantiatePublishers } from '../outbox/outbox-publishers';
import { PullWorker } from '../pull/pull.worker';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxIdentity } from '../types/instance';
import type { QueueBoxModuleOptions } from '../types/options';
import { WorkNotifications } from './queuebox.notifications';
import { getQueueBoxToken, QUEUEBOX_SERVICES } from './queuebox.tokens';

/**
 * What the default QueueBox exports besides its services: the workers, its instance and the
 * internal tokens that `queuebox/testing` reads (the testing helpers drive the default QueueBox).
 */
const DEFAULT_ONLY_EXPORTS = [
  QueueBoxInstance,
  OutboxPoller,
  InboxRelay,
  PullWorker,
  InboxSources,
  WorkNotifications,
  QUEUEBOX_RESOLVED_OPTIONS,
  QUEUEBOX_DATA_SOURCE,
  QUEUEBOX_DIALECT,
  QUEUEBOX_IDENTITY,
];

/** Options that shape the module itself, given beside the options in both `forRoot` and `forRootAsync`. */
export interface QueueBoxModuleExtras {
  /**
   * The QueueBox's name, for an application with several (one per database, or per module of a
   * modular monolith): its services are injected with `@InjectOutbox(name)` and the other
   * `Inject...(name)` decorators (or `getOutboxServiceToken(name)`), its handlers say
   * `@PullHandler(source, { queuebox: name })`, its metrics carry `queuebox="<name>"`. Default
   * `default`: the one QueueBox whose services are injected by their class.
   */
  name?: string;
  /**
   * The DataSource: the name of a TypeORM DataSource (`TypeOrmModule.forRoot({ name })`), or a
   * `DataSource` object. Default: the default DataSource.
   */
  dataSource?: string | DataSource;
  /** Enables the HTTP receiver (`POST <path>/:source`). Off by default. */
  receiver?: InboxReceiverOptions;
}

/** A QueueBox name: what tokens, metric labels and the instances table carry. */
const QUEUEBOX_NAME = /^[A-Za-z0-9_.-]{1,63}$/;

function queueBoxName(name: unknown): string {
  if (name === undefined) return DEFAULT_QUEUEBOX;
  if (typeof name !== 'string' || !QUEUEBOX_NAME.test(name)) throw new QueueBoxConfigError('name', messages.queueBoxNameInvalid(name));
  return name;
}

function receiverParts(receiver: InboxReceiverOptions | undefined): Pick<DynamicModule, 'controllers' | 'providers'> {
  if (receiver === undefined) return { controllers: [], providers: [] };
  const options = resolveReceiverOptions(receiver);
  return {
    controllers: [createInboxReceiverController(options)],
    providers: [{ provide: QUEUEBOX_RECEIVER_OPTIONS, useValue: options }, InboxReceiver],
  };
}

function dataSourceProvider(dataSource: string | DataSource | undefined): Provider {
  if (typeof dataSource === 'object' && dataSource !== null) return { provide: QUEUEBOX_DATA_SOURCE, useValue: dataSource };
  return {
    provide: QUEUEBOX_DATA_SOURCE,
    inject: [{ token: getDataSourceToken(dataSource), optional: true }],
    useFactory: (found?: DataSource) => {
      if (!found) throw new QueueBoxConfigError('dataSource', messages.dataSourceMissing(dataSource));
      return found;
    },
  };
}

/** Who this QueueBox is: its name, and in the instances table a new id at every start. */
function instanceProvider(name: string, dataSource: string | DataSource | undefined): Provider {
  return {
    provide: QUEUEBOX_IDENTITY,
    inject: [{ token: QUEUEBOX_TENANT_HANDLERS, optional: true }],
    useFactory: (tenantHandlers?: unknown): QueueBoxIdentity => ({
      id: randomUUID(),
      name,
      // A DataSource object has no name of its own worth showing: the QueueBox's name stands for it.
      dataSource: typeof dataSource === 'string' ? dataSource : dataSource ? name : 'default',
      tenant: tenantHandlers !== undefined,
    }),
  };
}

/**
 * What a QueueBox exports to the application (the module is global): each service under the token
 * made of its name (`getQueueBoxToken`), and the default QueueBox's also by class, as before names
 * existed; two QueueBoxes never answer one class injection.
 */
function exportsOf(name: string): Pick<DynamicModule, 'providers' | 'exports'> {
  const providers = QUEUEBOX_SERVICES.map(([service]) => ({ provide: getQueueBoxToken(service, name), useExisting: service }));
  const tokens = providers.map((provider) => provider.provide);
  if (name !== DEFAULT_QUEUEBOX) return { providers, exports: tokens };
  return { providers, exports: [...tokens, ...QUEUEBOX_SERVICES.map(([service]) => service), ...DEFAULT_ONLY_EXPORTS] };
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
    inject: [QUEUEBOX_DATA_SOURCE, QUEUEBOX_RESOLVED_OPTIONS, QUEUEBOX_IDENTITY],
    useFactory: async (dataSource: DataSource, options: ResolvedQueueBoxOptions, instance: QueueBoxIdentity) => {
      const dialect = createDialect(dataSource, options.tables, { queryTimeoutMs: queryTimeoutFor(options), instance }, instance.name);
      // As early as can be, so a bad schema fails start-up before anything else runs; a DataSource
      // initialized later is checked by the instance before it registers.
      if (dataSource.isInitialized) await checkSchemaOnce(dataSource, options, dialect, schemaLogger);
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
  .setExtras<QueueBoxModuleExtras>({ name: undefined, dataSource: undefined, receiver: undefined }, (definition, extras) => {
    const name = queueBoxName(extras.name);
    const receiver = receiverParts(extras.receiver);
    const exported = exportsOf(name);
    return {
      ...definition,
      global: true,
      controllers: receiver.controllers,
      providers: [
        // `extras` is Nest's spread of forRoot's options (extras and options alike): it keeps an own `__proto__`.
        ...keepOwnProtoKey(definition.providers ?? [], extras),
        dataSourceProvider(extras.dataSource),
        instanceProvider(name, extras.dataSource),
        ...coreProviders,
        ...(receiver.providers ?? []),
        ...(exported.providers ?? []),
      ],
      exports: [...(definition.exports ?? []), ...(exported.exports ?? [])],
    };
  })
  .build();
