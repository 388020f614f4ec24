import { channel } from 'node:diagnostics_channel';
import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { DEFAULT_QUEUEBOX, QUEUEBOX_IDENTITY } from '../common/queuebox.constants';
import { messages } from '../texts/queuebox.messages';
import type { ClaimComponent, QueueTable } from '../types/claims';

/** What every outbox event says about its message. */
export interface OutboxEventMessage {
  component: 'outbox';
  /** The row id. */
  id: string;
  messageId: string;
  destination: string;
  key: string | null;
  /** 1 for the first attempt. */
  attempt: number;
}

/** What every relay (`component: 'relay'`) and pull (`component: 'pull'`) event says about its message. */
export interface InboxEventMessage {
  component: 'relay' | 'pull';
  id: string;
  source: string;
  idempotencyKey: string;
  aggregateId: string | null;
  attempt: number;
}

/**
 * Every event QueueBox emits, by channel name. Each is published on the `node:diagnostics_channel`
 * of that name, so tracing libraries and applications can subscribe without QueueBox knowing them:
 *
 * @example
 * import { subscribe } from 'node:diagnostics_channel';
 * subscribe('queuebox:dead-lettered', (event) => alert(event as OutboxDeadLetteredEvent));
 */
export interface QueueBoxEventMap {
  /** An outbox message was published and marked `sent`. */
  'queuebox:published': OutboxEventMessage & { durationMs: number };
  /** An outbox publish failed; the message is `pending` again and will be retried after `delayMs`. */
  'queuebox:retry-scheduled': OutboxEventMessage & { delayMs: number; error: string; durationMs: number };
  /** A publish failed for good (a `PermanentPublishError`, or the last attempt): the message is `dead`. */
  'queuebox:dead-lettered': OutboxEventMessage & { reason: string; durationMs: number };
  /**
   * The destination's rate limit (`outbox.rateLimits`) had no token for a claimed message: it was
   * not published, and is `pending` again for `delayMs` (when the bucket should have a token), its
   * attempt not counted.
   */
  'queuebox:rate-limited': OutboxEventMessage & { delayMs: number };
  /** A fenced write or a renewal found the claim gone: the row belongs to another worker now. */
  'queuebox:claim-lost': { component: ClaimComponent; id: string };
  /**
   * The reclaim step found rows of one destination (outbox) or source (relay) whose lease expired:
   * `pending` went back to pending, `dead` were on their last attempt and are dead now. A pull
   * claim takes expired rows itself (no `pending` counts); one that took a row whose last
   * attempt expired dead-letters it and reports it here (`component: 'pull'`, `dead: 1`).
   */
  'queuebox:reclaimed': { component: ClaimComponent; name: string; pending: number; dead: number };
  /** `InboxService.receive()` stored a new message (reported when the insert ran, even if the caller's transaction later rolls back). */
  'queuebox:inbox:received': { id: string; source: string; idempotencyKey: string; aggregateId: string | null };
  /** `InboxService.receive()` found the message already stored. */
  'queuebox:inbox:duplicate': { id: string; source: string; idempotencyKey: string; aggregateId: string | null };
  /** The relay forwarded an inbox message (`forwarded` outbox rows) and marked it `processed`. */
  'queuebox:relay:processed': InboxEventMessage & { durationMs: number; forwarded: number };
  'queuebox:relay:retry-scheduled': InboxEventMessage & { delayMs: number; error: string; durationMs: number };
  'queuebox:relay:dead-lettered': InboxEventMessage & { reason: string; durationMs: number };
  /** @deprecated Since 0.2: `queuebox:relay:processed` (still delivered to `on()` listeners and channel subscribers of this name until 0.3). */
  'queuebox:inbox:processed': InboxEventMessage & { durationMs: number; forwarded: number };
  /** @deprecated Since 0.2: `queuebox:relay:retry-scheduled`. */
  'queuebox:inbox:retry-scheduled': InboxEventMessage & { delayMs: number; error: string; durationMs: number };
  /** @deprecated Since 0.2: `queuebox:relay:dead-lettered`. */
  'queuebox:inbox:dead-lettered': InboxEventMessage & { reason: string; durationMs: number };
  /** A `@PullHandler` committed its transaction, which marked the message `processed`. */
  'queuebox:pull:processed': InboxEventMessage & { durationMs: number; handler: string };
  'queuebox:pull:retry-scheduled': InboxEventMessage & { delayMs: number; error: string; durationMs: number };
  'queuebox:pull:dead-lettered': InboxEventMessage & { reason: string; durationMs: number };
  /**
   * This replica found an instance silent for longer than its `instances.deadAfterMs` and ended
   * its leases (`released`: the rows it held, now claimed again). `lastHeartbeatAt` is by the
   * database clock. `registered: false`: the instance had already left the instances table
   * (declared dead before, it claimed rows in the moment before it registered again, then died):
   * its `host`, `pid`, `dataSource` and `lastHeartbeatAt` are `null`.
   */
  'queuebox:instance-dead': {
    id: string;
    registered: boolean;
    host: string | null;
    pid: number | null;
    dataSource: string | null;
    lastHeartbeatAt: Date | null;
    released: { outbox: number; inbox: number };
  };
  /** This instance shut down cleanly and left the instances table; `released`: rows it still held (abandoned work), back to `pending` at once, no attempt charged. */
  'queuebox:instance-deregistered': { id: string; released: { outbox: number; inbox: number } };
  /** An operator changed rows from the dashboard (`queuebox/dashboard`), after the change is in the database. */
  'queuebox:dashboard:action': DashboardActionEvent;
}

