import type { INestApplicationContext } from '@nestjs/common';
import { QUEUEBOX_DIALECT } from '../../lib/common/queuebox.constants';
import type { Dialect } from '../../lib/dialects/dialect';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { RelayClaims } from '../../lib/inbox/relay.claims';
import { InboxFollowers } from '../../lib/inbox-runtime/inbox.followers';
import { LeaseService } from '../../lib/lease/lease.service';
import { OutboxClaims } from '../../lib/outbox/outbox.claims';
import { PullClient } from '../../lib/pull/pull.client';

/** Each worker's claims, for tests that claim by hand: over a dialect, or over an app's QueueBox. */
export interface TestClaims {
  lease: LeaseService;
  outbox: OutboxClaims;
  relay: RelayClaims;
  pull: PullClient;
  followers: InboxFollowers;
}

export function claimsOver(dialect: Dialect, events: QueueBoxEvents, lease = new LeaseService(dialect, events)): TestClaims {
  return {
    lease,
    outbox: new OutboxClaims(dialect, events),
    relay: new RelayClaims(dialect, events),
    pull: new PullClient(dialect, lease, events),
    followers: new InboxFollowers(dialect),
  };
}

/** The claims of the QueueBox of `of` (an app, or a test app: its dialect, events, fencing and pull client). */
export function claimsOf(of: INestApplicationContext | { app: INestApplicationContext }): TestClaims {
  const app = 'app' in of ? of.app : of;
  const dialect = app.get<Dialect>(QUEUEBOX_DIALECT);
  const events = app.get(QueueBoxEvents);
  return { ...claimsOver(dialect, events, app.get(LeaseService)), pull: app.get(PullClient) };
}
