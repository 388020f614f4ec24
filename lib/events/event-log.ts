import { Inject, Injectable, Logger } from '@nestjs/common';
import { QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import { type QueueBoxEventMap, type QueueBoxEventName, QueueBoxEvents } from './queuebox.events';

/**
 * Logs successful outcomes at debug level (failures, dead letters and lost claims are logged by the
 * workers at warn and error): reclaim counts always, and one line per published and per processed
 * message only with `logging: { messages: true }` (Nest's default logger has debug on, and a busy
 * app would get a line per message). Lines name the component, the message id and the outcome;
 * never a payload or a SQL parameter.
 */
@Injectable()
export class QueueBoxEventLog {
  private readonly logger = new Logger('QueueBox:Events');

  constructor(events: QueueBoxEvents, @Inject(QUEUEBOX_RESOLVED_OPTIONS) options: Pick<ResolvedQueueBoxOptions, 'logging'>) {
    const logged = options.logging.messages ? LOGGED : RECLAIMS_ONLY;
    // One listener for the events logged. Lines are built only when debug is on: these run once
    // per message, and debug is usually off (nor is a closure made per event to build it later).
    events.subscribe((name, event) => {
      if (!logged.has(name) || !Logger.isLevelEnabled('debug')) return;
      this.logger.debug(lineOf(name, event));
    });
  }
}

const LOGGED = new Set<QueueBoxEventName>([
  'queuebox:published',
  'queuebox:relay:processed',
  'queuebox:pull:processed',
  'queuebox:reclaimed',
]);
const RECLAIMS_ONLY = new Set<QueueBoxEventName>(['queuebox:reclaimed']);

function lineOf(name: QueueBoxEventName, event: unknown): string {
  if (name === 'queuebox:published') {
    const e = event as QueueBoxEventMap['queuebox:published'];
    return messages.logPublished(e.messageId, e.destination, e.attempt, e.durationMs);
  }
  if (name === 'queuebox:reclaimed') {
    const e = event as QueueBoxEventMap['queuebox:reclaimed'];
    return messages.logReclaimed(e.component, e.name, e.pending, e.dead);
  }
  const e = event as QueueBoxEventMap['queuebox:relay:processed'] | QueueBoxEventMap['queuebox:pull:processed'];
  return messages.logProcessed(e.component, `${e.source}/${e.idempotencyKey}`, e.attempt, e.durationMs);
}
