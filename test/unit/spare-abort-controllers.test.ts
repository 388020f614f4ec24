import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SpareAbortControllers } from '../../lib/common/spare-abort-controllers';

describe('SpareAbortControllers', () => {
  it('hands back a controller whose signal nobody used', () => {
    const spare = new SpareAbortControllers(2);
    const first = spare.take();
    spare.giveBack(first);
    assert.equal(spare.take(), first);
    assert.notEqual(spare.take(), first);
  });

  it('drops a controller that aborted, kept a listener, became a source of AbortSignal.any or got a property', () => {
    const spare = new SpareAbortControllers(10);
    const aborted = spare.take();
    aborted.abort(new Error('timeout'));
    const listened = spare.take();
    listened.signal.addEventListener('abort', () => undefined);
    const composed = spare.take();
    AbortSignal.any([composed.signal, AbortSignal.timeout(60_000)]);
    const marked = spare.take();
    Object.assign(marked.signal, { mark: 1 });
    for (const controller of [aborted, listened, composed, marked]) spare.giveBack(controller);
    assert.ok(![aborted, listened, composed, marked].includes(spare.take()));
  });

  it('takes back a controller whose listener was removed, and keeps at most max', () => {
    const spare = new SpareAbortControllers(1);
    const a = spare.take();
    const b = spare.take();
    const listener = () => undefined;
    a.signal.addEventListener('abort', listener);
    a.signal.removeEventListener('abort', listener);
    spare.giveBack(a);
    spare.giveBack(b);
    assert.equal(spare.take(), a);
    assert.notEqual(spare.take(), b);
  });
});
