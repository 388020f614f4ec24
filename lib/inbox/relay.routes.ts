import { encodeHeaderValue } from '../common/header-value';
import { withinTimeout } from '../common/time-limit';
import { uuidV5 } from '../common/uuid';
import type { OutboxInsertRow } from '../dialects/dialect';
import { HandlerTimeoutError } from '../errors/queuebox.errors';
import type { LeaseKeeper } from '../lease/lease-keeper';
import type { ResolvedRelayOptions } from '../options/options.resolved';
import type { OutboxWriter } from '../outbox/outbox.writer';
import { messages } from '../texts/queuebox.messages';
import type { InboxClaim } from '../types/claims';
import type { InboxMessage } from '../types/messages';
import { CAUSATION_HEADER } from '../wire-headers';
import type { WorkSlot } from '../workers/work-slots';
import type { RoutedRow } from './forward-batcher';

/**
 * The relay's routes (`inbox.relay.routes`): each inbox message's outbox rows, within
 * `inbox.relay.handlerTimeout`, with message ids derived from the inbox row (a forward can be
 * traced end to end, and a forward written twice is refused by the outbox) and the
 * `X-Causation-Id` header naming the inbox message.
 */
export class RelayRoutes {
  constructor(
    private readonly options: ResolvedRelayOptions,
    private readonly inboxTable: string,
    private readonly writer: OutboxWriter,
  ) {}

  /** The message id of the `index`-th outbox message forwarded from inbox row `inboxId`. */
  derivedMessageId(inboxId: string, index: number): string {
    return uuidV5(`${this.inboxTable}/${inboxId}/${index}`);
  }

  /**
   * The outbox rows of a head's route. A route past its timeout aborts the claim's signal (the
   * attempt fails) and keeps its slot until it ends.
   */
  head(message: InboxMessage, keeper: LeaseKeeper, slot: WorkSlot): Promise<OutboxInsertRow[]> {
    return this.rowsOf(message, keeper, slot, 'head');
  }

  /**
   * Routes a head's followers in id order, up to the first whose route fails or times out, or
   * until `stop()`: it and the rows after it stay pending, and come again as heads, where a
   * failure counts as an attempt. A follower's timeout ends only its head's chain of followers.
   */
  async followers(followers: readonly InboxClaim[], keeper: LeaseKeeper, slot: WorkSlot, stop: () => boolean): Promise<RoutedRow[]> {
    const routed: RoutedRow[] = [];
    for (const follower of followers) {
      if (stop()) break;
      try {
        routed.push({ claim: follower, rows: await this.rowsOf(follower.message, keeper, slot, 'follower') });
      } catch {
        break;
      }
    }
    return routed;
  }

  private async rowsOf(message: InboxMessage, keeper: LeaseKeeper, slot: WorkSlot, role: 'head' | 'follower'): Promise<OutboxInsertRow[]> {
    const route = this.options.routes[message.source];
    // The signal is made only when the route reads it (see LeaseKeeper).
    const context = {
      get signal() {
        return keeper.signal;
      },
    };
    const timeoutMs = this.options.handlerTimeoutMs;
    const output = await withinTimeout(
      Promise.resolve().then(() => route(message, context)),
      timeoutMs,
      () =>
        new HandlerTimeoutError(messages.handlerTimedOut(`The relay route of ${message.source}`, 'inbox.relay.handlerTimeout', timeoutMs)),
      (error, settled) => {
        if (role === 'head') keeper.abort(error);
        slot.holdUntil(settled);
      },
    );
    const list = Array.isArray(output) ? output : [output];
    return this.writer.rows(
      list.map((outbound, index) => ({
        ...outbound,
        messageId: outbound?.messageId ?? this.derivedMessageId(message.id, index),
        headers: { [CAUSATION_HEADER]: encodeHeaderValue(message.idempotencyKey), ...outbound?.headers },
      })),
    );
  }
}
