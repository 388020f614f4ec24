// Worker runtime: what this process knows of its own instance's heartbeats. QueueBoxInstance
// writes it at every heartbeat; a worker that lost a claim reads it to tell the operator whether
// this instance's own silence was the likely cause (another replica's sweep ended its leases), and
// then not to blame the lease.

import { Inject, Injectable } from '@nestjs/common';
import { QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';

/** A stretch of time in which no heartbeat of this instance got through for longer than `deadAfterMs`. */
interface Silence {
  /** When it ended (`performance.now()`): the heartbeat that got through again. */
  endedAt: number;
  silentMs: number;
  /** That heartbeat found the instance's row gone: another replica had declared it dead. */
  declaredDead: boolean;
  /** Heartbeats were sent and failed (the database out of reach), rather than not sent at all. */
  beatsFailed: boolean;
}

/**
 * This instance's heartbeats as a worker needs them to explain a lost claim. Times are this
 * process's monotonic clock (`performance.now()`), which runs on while the process is paused, so
 * a SIGSTOP or a frozen VM shows as a gap between two heartbeats that got through.
 */
@Injectable()
export class InstanceLiveness {
  private readonly deadAfterMs: number;
  /** When a heartbeat (or the registration) last got through; undefined before the first. */
  private lastBeatAt?: number;
  private beatsFailedSince = false;
  private lastSilence?: Silence;

  constructor(@Inject(QUEUEBOX_RESOLVED_OPTIONS) options: ResolvedQueueBoxOptions) {
    this.deadAfterMs = options.instances.deadAfterMs;
  }

  /** A heartbeat or a registration got through; `declaredDead`: it found the row gone (and registered again). */
  beat(declaredDead = false): void {
    const now = performance.now();
    if (this.lastBeatAt !== undefined) {
      const silentMs = now - this.lastBeatAt;
      if (declaredDead || silentMs > this.deadAfterMs) {
        this.lastSilence = { endedAt: now, silentMs, declaredDead, beatsFailed: this.beatsFailedSince };
      }
    }
    this.lastBeatAt = now;
    this.beatsFailedSince = false;
  }

  /** A heartbeat was sent and failed. */
  beatFailed(): void {
    this.beatsFailedSince = true;
  }

  /**
   * Why a claim of lease `leaseMs` may have been lost through this instance's own silence, as the
   * sentence a lost-claim log line ends with; undefined when no such silence is in sight. A
   * replica's sweep can end a claim only while its lease runs, so only a silence going on now, or
   * one that ended within the last `leaseMs`, can explain a claim lost now.
   */
  explainLoss(leaseMs: number): string | undefined {
    if (this.lastBeatAt === undefined) return undefined;
    const now = performance.now();
    const silentNowMs = now - this.lastBeatAt;
    if (silentNowMs > this.deadAfterMs) {
      return messages.claimEndedBySilence(Math.round(silentNowMs), this.deadAfterMs, this.beatsFailedSince, undefined);
    }
    const silence = this.lastSilence;
    if (silence === undefined || silence.endedAt < now - leaseMs) return undefined;
    return messages.claimEndedBySilence(Math.round(silence.silentMs), this.deadAfterMs, silence.beatsFailed, silence.declaredDead);
  }
}
