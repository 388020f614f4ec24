import { Injectable, Logger } from '@nestjs/common';
import { messages } from '../queuebox.messages';
import { type QueueBoxEventMap, type QueueBoxEventName, QueueBoxEvents } from './queuebox.events';

/**
 * Logs each successful outcome at debug level (failures, dead letters and lost claims are logged
 * by the workers at warn and error). Lines name the component, the message id and the outcome;
 * never a payload or a SQL parameter.
 */
@Injectable()
export class QueueBoxEventLog {
  private readonly logger = new Logger('QueueBox:Events');

  constructor(events: QueueBoxEvents) {
    // One listener for the four events. Lines are built only when debug is on: these run once per
    // message, and debug is usually off (nor is a closure made per event to build it later).
    events.subscribe((name, event) => {
      if (!LOGGED.has(name) || !Logger.isLevelEnabled('debug')) return;
      this.logger.debug(lineOf(name, event));
    });
  }
}

const LOGGED = new Set<QueueBoxEventName>([
  'queuebox:published',
  'queuebox:inbox:processed',
  'queuebox:pull:processed',
  'queuebox:reclaimed',
]);

function lineOf(name: QueueBoxEventName, event: unknown): string {
  if (name === 'queuebox:published') {
    const e = event as QueueBoxEventMap['queuebox:published'];
    return messages.logPublished(e.messageId, e.destination, e.attempt, e.durationMs);
  }
  if (name === 'queuebox:reclaimed') {
    const e = event as QueueBoxEventMap['queuebox:reclaimed'];
    return messages.logReclaimed(e.component, e.name, e.pending, e.dead);
  }
  const e = event as QueueBoxEventMap['queuebox:inbox:processed'] | QueueBoxEventMap['queuebox:pull:processed'];
  return messages.logProcessed(e.component, `${e.source}/${e.idempotencyKey}`, e.attempt, e.durationMs);
}
