import { hostname } from 'node:os';
import type { QueueBoxAdmin } from '../../admin/queuebox.admin';
import { describeError } from '../../common/errors';
import { sleepUntil } from '../../common/wait';
import type { VerifyDatabase } from './verify.database';
import { verifyMessages } from './verify.messages';
import type { ResolvedVerifyOptions, VerifyFault } from './verify.options';
import type { FaultRecord, HeldRow, SkippedFault } from './verify.records';
import type { VerifyWorker, VerifyWorkers } from './verify.workers';

// The faults of a run, each aimed at the worker that holds the most claims at that moment (any
// live worker when none holds one): kill -9, a pause past the lease, its database sessions ended,
// a graceful shutdown. A killed or stopped worker is replaced, so the run keeps its workers.

/** How long a graceful shutdown may take beyond `shutdownTimeoutMs` before it is killed (Nest's hooks, deregistering). */
export const SHUTDOWN_GRACE_MS = 10_000;

export class VerifyFaults {
  readonly records: FaultRecord[] = [];
  readonly skipped: SkippedFault[] = [];
  /** Why the `sessions` fault cannot run here, once looked up (an empty string: it can). */
  private sessionsRefusal?: string;

  constructor(
    private readonly options: ResolvedVerifyOptions,
    private readonly workers: VerifyWorkers,
    private readonly database: VerifyDatabase,
    private readonly admin: QueueBoxAdmin,
    private readonly log: (line: string) => void,
  ) {}

  /** The bound of a graceful shutdown: its `shutdownTimeoutMs` and the grace after it. */
  get shutdownBoundMs(): number {
    return this.options.shutdownTimeoutMs + SHUTDOWN_GRACE_MS;
  }

  /**
   * Injects `faults` in turn, spread evenly until `until` (each kind at least once: what does not
   * fit runs right after), one at a time.
   */
  async run(faults: readonly VerifyFault[], p: { from: number; until: number; signal: AbortSignal }): Promise<void> {
    if (faults.length === 0) return;
    const rounds = Math.max(1, Math.floor((p.until - p.from) / 20_000));
    const schedule = Array.from({ length: rounds }, () => faults).flat();
    const interval = (p.until - p.from) / (schedule.length + 1);
    for (const [i, fault] of schedule.entries()) {
      await sleepUntil(p.from + interval * (i + 1), p.signal);
      if (this.skipped.some((skipped) => skipped.fault === fault)) continue;
      await this.inject(fault, p.signal);
    }
  }

  /** A worker exited by itself (a crash): recorded as a fault of its own, since it explains duplicates as a kill does. */
  crashed(worker: VerifyWorker, how: string, at: number): void {
    this.records.push({ kind: 'crash', worker: worker.name, at, endedAt: at, held: [] });
    this.log(verifyMessages.workerCrashed(worker.name, how));
  }

  private async inject(fault: VerifyFault, signal: AbortSignal): Promise<void> {
    // Windows has no SIGSTOP, and its SIGTERM ends a process at once, as a kill does.
    if (process.platform === 'win32' && (fault === 'pause' || fault === 'shutdown')) {
      this.skip(fault, verifyMessages.faultNeedsSignals(fault === 'pause' ? 'SIGSTOP' : 'SIGTERM'));
      return;
    }
    const target = await this.target();
    if (!target) {
      this.skip(fault, verifyMessages.faultNoWorker());
      return;
    }
    const { worker, instanceId } = target;
    const held = instanceId ? await this.heldBy(instanceId) : [];
    const at = Date.now();
    switch (fault) {
      case 'kill': {
        await this.workers.kill(worker);
        this.records.push({ kind: 'kill', worker: worker.name, at, endedAt: at, held });
        this.log(verifyMessages.faultDone('kill -9', worker.name, `${held.length} claims held`));
        await this.workers.start();
        return;
      }
      case 'pause': {
        this.workers.pause(worker);
        try {
          await sleepUntil(at + this.options.pauseMs, signal);
        } finally {
          this.workers.resume(worker);
        }
        this.records.push({ kind: 'pause', worker: worker.name, at, endedAt: Date.now(), held });
        this.log(
          verifyMessages.faultDone(
            'SIGSTOP/SIGCONT',
            worker.name,
            `${(this.options.pauseMs / 1000).toFixed(1)} s, ${held.length} claims held`,
          ),
        );
        return;
      }
      case 'sessions': {
        this.sessionsRefusal ??= (await this.database.sessionsRefusal()) ?? '';
        if (this.sessionsRefusal !== '') {
          this.skip(fault, this.sessionsRefusal);
          return;
        }
        let sessions: number;
        try {
          sessions = await this.database.endSessions(worker.applicationName);
        } catch (error) {
          this.skip(fault, describeError(error).split('\n')[0]);
          return;
        }
        if (sessions === 0) {
          this.skip(fault, verifyMessages.sessionsNotFound(worker.applicationName));
          return;
        }
        this.records.push({ kind: 'sessions', worker: worker.name, at, endedAt: Date.now(), held, sessions });
        this.log(verifyMessages.faultDone('sessions ended of', worker.name, `${sessions}`));
        return;
      }
      case 'shutdown': {
        const stopped = await this.workers.stop(worker, this.shutdownBoundMs);
        // Its deregistration ends the leases of what it abandoned (I9): reclaimed at once, not after the lease.
        const leftHeld = instanceId ? (await this.heldBy(instanceId, { leaseLeft: true })).length : 0;
        this.records.push({ kind: 'shutdown', worker: worker.name, at, endedAt: stopped.at, held, exitedInTime: stopped.inTime, leftHeld });
        this.log(
          verifyMessages.faultDone(
            'graceful shutdown of',
            worker.name,
            `${held.length} claims held, ${((stopped.at - at) / 1000).toFixed(1)} s`,
          ),
        );
        await this.workers.start();
        return;
      }
    }
  }

  private skip(fault: VerifyFault, reason: string): void {
    if (this.skipped.some((skipped) => skipped.fault === fault)) return;
    this.skipped.push({ fault, reason });
    this.log(verifyMessages.faultSkipped(fault, reason));
  }

  /** The live worker whose instance holds the most claims now, with its instance id (a worker that holds none: any). */
  private async target(): Promise<{ worker: VerifyWorker; instanceId?: string } | undefined> {
    const live = this.workers.live().filter((worker) => !worker.paused);
    if (live.length === 0) return undefined;
    const host = hostname();
    const instances = (await this.admin.instances()).filter((row) => row.host === host && row.state === 'alive');
    const ranked = live
      .map((worker) => {
        const instance = instances.find((row) => row.pid === worker.pid);
        return { worker, instanceId: instance?.id, claims: instance ? instance.claims.outbox + instance.claims.inbox : -1 };
      })
      .sort((a, b) => b.claims - a.claims);
    return ranked[0];
  }

  /** The rows in flight that `instanceId` holds (`leaseLeft`: only those whose lease has not ended). */
  private async heldBy(instanceId: string, p: { leaseLeft?: boolean } = {}): Promise<HeldRow[]> {
    const held: HeldRow[] = [];
    for (const component of ['outbox', 'inbox'] as const) {
      for (const row of await this.admin.listClaims({ component, limit: 1000 })) {
        if (row.owner !== instanceId || (p.leaseLeft && row.leaseRemainingSeconds <= 0)) continue;
        held.push({ component, name: row.name, key: row.key, messageId: row.messageId, idempotencyKey: row.idempotencyKey });
      }
    }
    return held;
  }
}
