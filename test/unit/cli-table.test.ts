import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { oneLineBothEnds } from '../../lib/cli/table';

describe('oneLineBothEnds (dead-letters list, last error column)', () => {
  it('keeps a short text whole, on one line', () => {
    assert.equal(oneLineBothEnds('attempt 3:\n  HTTP 503', 100), 'attempt 3: HTTP 503');
    assert.equal(oneLineBothEnds(null, 100), '-');
  });

  it('cuts a long one in the middle, so the cause at its end stays visible', () => {
    const error = `attempt 5 of 5: PublishError: ${'x'.repeat(300)} caused by: ECONNREFUSED 10.0.0.7:443`;
    const shown = oneLineBothEnds(error, 100);
    assert.equal(shown.length, 100);
    assert.ok(shown.startsWith('attempt 5 of 5: PublishError: '), shown);
    assert.ok(shown.endsWith('caused by: ECONNREFUSED 10.0.0.7:443'), shown);
    assert.ok(shown.includes(' … '), shown);
  });
});
