// Inbox runtime (shared by the relay and pull, which import nothing of each other): the followers
// of claimed inbox heads, for the two workers that take them (the inbox relay and batch pull
// handlers): the pending rows right after a claimed head of its aggregate, handled with it and
// completed under its fence.

import type { EntityManager } from 'typeorm';
import type { Dialect } from '../dialects/dialect';
import type { InboxClaim } from '../types/claims';
import { shareFollowers } from '../workers/followers-share';

/** A follower changed between its read and its completion (`InboxFollowers.complete`): nothing of its transaction may commit. */
export class FollowersChangedError extends Error {}

/** Reads and completes the followers of claimed inbox heads. */
export class InboxFollowers {
  constructor(private readonly dialect: Dialect) {}

  /**
   * The followers of `heads`: up to `room` pending rows that come right after the heads of their
   * aggregates, read in `manager`'s transaction when given, spread over the heads and cut at each
   * aggregate's first row that is not yet due; none behind a head that is no longer first of its
   * aggregate (the dialect's read). A follower is not claimed: it rides on its head's claim (its
   * `token` and lease are the head's, `headId` names it), since no claim takes a row of an
   * aggregate while its head is in flight. Complete followers with `complete` after their heads'
   * fenced completion, in the same transaction: that completion is what fences them. Returned by
   * head, in id order.
   */
  async read(heads: readonly InboxClaim[], p: { room: number; manager?: EntityManager }): Promise<Map<InboxClaim, InboxClaim[]>> {
    const byHead = new Map<InboxClaim, InboxClaim[]>();
    const keyed = heads.filter((head) => head.message.aggregateId !== null);
    if (keyed.length === 0 || p.room < 1) return byHead;
    const rows = await this.dialect.inboxFollowers({
      heads: keyed.map((head) => ({ id: head.id, source: head.message.source, aggregateId: head.message.aggregateId as string })),
      perHead: Math.ceil(p.room / keyed.length),
      manager: p.manager,
    });
    const headById = new Map(keyed.map((head) => [head.id, head]));
    for (const row of shareFollowers(rows, p.room, (row) => !row.due)) {
      const head = headById.get(row.headId) as InboxClaim;
      const follower: InboxClaim = {
        component: head.component,
        table: 'inbox',
        id: row.message.id,
        headId: head.id,
        token: head.token,
        leaseMs: head.leaseMs,
        leaseExpiresAt: head.leaseExpiresAt,
        attempt: row.message.attempt,
        message: row.message,
      };
      const list = byHead.get(head);
      if (list) list.push(follower);
      else byHead.set(head, [follower]);
    }
    return byHead;
  }

  /**
   * Marks `followers` processed in `manager`'s transaction, after their heads' fenced completion;
   * fenced by the heads: a follower changes only if its head is `processed` under the head's token
   * (the completion in this transaction). Throws `FollowersChangedError` when one was no longer
   * pending (an operator's write since it was read) or its head is not completed under that
   * token: the caller's transaction must roll back.
   */
  async complete(followers: readonly InboxClaim[], manager: EntityManager): Promise<void> {
    if (followers.length === 0) return;
    const done = await this.dialect.inboxCompleteFollowers({
      followers: followers.map((follower) => ({ id: follower.id, headId: follower.headId ?? follower.id, headToken: follower.token })),
      manager,
    });
    if (done.size < followers.length) throw new FollowersChangedError();
  }
}