/**
 * One dashboard action: who (`actor`, from the request), what, where, and how many rows it changed.
 * `selection` says which rows: their ids, or the filter; `skippedId` is the head row skip-head dead-lettered.
 */
export interface DashboardActionEvent {
  /** `pause` and `resume` (issue 40): a destination (outbox) or source (inbox); `changed` 0 when it was paused (resumed) already. */
  action: 'replay' | 'discard' | 'skip-head' | 'pause' | 'resume';
  /** The dashboard's instance name (`default` unless configured). */
  instance: string;
  component: QueueTable;
  actor: string;
  changed: number;
  selection:
    | { ids: string[] }
    | {
        filter: { name?: string; key?: string; errorContains?: string; deadAfter?: string; deadBefore?: string; fingerprint?: string };
        all: boolean;
      }
    | { key: string; source?: string; headId?: string; reason?: string }
    | { name: string; reason?: string };
  skippedId?: string | null;
}

export type QueueBoxEventName = keyof QueueBoxEventMap;

/**
 * The relay's events before 0.2 named it `inbox`; the relay is the relay everywhere now. Until
 * 0.3 each is still delivered under its old name to `on(oldName)` listeners (with one warning)
 * and to subscribers of the old diagnostics channel; `subscribe()` listeners see the new names.
 */
export const RENAMED_EVENTS = {
  'queuebox:inbox:processed': 'queuebox:relay:processed',
  'queuebox:inbox:retry-scheduled': 'queuebox:relay:retry-scheduled',
  'queuebox:inbox:dead-lettered': 'queuebox:relay:dead-lettered',
} as const satisfies Partial<Record<QueueBoxEventName, QueueBoxEventName>>;

type RenamedEvent = keyof typeof RENAMED_EVENTS;

/** Each new name's old one, for the old diagnostics channel. */
const OLD_NAMES = new Map<string, string>(Object.entries(RENAMED_EVENTS).map(([old, renamed]) => [renamed, old]));

/** Receives every event of one application, in order, synchronously. */
export type QueueBoxEventListener = <K extends QueueBoxEventName>(name: K, event: QueueBoxEventMap[K]) => void;

const channels = new Map<string, ReturnType<typeof channel>>();

const DASHBOARD_ACTION: QueueBoxEventName = 'queuebox:dashboard:action';

