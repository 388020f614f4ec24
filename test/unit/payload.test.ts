import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_PAYLOAD_DEPTH, serializePayload } from '../../lib/common/payload';
import { QueueBoxValidationError } from '../../lib/errors/queuebox.errors';

const nested = (depth: number) => JSON.parse(`${'['.repeat(depth)}${']'.repeat(depth)}`);

describe('serializePayload: nesting depth', () => {
  it(`accepts ${MAX_PAYLOAD_DEPTH} levels and refuses one more, naming the payload`, () => {
    assert.equal(serializePayload(nested(MAX_PAYLOAD_DEPTH), 1e6, 'Outbox message').length, 2 * MAX_PAYLOAD_DEPTH);
    assert.throws(
      () => serializePayload({ a: nested(MAX_PAYLOAD_DEPTH) }, 1e6, 'Outbox message'),
      (error: unknown) =>
        error instanceof QueueBoxValidationError && error.field === 'payload' && /nests deeper than 1000 levels/.test(error.message),
    );
  });

  it('does not count brackets inside strings, escaped quotes included', () => {
    const text = `say "${'[{'.repeat(2 * MAX_PAYLOAD_DEPTH)}\\" [`;
    assert.equal(JSON.parse(serializePayload({ text, list: [[text]] }, 1e6, 'Outbox message')).text, text);
  });
});
