import { Inject, Injectable, Logger } from '@nestjs/common';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import { QueueBoxEvents } from './queuebox.events';

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
    if (options.logging.messages) {
      events.on('queuebox:published', (e) => this.debug(() => messages.logPublished(e.messageId, e.destination, e.attempt, e.durationMs)));
      for (const name of ['queuebox:inbox:processed', 'queuebox:pull:processed'] as const) {
        events.on(name, (e) =>
          this.debug(() => messages.logProcessed(e.component, `${e.source}/${e.idempotencyKey}`, e.attempt, e.durationMs)),
        );
      }
    }
    events.on('queuebox:reclaimed', (e) => this.debug(() => messages.logReclaimed(e.component, e.name, e.pending, e.dead)));
  }

  /** Builds the line only when debug is on: these run once per message or reclaim step. */
  private debug(line: () => string): void {
    if (Logger.isLevelEnabled('debug')) this.logger.debug(line());
  }
}
