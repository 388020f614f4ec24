// The ids QueueBox makes: time-ordered message ids (version 7) and derived ones (version 5).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { uuidV5, uuidV7 } from '../../lib/common/uuid';
import { toOutboxRows } from '../../lib/outbox/outbox-rows';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('uuidV7: time-ordered message ids', () => {
  it('is an RFC 9562 version 7 UUID whose first 48 bits are the time in milliseconds', () => {
    const at = Date.UTC(2026, 11, 6, 9, 30, 0, 123);
    const id = uuidV7(at);
    assert.match(id, V7);
    assert.equal(Number.parseInt(id.replace(/-/g, '').slice(0, 12), 16), at);
    assert.equal(uuidV7(0).slice(0, 13), '00000000-0000');
    assert.equal(uuidV7(2 ** 48 - 1).slice(0, 13), 'ffffffff-ffff');
  });

  it('ids of later milliseconds sort after earlier ones; 10,000 ids across refills of the random pool are all distinct', () => {
    const ids = Array.from({ length: 10_000 }, (_, n) => uuidV7(1_800_000_000_000 + Math.floor(n / 100)));
    assert.equal(new Set(ids).size, ids.length);
    for (const id of ids) assert.match(id, V7);
    for (let n = 100; n < ids.length; n += 100) assert.ok(ids[n - 1] < ids[n], `${ids[n - 1]} < ${ids[n]}`);
    const sameMillisecond = ids.slice(0, 100).map((id) => id.slice(19));
    assert.equal(new Set(sameMillisecond).size, 100, 'the random part differs within a millisecond');
  });

  it('is what an enqueue without a messageId gets; a given messageId is kept (lower case)', () => {
    const before = Date.now();
    const [made, given] = toOutboxRows(
      [
        { destination: 'd', payload: {} },
        { destination: 'd', payload: {}, messageId: '6F1C1C39-5BD3-4A53-9D7E-2A0A1F1D9A11' },
      ],
      1000,
    );
    assert.match(made.messageId, V7);
    const at = Number.parseInt(made.messageId.replace(/-/g, '').slice(0, 12), 16);
    assert.ok(at >= before && at <= Date.now(), 'stamped with the enqueue time');
    assert.equal(given.messageId, '6f1c1c39-5bd3-4a53-9d7e-2a0a1f1d9a11');
  });
});

describe('uuidV5: derived ids', () => {
  it('gives one id per name, version 5', () => {
    assert.equal(uuidV5('queuebox_inbox/1/0'), uuidV5('queuebox_inbox/1/0'));
    assert.notEqual(uuidV5('queuebox_inbox/1/0'), uuidV5('queuebox_inbox/1/1'));
    assert.match(uuidV5('x'), /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });
});
