import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ReclaimTimer } from '../../lib/workers/reclaim-timer';

describe('ReclaimTimer', () => {
  it('skips the ticks that come while a step still runs: steps never overlap', async () => {
    let running = 0;
    let most = 0;
    let steps = 0;
    let finish: () => void = () => undefined;
    const timer = new ReclaimTimer('test:reclaim', 5, async () => {
      steps++;
      running++;
      most = Math.max(most, running);
      await new Promise<void>((resolve) => {
        finish = resolve;
      });
      running--;
    });
    timer.start();
    try {
      // Many intervals pass while the first step waits (as for a database that does not answer).
      await new Promise((resolve) => setTimeout(resolve, 60));
      assert.equal(steps, 1, 'no step started beside the one still running');
      finish();
      const next = Date.now() + 5_000;
      while (steps < 2 && Date.now() < next) await new Promise((resolve) => setTimeout(resolve, 5));
      assert.equal(steps, 2, 'the next tick after the step ended starts one');
      assert.equal(most, 1);
    } finally {
      timer.stop();
      finish();
    }
  });
});
