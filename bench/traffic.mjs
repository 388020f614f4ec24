// A load beside a measured step (bench/migrations.mjs, bench/partitions.mjs): one connection runs
// `work` again and again, and the caller reads the longest statement of each window.
import { now } from './clock.mjs';
import { connect } from './pg.mjs';

/** Runs `work(client)` on a connection of its own to `url` until `stop()`; `window()` gives the longest run since the last call, and how many ran. */
export function traffic(url, work) {
  let running = true;
  let longest = 0;
  let count = 0;
  const done = (async () => {
    const client = await connect(url);
    try {
      while (running) {
        const started = now();
        await work(client);
        longest = Math.max(longest, now() - started);
        count++;
      }
    } finally {
      await client.end();
    }
  })();
  return {
    window() {
      const seen = { longest, count };
      longest = 0;
      count = 0;
      return seen;
    },
    async stop() {
      running = false;
      await done;
    },
  };
}
