// Inbox runtime: which inbox sources have a consumer (the relay's routes, pull handlers,
// pull.sources), and the wake-up when one receives a message.
import { Inject, Injectable } from '@nestjs/common';
import { QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';

/**
 * Which inbox sources have a consumer: a relay route or `pull.sources` (from the options), or a
 * `@PullHandler` (registered at start-up). Known whether or not this process runs the workers,
 * so a web replica accepts exactly what the worker replicas consume.
 */
@Injectable()
export class InboxSources {
  private readonly pull = new Set<string>();
  private readonly listeners: ((source: string) => void)[] = [];

  constructor(@Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions) {}

  /** Sources forwarded by the inbox relay. */
  get relaySources(): string[] {
    return Object.keys(this.options.inbox.relay.routes);
  }

  /** Registers a source consumed by a pull handler. */
  addPullSource(source: string): void {
    this.pull.add(source);
  }

  isConsumed(source: string): boolean {
    return Object.hasOwn(this.options.inbox.relay.routes, source) || this.pull.has(source) || this.options.pull.sources.includes(source);
  }

  /** Every consumed source known here. */
  consumedSources(): string[] {
    return [...new Set([...this.relaySources, ...this.pull, ...this.options.pull.sources])];
  }

  /** Tells the worker of `source` that a message arrived, so it claims now instead of after its sleep. */
  notifyReceived(source: string): void {
    for (const listener of this.listeners) listener(source);
  }

  /** Subscribes to `notifyReceived`. */
  onReceived(listener: (source: string) => void): void {
    this.listeners.push(listener);
  }
}
