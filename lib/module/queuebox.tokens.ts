import { Inject, type Type } from '@nestjs/common';
import { QueueBoxAdmin } from '../admin/queuebox.admin';
import { RetentionService } from '../admin/retention.service';
import { DEFAULT_QUEUEBOX } from '../common/queuebox.constants';
import { QueueBoxEvents } from '../events/queuebox.events';
import { QueueBoxHealth } from '../health/queuebox-health';
import { InboxService } from '../inbox/inbox.service';
import { LeaseService } from '../lease/lease.service';
import { QueueBoxMetrics } from '../metrics/queuebox.metrics';
import { OutboxService } from '../outbox/outbox.service';
import { PullClient } from '../pull/pull.client';

// How a QueueBox's services are injected by name, as @nestjs/typeorm does for named DataSources.
// The default QueueBox's are injected by their class too. Outside injection, `app.get(Class)` is
// ambiguous once there are several QueueBoxes (Nest returns the last module's): the tokens are not.

/** What each QueueBox exports, and the name its token carries (a class's runtime name is not kept by every build). */
export const QUEUEBOX_SERVICES = [
  [OutboxService, 'OutboxService'],
  [InboxService, 'InboxService'],
  [LeaseService, 'LeaseService'],
  [PullClient, 'PullClient'],
  [QueueBoxAdmin, 'QueueBoxAdmin'],
  [RetentionService, 'RetentionService'],
  [QueueBoxHealth, 'QueueBoxHealth'],
  [QueueBoxEvents, 'QueueBoxEvents'],
  [QueueBoxMetrics, 'QueueBoxMetrics'],
] as const satisfies readonly (readonly [Type<unknown>, string])[];

type Service = (typeof QUEUEBOX_SERVICES)[number][0];

/** The token of one service of the QueueBox `name` (`default` unless given): `QUEUEBOX:<name>:<Class>`. */
export function getQueueBoxToken(service: Service, name: string = DEFAULT_QUEUEBOX): string {
  const entry = QUEUEBOX_SERVICES.find(([type]) => type === service);
  return `QUEUEBOX:${name}:${entry?.[1] ?? service.name}`;
}

/** `OutboxService` of the QueueBox `name` (`@Inject(getOutboxServiceToken('ledger'))`, or `@InjectOutbox('ledger')`). */
export const getOutboxServiceToken = (name?: string) => getQueueBoxToken(OutboxService, name);
/** `InboxService` of the QueueBox `name`. */
export const getInboxServiceToken = (name?: string) => getQueueBoxToken(InboxService, name);
/** `LeaseService` of the QueueBox `name`. */
export const getLeaseServiceToken = (name?: string) => getQueueBoxToken(LeaseService, name);
/** `PullClient` of the QueueBox `name`. */
export const getPullClientToken = (name?: string) => getQueueBoxToken(PullClient, name);
/** `QueueBoxAdmin` of the QueueBox `name`. */
export const getQueueBoxAdminToken = (name?: string) => getQueueBoxToken(QueueBoxAdmin, name);
/** `QueueBoxHealth` of the QueueBox `name` (what its health indicator reads). */
export const getQueueBoxHealthToken = (name?: string) => getQueueBoxToken(QueueBoxHealth, name);
/** `QueueBoxEvents` of the QueueBox `name`. */
export const getQueueBoxEventsToken = (name?: string) => getQueueBoxToken(QueueBoxEvents, name);

/**
 * Injects the `OutboxService` of the QueueBox `name` (the default one without a name).
 *
 * @example
 * constructor(@InjectOutbox('ledger') private readonly ledgerOutbox: OutboxService) {}
 */
export const InjectOutbox = (name?: string) => Inject(getOutboxServiceToken(name));
/** Injects the `InboxService` of the QueueBox `name`. */
export const InjectInbox = (name?: string) => Inject(getInboxServiceToken(name));
/** Injects the `LeaseService` of the QueueBox `name`. */
export const InjectLeaseService = (name?: string) => Inject(getLeaseServiceToken(name));
/** Injects the `PullClient` of the QueueBox `name`. */
export const InjectPullClient = (name?: string) => Inject(getPullClientToken(name));
/** Injects the `QueueBoxAdmin` of the QueueBox `name`. */
export const InjectQueueBoxAdmin = (name?: string) => Inject(getQueueBoxAdminToken(name));
/** Injects the `QueueBoxHealth` of the QueueBox `name`. */
export const InjectQueueBoxHealth = (name?: string) => Inject(getQueueBoxHealthToken(name));
/** Injects the `QueueBoxEvents` of the QueueBox `name`. */
export const InjectQueueBoxEvents = (name?: string) => Inject(getQueueBoxEventsToken(name));
