import type { ModuleRef } from '@nestjs/core';
import { describeError } from '../common/errors';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import type { ResolvedOutboxOptions, ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import type { Publisher } from '../types/outbox';

/**
 * The destinations the options name, known before any message is enqueued: the keys of
 * `outbox.rateLimits`, what each publisher reports (`Publisher.destinations()`), and the
 * publishers' names when several route by destination (no `outbox.route` of one's own). What
 * the metrics show from start-up.
 */
export function configuredDestinations(outbox: ResolvedOutboxOptions): string[] {
  const names = new Set(Object.keys(outbox.rateLimits));
  const publishers = Object.entries(outbox.publishers);
  for (const [name, publisher] of publishers) {
    if (outbox.routedByName) names.add(name);
    for (const destination of publisher.destinations?.() ?? []) names.add(destination);
  }
  return [...names].sort();
}

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
