// Worker runtime: the reclaim step of a claim loop on its timer (the outbox poller's and the relay's;
// pull claims take expired rows themselves).

import type { SchedulerRegistry } from '@nestjs/schedule';

/**
 * Runs a loop's reclaim step (expired leases back to `pending`) at once and then every
 * `intervalMs`, as an interval of the app's `SchedulerRegistry` under `name` when `@nestjs/schedule`
 * is set up, so it is listed with the app's other timers. A tick that comes while the previous
 * step still runs is skipped: steps that wait for a slow database (up to the statement bound, which
 * can exceed the interval) would otherwise pile up, each holding a pool connection.
 */
export class ReclaimTimer {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(
    private readonly name: string,
    private readonly intervalMs: number,
    private readonly reclaim: () => Promise<void>,
    private readonly scheduler?: SchedulerRegistry,
  ) {}

  start(): void {
    if (this.timer) return;
    this.tick();
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.scheduler?.addInterval(this.name, this.timer);
  }

  private tick(): void {
    if (this.running) return;
    this.running = this.reclaim().finally(() => {
      this.running = undefined;
    });
  }

  stop(): void {
    if (!this.timer) return;
    clearInterval(this.timer);
    this.timer = undefined;
    if (this.scheduler?.doesExist('interval', this.name)) this.scheduler.deleteInterval(this.name);
  }
}
