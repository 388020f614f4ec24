import type { OutboundMessage } from '../../lib/types/messages';
import type { PublishBatchResult, Publisher } from '../../lib/types/outbox';

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

type BatchBehaviour = (
  messages: readonly OutboundMessage[],
  signal: AbortSignal,
) => Promise<PublishBatchResult | undefined> | PublishBatchResult | undefined;

/**
 * A publisher with `publishBatch`: records every call's messages and how many calls ran at once;
 * `batchBehaviour` decides what each call does (all published by default). A message counts as
 * delivered when its call resolved and did not reject it. Its `publish` (followers, traced
 * messages) is `RecordingPublisher`'s.
 */
export class RecordingBatchPublisher extends RecordingPublisher {
  readonly batches: OutboundMessage[][] = [];
  /** `Publisher.keepsBatchOrder`: set it to have a head's followers sent in calls too. */
  keepsBatchOrder = false;
  inFlight = 0;
  mostInFlight = 0;
  private batchWaiters: { count: number; resolve: () => void }[] = [];

  constructor(public batchBehaviour: BatchBehaviour = () => undefined) {
    super();
  }

  async publishBatch(messages: readonly OutboundMessage[], signal: AbortSignal): Promise<PublishBatchResult | undefined> {
    this.batches.push([...messages]);
    this.batchWaiters = this.batchWaiters.filter((waiter) => {
      if (this.batches.length < waiter.count) return true;
      waiter.resolve();
      return false;
    });
    this.inFlight++;
    this.mostInFlight = Math.max(this.mostInFlight, this.inFlight);
    try {
      const results = await this.batchBehaviour(messages, signal);
      for (const [i, message] of messages.entries()) if (results?.[i]?.status !== 'rejected') this.delivered.push(message);
      return results;
    } finally {
      this.inFlight--;
    }
  }

  /** Resolves once `count` publishBatch calls have started. */
  waitForBatches(count: number): Promise<void> {
    if (this.batches.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.batchWaiters.push({ count, resolve }));
  }
}
