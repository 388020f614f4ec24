import { hostname } from 'node:os';
import type { QueueBoxAdmin } from '../../admin/queuebox.admin';
import { describeError } from '../../common/errors';
import { sleepUntil } from '../../common/wait';
import type { VerifyDatabase } from './verify.database';
import { verifyMessages } from './verify.messages';
import { PATH_NAMES, type ResolvedVerifyOptions, VERIFY_PATHS, VERIFY_POLL_INTERVAL_MS, type VerifyFault } from './verify.options';
import type { FaultRecord, HeldRow, PausedName, SkippedFault } from './verify.records';
import type { VerifyWorker, VerifyWorkers } from './verify.workers';

// The faults of a run, each aimed at the worker that holds the most claims at that moment (any
// live worker when none holds one): kill -9, a pause past the lease, its database sessions ended,
// a graceful shutdown. A killed or stopped worker is replaced, so the run keeps its workers. And
// one aimed at no worker: a destination and a source paused through the admin, then resumed.

/** How long a graceful shutdown may take beyond `shutdownTimeoutMs` before it is killed (Nest's hooks, deregistering). */
export const SHUTDOWN_GRACE_MS = 10_000;

/** A claim that read the pauses just before a pause may still be under way this long after the workers' poll interval. */
const PAUSE_SETTLE_MS = 1000;

/** The inbox paths whose source an admin pause takes, in turn. */
const INBOX_PATHS = VERIFY_PATHS.filter((path) => path !== 'outbox');

export class VerifyFaults {
  readonly records: FaultRecord[] = [];
  /** Admin pauses so far: which inbox path the next one takes. */
  private adminPauses = 0;
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
    // An admin pause runs beside the faults after it: their reclaims and restarts meet the paused rows.
    let adminPause: Promise<void> | undefined;
    try {
      for (const [i, fault] of schedule.entries()) {
        await sleepUntil(p.from + interval * (i + 1), p.signal);
        if (this.skipped.some((skipped) => skipped.fault === fault)) continue;
        if (fault === 'admin-pause') {
          await adminPause;
          adminPause = this.adminPause(p.signal);
          adminPause.catch(() => {}); // awaited below; until then, not an unhandled rejection
        } else {
          await this.inject(fault, p.signal);
        }
      }
    } finally {
      await adminPause;
    }
  }

  /** A worker exited by itself (a crash): recorded as a fault of its own, since it explains duplicates as a kill does. */
  crashed(worker: VerifyWorker, how: string, at: number): void {
    this.records.push({ kind: 'crash', worker: worker.name, at, endedAt: at, held: [] });
    this.log(verifyMessages.workerCrashed(worker.name, how));
  }

  private async inject(fault: Exclude<VerifyFault, 'admin-pause'>, signal: AbortSignal): Promise<void> {
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

  /**
   * Pauses the outbox path's destination and one inbox path's source (in turn) through the admin,
   * as an operator would, for twice `pauseMs`. Once the workers must have seen it (their poll interval,
   * and a second for a claim under way), notes the keys in flight, which may finish (with their
   * followers); at the end, reads which rows of either were claimed since (the database clock),
   * then resumes.
   */
  private async adminPause(signal: AbortSignal): Promise<void> {
    const path = INBOX_PATHS[this.adminPauses++ % INBOX_PATHS.length];
    const targets = [
      { component: 'outbox' as const, name: PATH_NAMES.outbox.destination },
      { component: 'inbox' as const, name: PATH_NAMES[path].source as string },
    ];
    const at = Date.now();
    const paused: PausedName[] = [];
    try {
      for (const target of targets) await this.admin.pause({ ...target, reason: 'queuebox verify: admin-pause', actor: 'queuebox verify' });
      await sleepUntil(at + VERIFY_POLL_INTERVAL_MS + PAUSE_SETTLE_MS, signal);
      const watchedFrom = Date.now();
      const held = await this.heldBy();
      await sleepUntil(at + Math.max(2 * this.options.pauseMs, 2 * PAUSE_SETTLE_MS), signal);
      for (const target of targets) {
        // The outbox has no followers: a key in flight there holds its later rows back anyway.
        const heldKeys = target.component === 'inbox' ? held.filter((row) => row.name === target.name).map((row) => row.key) : [];
        const claimed = await this.database.claimedWithin(target.component, target.name, Date.now() - watchedFrom);
        paused.push({
          ...target,
          heldKeys,
          claimedKeys: claimed.filter((key) => key === null || !heldKeys.includes(key)),
          watchedMs: Date.now() - watchedFrom,
        });
      }
    } finally {
      for (const target of targets) await this.admin.resume({ ...target, actor: 'queuebox verify' });
    }
    this.records.push({ kind: 'admin-pause', worker: '', at, endedAt: Date.now(), held: [], paused });
    const claimed = paused.reduce((sum, name) => sum + name.claimedKeys.length, 0);
    this.log(
      verifyMessages.adminPauseDone(
        targets.map((target) => target.name),
        ((Date.now() - at) / 1000).toFixed(1),
        claimed,
      ),
    );
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

  /** The rows in flight that `instanceId` holds (every instance when not given; `leaseLeft`: only those whose lease has not ended). */
  private async heldBy(instanceId?: string, p: { leaseLeft?: boolean } = {}): Promise<HeldRow[]> {
    const held: HeldRow[] = [];
    for (const component of ['outbox', 'inbox'] as const) {
      for (const row of await this.admin.listClaims({ component, limit: 1000 })) {
        if ((instanceId !== undefined && row.owner !== instanceId) || (p.leaseLeft && row.leaseRemainingSeconds <= 0)) continue;
        held.push({ component, name: row.name, key: row.key, messageId: row.messageId, idempotencyKey: row.idempotencyKey });
      }
    }
    return held;
  }
}
