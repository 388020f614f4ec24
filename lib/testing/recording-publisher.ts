import { PermanentPublishError, PublishError } from '../errors/queuebox.errors';
import type { OutboundMessage } from '../types/messages';
import type { Publisher } from '../types/outbox';
import { testingMessages } from './testing.messages';

/** How a simulated failure fails: retryable by default, `permanent` dead-letters the message at once. */
export interface SimulatedFailure {
  /** Throw `PermanentPublishError` (dead-letter now) instead of `PublishError` (retry with backoff). */
  permanent?: boolean;
  /** Throw this error instead. */
  error?: Error;
}

/** One call of `publish()`, successful or not. */
export interface PublishAttempt {
  message: OutboundMessage;
  /** What the call threw; `undefined` when it succeeded. */
  error?: Error;
}

/**
 * A `Publisher` for tests: records every message it publishes, and fails on request.
 *
 * Failures are planned, not random: `failNext(n)` fails the next `n` calls, `failDestination(d)`
 * fails every call for `d` until `clear()` or `recoverDestination(d)`. A failure throws
 * `PublishError` (QueueBox retries with backoff) or, with `{ permanent: true }`,
 * `PermanentPublishError` (dead-lettered at once).
 *
 * @example
 * const publisher = new RecordingPublisher();
 * // QueueBoxModule.forRoot({ workers: false, outbox: { publisher } })
 * publisher.failNext(1);
 * await QueueBoxTesting.from(app).drainOutbox();
 * assert.deepEqual(publisher.for('billing').map((m) => m.payload), [{ orderId: 1 }]);
 */
export class RecordingPublisher implements Publisher {
  private readonly published: OutboundMessage[] = [];
  private readonly calls: PublishAttempt[] = [];
  private readonly nextFailures: SimulatedFailure[] = [];
  private readonly failingDestinations = new Map<string, SimulatedFailure>();

  /** Messages published successfully, in the order they were published. */
  get messages(): readonly OutboundMessage[] {
    return this.published;
  }

  /** Every call of `publish()`, failed ones included, in call order. */
  get attempts(): readonly PublishAttempt[] {
    return this.calls;
  }

  /** Messages published successfully to `destination`, in order. */
  for(destination: string): OutboundMessage[] {
    return this.published.filter((message) => message.destination === destination);
  }

  /** Payloads published successfully (to `destination`, or to any), in order. */
  payloads(destination?: string): unknown[] {
    return (destination === undefined ? this.published : this.for(destination)).map((message) => message.payload);
  }

  /** Fails the next `count` calls of `publish()` (whatever their destination). */
  failNext(count = 1, failure: SimulatedFailure = {}): this {
    for (let i = 0; i < count; i++) this.nextFailures.push(failure);
    return this;
  }

  /** Fails every call for `destination` until `recoverDestination(destination)` or `clear()`. */
  failDestination(destination: string, failure: SimulatedFailure = {}): this {
    this.failingDestinations.set(destination, failure);
    return this;
  }

  /** Stops failing `destination`. */
  recoverDestination(destination: string): this {
    this.failingDestinations.delete(destination);
    return this;
  }

  /** Forgets what was recorded and every planned failure. */
  clear(): void {
    this.published.length = 0;
    this.calls.length = 0;
    this.nextFailures.length = 0;
    this.failingDestinations.clear();
  }

  async publish(message: OutboundMessage, _signal: AbortSignal): Promise<void> {
    const failure = this.nextFailures.shift() ?? this.failingDestinations.get(message.destination);
    if (failure) {
      const error = failure.error ?? simulated(message, failure.permanent === true);
      this.calls.push({ message, error });
      throw error;
    }
    this.calls.push({ message });
    this.published.push(message);
  }
}

function simulated(message: OutboundMessage, permanent: boolean): Error {
  const text = testingMessages.simulatedFailure(message.destination, message.messageId);
  return permanent ? new PermanentPublishError(text) : new PublishError(text);
}
