import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { Logger, type LoggerService, type LogLevel } from '@nestjs/common';
import { QueueBoxEventLog } from '../../lib/events/event-log';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';

const published = {
  id: '1',
  messageId: '7f4c1f6e-0000-4000-8000-000000000001',
  destination: 'billing',
  key: null,
  attempt: 1,
  headers: {},
  durationMs: 2.5,
} as never;

/** A Nest logger that records debug lines and has only `levels` on. */
function recordingLogger(levels: LogLevel[]): { service: LoggerService; lines: string[] } {
  const lines: string[] = [];
  const service: LoggerService = {
    log: () => undefined,
    error: () => undefined,
    warn: () => undefined,
    debug: (message: string) => lines.push(message),
    setLogLevels: () => undefined,
  };
  Logger.overrideLogger(service);
  Logger.overrideLogger(levels);
  return { service, lines };
}

describe('QueueBoxEventLog', () => {
  afterEach(() => Logger.overrideLogger(['log', 'error', 'warn', 'debug', 'verbose', 'fatal']));

  const perMessage = { logging: { messages: true } };

  it('with logging.messages, logs a published message at debug level when debug is on', () => {
    const { lines } = recordingLogger(['error', 'warn', 'debug']);
    const events = new QueueBoxEvents();
    new QueueBoxEventLog(events, perMessage);
    events.emit('queuebox:published', published);
    assert.equal(lines.length, 1);
    assert.match(lines[0], /7f4c1f6e-0000-4000-8000-000000000001/);
  });

  it('without logging.messages (the default), logs no line per message even with debug on, and still the reclaim counts', () => {
    const { lines } = recordingLogger(['error', 'warn', 'debug']);
    const events = new QueueBoxEvents();
    new QueueBoxEventLog(events, { logging: { messages: false } });
    events.emit('queuebox:published', published);
    assert.deepEqual(lines, []);
    events.emit('queuebox:reclaimed', { component: 'outbox', name: 'billing', pending: 2, dead: 0 } as never);
    assert.equal(lines.length, 1);
    assert.match(lines[0], /outbox reclaim for "billing": 2 back to pending, 0 dead/);
  });

  it('builds no line when debug is off (it would run once per message)', () => {
    const { lines } = recordingLogger(['error', 'warn']);
    const events = new QueueBoxEvents();
    new QueueBoxEventLog(events, perMessage);
    let read = false;
    const watched = new Proxy(published as object, {
      get(target, property, receiver) {
        if (property === 'messageId') read = true;
        return Reflect.get(target, property, receiver);
      },
    });
    events.emit('queuebox:published', watched as never);
    assert.deepEqual(lines, []);
    assert.equal(read, false, 'the line was built although debug is off');
  });
});
