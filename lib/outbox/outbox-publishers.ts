import type { ModuleRef } from '@nestjs/core';
import { describeError } from '../common/errors';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import type { Publisher } from '../types/outbox';

/**
 * Instantiates the publisher classes of `outbox.publishers` (or `outbox.publisher`) with Nest's
 * dependency injection, in QueueBox's module: a class can inject anything visible there (global
 * providers, and the modules given in `forRootAsync({ imports })`). `moduleRef.create()` works the
 * same for `forRoot` and `forRootAsync`, where the classes are only known once the factory ran, so
 * they cannot be registered as providers of the dynamic module. Nothing is instantiated when this
 * process runs no outbox worker.
 */
export async function instantiatePublishers(options: ResolvedQueueBoxOptions, moduleRef: ModuleRef): Promise<ResolvedQueueBoxOptions> {
  const types = Object.entries(options.outbox.publisherTypes);
  if (types.length === 0 || !options.workers.outbox) return options;
  const publishers: Record<string, Publisher> = { ...options.outbox.publishers };
  for (const [name, type] of types) {
    try {
      publishers[name] = await moduleRef.create(type);
    } catch (error) {
      const option = options.outbox.publisherOptions[name];
      throw new QueueBoxConfigError(option, messages.publisherCreateFailed(option, type.name, describeError(error)));
    }
  }
  return { ...options, outbox: { ...options.outbox, publishers } };
}
