// Inbox runtime: how the two inbox workers (the relay, pull) name their messages and record their outcomes.

import type { Logger } from '@nestjs/common';
import { isInstance } from '../common/errors';
import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { inboxEventMessage, type QueueBoxEvents } from '../events/queuebox.events';
import type { LeaseService } from '../lease/lease.service';
import type { InboxClaim } from '../types/claims';
import type { InboxMessage } from '../types/messages';
import { OutcomeRecorder } from '../workers/outcome-recorder';

/** `source/idempotencyKey`: how logs name an inbox message. */
export function inboxMessageName(message: InboxMessage): string {
  return `${message.source}/${message.idempotencyKey}`;
}

/** The outcome recorder of inbox claims (relay and pull): a `QueueBoxValidationError` would fail the same way again. */
export function inboxOutcomeRecorder<C extends InboxClaim>(
  lease: LeaseService,
  events: QueueBoxEvents,
  logger: Logger,
): OutcomeRecorder<C> {
  return new OutcomeRecorder<C>({
    lease,
    events,
    logger,
    nameOf: inboxMessageName,
    eventMessage: (claim) => inboxEventMessage(claim.component as InboxClaim['component'], claim.message),
    isFinal: (failure) => isInstance(failure, QueueBoxValidationError),
  });
}
