import type { Logger } from '@nestjs/common';
import { describeError } from '../common/errors';
import type { Dialect } from '../dialects/dialect';
import type { LeaseService } from '../lease/lease.service';
import { messages } from '../texts/queuebox.messages';
import type { OutboxClaim } from '../types/claims';
import { shareFollowers } from '../workers/followers-share';
import { TurnBatcher } from '../workers/turn-batcher';

/** Most heads one completion statement takes (their followers are at most `maxFollowers`). */
const MAX_HEADS_PER_COMPLETION = 100;

/** A head's completion with its followers: whether the head's fence held, and the followers finished. */
export interface FollowersCompleted {
  head: boolean;
  followers: Set<string>;
}

/**
 * The outbox poller's followers (issue 36, `outbox.maxFollowers`): after a claim, the pending rows
 * right after each claimed head of its key, read in one statement. The poller publishes them after
 * their head, in key order, in the head's slot and under its claim, and marks them sent with it in
 * one statement (`LeaseService.completeWithFollowers`): so a key moves by more than one message per
 * claim round trip; the completions of heads that finish in the same turn of the event loop go
 * into one statement. A follower is not claimed: while its head is `processing` no claim takes a row
 * of its key, and a follower that is not published stays `pending` (nothing was written to it).
 *
 * One claim reads at most half of `maxFollowers` (the loop claims again when half its claims are
 * used, and the next claim's followers must find room); a head's followers count as held from
 * their read until its step takes them, or until the loop gives the head back unstarted.
 */
export class OutboxFollowers {
  private readonly byHead = new WeakMap<OutboxClaim, OutboxClaim[]>();
  private held = 0;
  private readonly completions: TurnBatcher<{ head: OutboxClaim; followerIds: string[] }, FollowersCompleted>;

  constructor(
    private readonly dialect: Dialect,
    lease: LeaseService,
    private readonly maxFollowers: number,
    private readonly logger: Logger,
  ) {
    this.completions = new TurnBatcher(MAX_HEADS_PER_COMPLETION, async (batch) => {
      const done = await lease.completeWithFollowers(batch);
      return batch.map(({ head }) => ({ head: done.heads.has(head), followers: done.followers }));
    });
  }

  /**
   * Reads the followers of `heads` (those with a key) and keeps them for their steps. Each head's
   * run ends before its first row that is not due or that `excluded` names (a paused or
   * rate-limited destination): that row waits to be claimed as a head, so the key keeps its order.
   * A read that fails is logged, and the heads go alone.
   */
  async read(heads: readonly OutboxClaim[], excluded: (destination: string) => boolean): Promise<void> {
    const keyed = heads.filter((head) => head.message.key !== null);
    const room = Math.min(Math.ceil(this.maxFollowers / 2), this.maxFollowers - this.held);
    if (keyed.length === 0 || room < 1) return;
    let rows: Awaited<ReturnType<Dialect['outboxFollowers']>>;
    try {
      rows = await this.dialect.outboxFollowers({
        heads: keyed.map((head) => ({ id: head.id, key: head.message.key as string })),
        perHead: Math.ceil(room / keyed.length),
      });
    } catch (error) {
      this.logger.warn(messages.outboxFollowersReadFailed(describeError(error)));
      return;
    }
    const headById = new Map(keyed.map((head) => [head.id, head]));
    for (const row of shareFollowers(rows, room, (row) => !row.due || excluded(row.message.destination))) {
      const head = headById.get(row.headId) as OutboxClaim;
      const follower: OutboxClaim = {
        component: 'outbox',
        table: 'outbox',
        id: row.message.id,
        token: head.token,
        leaseMs: head.leaseMs,
        leaseExpiresAt: head.leaseExpiresAt,
        attempt: row.message.attempt,
        message: row.message,
      };
      const list = this.byHead.get(head);
      if (list) list.push(follower);
      else this.byHead.set(head, [follower]);
      this.held++;
    }
  }

  /** The followers of `head`, in key order, handed over once (its step, or its release unstarted): none are held from then on. */
  take(head: OutboxClaim): OutboxClaim[] | undefined {
    const followers = this.byHead.get(head);
    if (!followers) return undefined;
    this.byHead.delete(head);
    this.held -= followers.length;
    return followers;
  }

  /**
   * Completes `head` (fenced) and the followers of `followerIds` published after it, with the
   * other heads whose completion is asked for in this turn (one statement). `followers` may name
   * other heads' followers too: look up only this head's.
   */
  complete(head: OutboxClaim, followerIds: string[]): Promise<FollowersCompleted> {
    return this.completions.add({ head, followerIds });
  }
}
