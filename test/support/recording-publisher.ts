import type { OutboundMessage } from '../../lib/types/messages';
import type { Publisher } from '../../lib/types/outbox';

type Behaviour = (message: OutboundMessage, signal: AbortSignal) => Promise<void> | void;

/** Records every publish call; `behaviour` decides what each call does (succeed by default). */
export class RecordingPublisher implements Publisher {
  readonly calls: { message: OutboundMessage; signal: AbortSignal }[] = [];
  readonly delivered: OutboundMessage[] = [];
  private waiters: { count: number; resolve: () => void }[] = [];

  constructor(public behaviour: Behaviour = () => undefined) {}

  async publish(message: OutboundMessage, signal: AbortSignal): Promise<void> {
    this.calls.push({ message, signal });
    this.notify();
    await this.behaviour(message, signal);
    this.delivered.push(message);
  }

  /** Resolves once `count` publish calls have started. */
  waitForCalls(count: number): Promise<void> {
    if (this.calls.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ count, resolve }));
  }

  private notify() {
    this.waiters = this.waiters.filter((waiter) => {
      if (this.calls.length < waiter.count) return true;
      waiter.resolve();
      return false;
    });
  }
}

/** A promise with its resolve function, to hold a publish open until the test releases it. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}