/**
 * The one place workers report what happened, one per QueueBox. Each event goes to this QueueBox's
 * listeners (metrics: `QueueBoxMetrics`, and the Prometheus exporter when it is imported) and to
 * its `node:diagnostics_channel`, which is process-wide: there it also carries `queuebox`, the
 * name of the QueueBox that emitted it. A listener that throws is never allowed to break the
 * worker that reported.
 */
@Injectable()
export class QueueBoxEvents {
  /** Replaced, never changed, on (un)subscribe: an emit walks the array it started with, by index (no iterator per event). */
  private listeners: readonly QueueBoxEventListener[] = [];
  private readonly logger = new Logger('QueueBox:Events');
  /** The name of the QueueBox whose events these are (`default` unless `forRoot({ name })` says otherwise). */
  readonly queuebox: string;

  constructor(@Optional() @Inject(QUEUEBOX_IDENTITY) instance?: { name: string }) {
    this.queuebox = instance?.name ?? DEFAULT_QUEUEBOX;
  }

  /** Calls `listener` with every event of this application; returns the unsubscribe function. */
  subscribe(listener: QueueBoxEventListener): () => void {
    // A listener subscribed twice is called once, as with the Set this used to be.
    if (!this.listeners.includes(listener)) this.listeners = [...this.listeners, listener];
    return () => {
      this.listeners = this.listeners.filter((l) => l !== listener);
    };
  }

  /** Calls `listener` with every event named `name`; returns the unsubscribe function. */
  on<K extends QueueBoxEventName>(name: K, listener: (event: QueueBoxEventMap[K]) => void): () => void {
    const renamed = RENAMED_EVENTS[name as RenamedEvent] as QueueBoxEventName | undefined;
    if (renamed) this.logger.warn(messages.eventRenamed(name, renamed));
    const wanted = renamed ?? name;
    return this.subscribe((emitted: QueueBoxEventName, event: unknown) => {
      if (emitted === wanted) listener(event as QueueBoxEventMap[K]);
    });
  }

  emit<K extends QueueBoxEventName>(name: K, event: QueueBoxEventMap[K]): void {
    const listeners = this.listeners;
    for (let i = 0; i < listeners.length; i++) {
      const listener = listeners[i];
      try {
        listener(name, event);
      } catch {
        // Metrics and observers are best effort: the message's outcome is already in the database.
      }
    }
    // A subscriber that throws does not reach us: diagnostics_channel rethrows on the next tick.
    const diagnostics = channelOf(name);
    // The dashboard's actions name their own target (`instance`); every other event its QueueBox.
    if (diagnostics.hasSubscribers) diagnostics.publish(name === DASHBOARD_ACTION ? event : { ...event, queuebox: this.queuebox });
    const oldName = OLD_NAMES.get(name);
    if (oldName === undefined) return;
    const old = channelOf(oldName);
    if (old.hasSubscribers) old.publish({ ...event, queuebox: this.queuebox });
  }
}

function channelOf(name: string): ReturnType<typeof channel> {
  let found = channels.get(name);
  if (!found) {
    found = channel(name);
    channels.set(name, found);
  }
  return found;
}

/** The payload fields every outbox event shares. */
export function outboxEventMessage(message: {
  id: string;
  messageId: string;
  destination: string;
  key: string | null;
  attempt: number;
}): OutboxEventMessage {
  return {
    component: 'outbox',
    id: message.id,
    messageId: message.messageId,
    destination: message.destination,
    key: message.key,
    attempt: message.attempt,
  };
}

/** The payload fields every relay or pull event shares. */
export function inboxEventMessage(
  component: 'relay' | 'pull',
  message: { id: string; source: string; idempotencyKey: string; aggregateId: string | null; attempt: number },
): InboxEventMessage {
  return {
    component,
    id: message.id,
    source: message.source,
    idempotencyKey: message.idempotencyKey,
    aggregateId: message.aggregateId,
    attempt: message.attempt,
  };
}
