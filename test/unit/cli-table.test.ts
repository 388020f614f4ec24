import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatDeadLetters } from '../../lib/cli/commands/dead-letters.command';
import { wrapText } from '../../lib/cli/table';
import { describeError } from '../../lib/common/errors';
import type { DeadLetterRow } from '../../lib/dialects/dialect-rows';
import { PermanentPublishError } from '../../lib/errors/queuebox.errors';
import { messages } from '../../lib/texts/queuebox.messages';

describe('wrapText (dead-letters list, last error lines)', () => {
  it('keeps a short text whole, on one line, whitespace runs collapsed', () => {
    assert.deepEqual(wrapText('attempt 3:\n  HTTP 503', 100, 1000), ['attempt 3: HTTP 503']);
    assert.deepEqual(wrapText('', 100, 1000), ['']);
  });

  it('breaks at spaces, never beyond the width, and splits a word longer than a line', () => {
    const lines = wrapText(`PublishError: HTTP 503 from https://billing.internal/${'x'.repeat(130)} after 3 s`, 40, 1000);
    assert.ok(
      lines.every((line) => line.length <= 40),
      lines.join('\n'),
    );
    assert.equal(lines[0], 'PublishError: HTTP 503 from');
    assert.equal(lines.join('').replace(/ /g, ''), `PublishError:HTTP503fromhttps://billing.internal/${'x'.repeat(130)}after3s`);
  });

  it('cuts beyond maxChars at the end, so the head stays whole, and says how much was left out', () => {
    const lines = wrapText(`no publisher named "shipping" ${'y'.repeat(1500)}`, 100, 1000);
    assert.equal(lines[0], 'no publisher named "shipping"');
    assert.match(lines.at(-1) as string, / … \(530 more characters\)$/);
  });
});

describe('dead-letters list as text', () => {
  const row = (id: string, lastError: string | null): DeadLetterRow => ({
    component: 'outbox',
    id,
    messageId: '6d83710c-876e-49f4-ae45-d5e1af395b8e',
    idempotencyKey: null,
    name: 'shipping',
    key: 'order-1',
    attempts: 1,
    lastError,
    fingerprint: null,
    createdAt: new Date('2026-11-30T00:58:04Z'),
    lastAttemptAt: new Date('2026-11-30T00:58:05Z'),
    headers: {},
  });

  it('shows the reason of an unknown route whole: the error the poller stores, on a line under its row', () => {
    // Exactly what the poller stores for a message routed to a publisher that does not exist (124
    // characters). The table cut it to 100 keeping both ends, which left out `no publisher named "shipping"`.
    const stored = describeError(new PermanentPublishError(messages.routeUnknown('shipping')));
    assert.ok(stored.length > 100, stored);
    const lines = formatDeadLetters('outbox', [row('17', stored), row('18', null)], null, {});
    assert.deepEqual(lines, [
      'Dead outbox rows:',
      '  id  message id                            destination  key      attempts  died at',
      '  17  6d83710c-876e-49f4-ae45-d5e1af395b8e  shipping     order-1         1  2026-11-30T00:58:05Z',
      '    last error: PermanentPublishError [QUEUEBOX_PERMANENT_PUBLISH]: no publisher named "shipping" (check',
      '                "outbox.route" and "outbox.publishers")',
      '  18  6d83710c-876e-49f4-ae45-d5e1af395b8e  shipping     order-1         1  2026-11-30T00:58:05Z',
      '    last error: -',
      '2 row(s); no more pages.',
    ]);
  });

  it('shows the longest error QueueBox stores (2000 characters) with its first 1000 whole', () => {
    const stored = describeError(new Error(`no publisher named "shipping"; ${'z'.repeat(3000)}`));
    const lines = formatDeadLetters('outbox', [row('17', stored)], null, {});
    const error = lines.slice(3, -1).map((line) => line.trim());
    assert.ok(error[0].startsWith('last error: Error: no publisher named "shipping";'), error[0]);
    assert.match(error.at(-1) as string, /… \(1000 more characters\)$/);
    assert.ok(lines.every((line) => line.length <= 16 + 100));
  });
});
