// Worker runtime: the reclaim step of a claim loop on its timer (the outbox poller's and the relay's;
// pull claims take expired rows themselves).

import type { SchedulerRegistry } from '@nestjs/schedule';

/**
 * Runs a loop's reclaim step (expired leases back to `pending`) at once and then every
 * `intervalMs`, as an interval of the app's `SchedulerRegistry` under `name` when `@nestjs/schedule`
 * is set up, so it is listed with the app's other timers.
 */
export class ReclaimTimer {
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly name: string,
    private readonly intervalMs: number,
    private readonly reclaim: () => Promise<void>,
    private readonly scheduler?: SchedulerRegistry,
  ) {}

  start(): void {
    if (this.timer) return;
    void this.reclaim();
    this.timer = setInterval(() => void this.reclaim(), this.intervalMs);
    this.scheduler?.addInterval(this.name, this.timer);
  }

  stop(): void {
    if (!this.timer) return;
    clearInterval(this.timer);
    this.timer = undefined;
    if (this.scheduler?.doesExist('interval', this.name)) this.scheduler.deleteInterval(this.name);
  }
}
