import { Inject, Injectable, Logger, type OnModuleInit, Optional } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { DEFAULT_QUEUEBOX, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS, QUEUEBOX_TENANT_HANDLERS } from '../common/queuebox.constants';
import { QueueBoxRegistry } from '../core/queuebox.registry';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import { isSourceName } from '../options/options.checks';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { resolvePullHandler } from '../options/options.resolver';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxIdentity } from '../types/instance';
import type { InboxMessage } from '../types/messages';
import { PULL_HANDLER_METADATA, type PullBatchContext, type PullContext, type PullHandlerMetadata } from './pull-handler.decorator';

/** A discovered `@PullHandler` with its options resolved. */
export interface PullHandlerDefinition {
  source: string;
  /** `ClassName.method`, for messages. */
  name: string;
  /** Called with one message and a `PullContext`, or, with `batch` set, with an array and a `PullBatchContext`. */
  handle: (message: InboxMessage | InboxMessage[], context: PullContext | PullBatchContext) => unknown;
  /** Most messages per call of the batch form; undefined for one message per call. */
  batch?: number;
  leaseMs: number;
  concurrency: number;
  /** Longest time one call may take (`handlerTimeout`). */
  handlerTimeoutMs: number;
  maxAttempts: number;
  backoff: (attempt: number, error: unknown, message: InboxMessage) => number;
  retryIf: (error: unknown, attempt: number, message: InboxMessage) => boolean;
}

/**
 * Finds this QueueBox's `@PullHandler` methods at start-up (collected in `onModuleInit`, as
 * `@nestjs/schedule` does) and registers their sources as consumed: those whose `queuebox` names
 * it (`default` unless given), or, in a tenant, those marked `tenants: true`, found among the
 * application's providers. Two handlers of one source, a source that also has a relay route, or a
 * handler naming a QueueBox the application does not have fail start-up naming them.
 */
@Injectable()
export class PullHandlerExplorer implements OnModuleInit {
  private readonly logger = new Logger('QueueBox:Options');
  private readonly found = new Map<string, PullHandlerDefinition>();
  private explored = false;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly sources: InboxSources,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_IDENTITY) private readonly instance: QueueBoxIdentity,
    private readonly registry: QueueBoxRegistry,
    @Optional() @Inject(QUEUEBOX_TENANT_HANDLERS) private readonly tenantHandlers?: Pick<DiscoveryService, 'getProviders'>,
  ) {}

  /** The handlers found, one per source (found at the first read, if that comes before `onModuleInit`). */
  get handlers(): PullHandlerDefinition[] {
    this.onModuleInit();
    return [...this.found.values()];
  }

  onModuleInit(): void {
    // Once: other providers read the handlers in their own onModuleInit, in no set order.
    if (this.explored) return;
    this.explored = true;
    for (const wrapper of (this.tenantHandlers ?? this.discovery).getProviders()) {
      const { instance } = wrapper;
      if (!instance || typeof instance !== 'object') continue;
      const prototype = Object.getPrototypeOf(instance);
      for (const method of this.scanner.getAllMethodNames(prototype)) {
        const metadata = this.reflector.get<PullHandlerMetadata | undefined>(PULL_HANDLER_METADATA, prototype[method]);
        const name = `${instance.constructor.name}.${method}`;
        if (metadata && this.isMine(name, metadata))
          this.register(name, metadata, (message, context) => instance[method](message, context));
      }
    }
  }

  /** Whether this QueueBox runs the handler; a handler naming no QueueBox of the application fails start-up. */
  private isMine(name: string, { source, options }: PullHandlerMetadata): boolean {
    const tenants = typeof options === 'object' && options !== null && options.tenants === true;
    if (this.instance.tenant) return tenants;
    if (tenants) return false;
    const queuebox = typeof options === 'object' && options !== null ? (options.queuebox ?? DEFAULT_QUEUEBOX) : DEFAULT_QUEUEBOX;
    if (!this.registry.find(queuebox)) {
      throw new QueueBoxConfigError(
        `@PullHandler(${JSON.stringify(source)}) on ${name}`,
        messages.pullHandlerQueueBoxUnknown(String(queuebox), this.registry.names()),
      );
    }
    return queuebox === this.instance.name;
  }

  private register(name: string, metadata: PullHandlerMetadata, handle: PullHandlerDefinition['handle']): void {
    const { source } = metadata;
    const where = `@PullHandler(${JSON.stringify(source)}) on ${name}`;
    if (!isSourceName(source)) throw new QueueBoxConfigError(where, messages.sourceNameInvalid(source));
    const existing = this.found.get(source);
    if (existing) throw new QueueBoxConfigError(where, messages.pullHandlerTwice(source, existing.name, name));
    if (Object.hasOwn(this.options.inbox.relay.routes, source))
      throw new QueueBoxConfigError(where, messages.pullHandlerAndRoute(source, name));
    const deprecations: string[] = [];
    this.found.set(source, { source, name, handle, ...resolvePullHandler(where, metadata.options, this.options.pull, deprecations) });
    for (const line of deprecations) this.logger.warn(line);
    this.sources.addPullSource(source);
  }
}
