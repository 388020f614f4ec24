import { Inject, Injectable, type OnModuleDestroy, Optional } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { QueueBoxAdmin } from '../admin/queuebox.admin';
import { describeError } from '../common/errors';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { BacklogRow, InstanceState, PauseRow } from '../dialects/dialect-rows';
import { InboxRelay } from '../inbox/inbox.relay';
import { QueueBoxInstance } from '../instance/queuebox.instance';
import { WorkNotifications } from '../module/queuebox.notifications';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { OutboxPoller } from '../outbox/outbox.poller';
import { PullWorker } from '../pull/pull.worker';
import { messages } from '../texts/queuebox.messages';
import type { WorkerLoopStatus } from '../workers/claim-loop';
import { ClaimPauses } from '../workers/claim-pauses';
import { DatabaseRecovery } from '../workers/database-recovery';
import type { DatabaseWarning } from './database-doctor';
import { QueueBoxDoctor } from './queuebox.doctor';

/** What a health check looks at. Every field is optional; defaults are listed. */
export interface QueueBoxHealthCheckOptions {
  /** Check that the database answers `SELECT 1` within `timeoutMs`. Default true. */
  database?: boolean;
  /** Down while the application shuts down (QueueBox stops claiming and drains). Default true. */
  draining?: boolean;
  /**
   * Down when a running worker loop has not completed a claim cycle for this long; `false` skips.
   * A loop whose claims fail (database down or unreachable) and that retries is not stuck: only a
   * claim statement that has not returned for this long counts then. Default 60000 ms.
   */
  maxCycleAgeMs?: number | false;
  /** Down when the oldest due pending message waited longer than this; `false` skips. Default 300000 ms. */
  maxLagMs?: number | false;
  /** How long the database may take to answer. Default 3000 ms. */
  timeoutMs?: number;
  /**
   * Down when this instance's heartbeats have failed for `instances.deadAfterMs` or longer: other
   * replicas may declare it dead and claim its rows again. Default true.
   */
  heartbeat?: boolean;
  /**
   * Read the instances table (one query): how many instances are alive, silent and dead by the
   * database clock, and this instance's own state there; down when this instance is silent or dead
   * in it (its heartbeats land late: other replicas will end its leases). Default true;
   * `readiness()` and `liveness()` leave it out.
   */
  instances?: boolean;
  /**
   * The database warnings of the doctor's last examination (`QueueBoxDoctor`, every
   * `doctor.intervalMs`; no query here): `true` reports them all in `warnings` and sets `degraded`
   * while any is present, down only for a fatal one (a table missing, a required migration not
   * run); `'fatal'` reports and fails on the fatal ones only; `false` leaves them out. Default
   * true; `readiness()` and `liveness()` use `'fatal'`.
   */
  warnings?: boolean | 'fatal';
}

/** What a check found. `problems` is empty when `healthy`. */
export interface QueueBoxHealthReport {
  healthy: boolean;
  problems: string[];
  database?: 'up' | 'down';
  draining: boolean;
  /** Seconds the oldest due pending message (outbox or inbox) has waited; null when none is due. */
  lagSeconds?: number | null;
  /** Where the lag is: `outbox:<destination>` or `inbox:<source>`. */
  lagWhere?: string;
  /** `waitingForDatabase`: its last claim failed and it retries (at most every 5 s, at once when the database answers). */
  workers: { name: string; running: boolean; lastCycleSecondsAgo: number | null; inFlight: number; waitingForDatabase: boolean }[];
  /** `listening` (LISTEN/NOTIFY wakes the workers), `polling` (no notification connection now), or `off`. */
  notifications: 'listening' | 'polling' | 'off';
  /**
   * This instance in the instances table: its id (claims name it as their owner), whether it is
   * registered, seconds since its last heartbeat worked, how often another replica declared it
   * dead, and how many dead instances it ended the leases of (with the claims they held).
   */
  instance: {
    id: string;
    registered: boolean;
    lastHeartbeatSecondsAgo: number | null;
    declaredDead: number;
    deadInstancesEnded: number;
    /**
     * Its state in the instances table by the database clock (`InstanceState`): what other replicas
     * see. `null` when its row is not there (not registered yet, or just declared dead: its next
     * heartbeat registers it again). Absent when the instances were not read.
     */
    state?: InstanceState | null;
  };
  /** The instances of this QueueBox's instances table by state, by the database clock. Absent when not read. */
  instances?: Record<InstanceState, number>;
  /** Up but with database warnings (`warnings`): the reason is in each warning's message. Absent when warnings were not read. */
  degraded?: boolean;
  /** The database warnings of the doctor's last examination (docs/doctor.md); absent when not read or not examined yet. */
  warnings?: DatabaseWarning[];
  /**
   * The paused destinations and sources (issue 40), as this process's claims see them (read at most
   * one poll interval ago), read with the backlog by the lag check. A pause is deliberate: it is no
   * problem, and the lag check leaves the paused ones out (their rows wait on purpose), so a pause
   * never fails liveness or readiness. Absent when the lag check did not run (`maxLagMs: false`,
   * the database down).
   */
  paused?: PauseRow[];
}

const DEFAULTS = {
  database: true,
  draining: true,
  maxCycleAgeMs: 60_000,
  maxLagMs: 300_000,
  timeoutMs: 3_000,
  heartbeat: true,
  instances: true,
  warnings: true as boolean | 'fatal',
};

/**
 * The state of QueueBox in this process, for health checks: database reachable, workers cycling,
 * backlog lag, shutdown. `QueueBoxHealthIndicator` (`queuebox/terminus`) turns it into a Terminus
 * result; an app without Terminus can call `check()` itself.
 */
@Injectable()
export class QueueBoxHealth implements OnModuleDestroy {
  private draining = false;

  constructor(
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    private readonly admin: QueueBoxAdmin,
    private readonly outbox: OutboxPoller,
    private readonly relay: InboxRelay,
    private readonly pull: PullWorker,
    private readonly notifications: WorkNotifications,
    private readonly recovery: DatabaseRecovery,
    private readonly instance: QueueBoxInstance,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
    private readonly pauses: ClaimPauses,
    @Optional() private readonly doctor?: QueueBoxDoctor,
  ) {}

  /** Nest calls every `onModuleDestroy` before any `beforeApplicationShutdown`: draining starts here, before the workers stop. */
  onModuleDestroy(): void {
    this.draining = true;
  }

  /** True from the start of application shutdown. */
  get isDraining(): boolean {
    return this.draining;
  }

  /** Runs the checks `options` selects (all by default). */
  async check(options: QueueBoxHealthCheckOptions = {}): Promise<QueueBoxHealthReport> {
    const o = {
      database: options.database ?? DEFAULTS.database,
      draining: options.draining ?? DEFAULTS.draining,
      maxCycleAgeMs: options.maxCycleAgeMs ?? DEFAULTS.maxCycleAgeMs,
      maxLagMs: options.maxLagMs ?? DEFAULTS.maxLagMs,
      timeoutMs: options.timeoutMs ?? DEFAULTS.timeoutMs,
      heartbeat: options.heartbeat ?? DEFAULTS.heartbeat,
      instances: options.instances ?? DEFAULTS.instances,
      warnings: options.warnings ?? DEFAULTS.warnings,
    };
    const problems: string[] = [];
    const now = Date.now();
    const instance = this.instance.status;
    // Only the loops this process runs (or that were started by hand): a web replica, or an app
    // without an inbox, has no relay to report as "not running".
    const loops: WorkerLoopStatus[] = [
      ...(this.outbox.enabled || this.outbox.status.running ? [this.outbox.status] : []),
      ...(this.relay.enabled || this.relay.status.running ? [this.relay.status] : []),
      ...this.pull.status.filter((loop) => this.pull.enabled || loop.running),
    ];
    const secondsAgo = (at: Date | undefined) => (at ? round((now - at.getTime()) / 1000) : null);
    const report: QueueBoxHealthReport = {
      healthy: true,
      problems,
      draining: this.draining,
      workers: loops.map((loop) => ({
        name: loop.name,
        running: loop.running,
        lastCycleSecondsAgo: secondsAgo(loop.lastCycleAt),
        inFlight: loop.inFlight,
        waitingForDatabase: loop.waitingForDatabase,
      })),
      notifications: this.notifications.enabled ? (this.notifications.listening ? 'listening' : 'polling') : 'off',
      instance: {
        id: instance.id,
        registered: instance.registered,
        lastHeartbeatSecondsAgo: secondsAgo(instance.lastHeartbeatAt),
        declaredDead: instance.declaredDead,
        deadInstancesEnded: instance.deadInstancesEnded,
      },
    };
    const { deadAfterMs, heartbeatMs } = this.options.instances;
    if (o.heartbeat && instance.failedBeats * heartbeatMs >= deadAfterMs) {
      problems.push(messages.healthHeartbeatsFailing(instance.failedBeats * heartbeatMs, deadAfterMs));
    }
    if (o.draining && this.draining) problems.push(messages.healthDraining());
    if (o.maxCycleAgeMs !== false) {
      for (const loop of loops) {
        // A loop waiting for the database is alive (readiness reports the database): a restart
        // would not bring the database back. Only a claim statement that does not return is stuck.
        // A loop that never claimed yet counts from now: it has just started.
        const age = secondsAgo(loop.waitingForDatabase ? loop.claimingSince : loop.lastCycleAt);
        if (loop.running && age !== null && age * 1000 > o.maxCycleAgeMs) problems.push(messages.healthWorkerStuck(loop.name, age));
      }
    }
    if (o.database) {
      try {
        await withTimeout(this.dataSource.query('SELECT 1'), o.timeoutMs);
        report.database = 'up';
        // Loops waiting after a failed claim try again now instead of at the end of their wait.
        this.recovery.recovered();
      } catch (error) {
        report.database = 'down';
        problems.push(messages.healthDatabaseDown(describeError(error)));
      }
    }
    if (o.maxLagMs !== false && report.database !== 'down') {
      try {
        // The pauses as this process's claims read them (at most one poll interval old: usually no query).
        const [backlog, paused] = await withTimeout(Promise.all([this.admin.backlog(), this.pauses.rows()]), o.timeoutMs);
        report.paused = [...paused];
        const isPaused = (row: BacklogRow) => paused.some((p) => p.component === row.component && p.name === row.name);
        const oldest = oldestDue(paused.length === 0 ? backlog : backlog.filter((row) => !isPaused(row)));
        report.lagSeconds = oldest?.oldestPendingAgeSeconds ?? null;
        if (oldest) report.lagWhere = `${oldest.component}:${oldest.name}`;
        if (oldest && (oldest.oldestPendingAgeSeconds ?? 0) * 1000 > o.maxLagMs) {
          problems.push(messages.healthLagging(report.lagWhere as string, oldest.oldestPendingAgeSeconds ?? 0, o.maxLagMs));
        }
      } catch (error) {
        problems.push(messages.healthBacklogFailed(describeError(error)));
      }
    }
    if (o.instances && report.database !== 'down') {
      try {
        const rows = await withTimeout(this.admin.instances(), o.timeoutMs);
        report.instances = { alive: 0, silent: 0, dead: 0 };
        for (const row of rows) report.instances[row.state]++;
        const own = rows.find((row) => row.id === instance.id);
        report.instance.state = own?.state ?? null;
        if (own && own.state !== 'alive')
          problems.push(messages.healthInstanceSilent(own.state, round(own.heartbeatAgeSeconds), own.deadAfterMs));
      } catch (error) {
        problems.push(messages.healthInstancesFailed(describeError(error)));
      }
    }
    const examined = o.warnings === false ? undefined : this.doctor?.latest;
    if (examined) {
      const shown = o.warnings === 'fatal' ? examined.warnings.filter((w) => w.fatal) : examined.warnings;
      report.warnings = shown;
      report.degraded = shown.length > 0;
      for (const warning of shown.filter((w) => w.fatal)) problems.push(warning.message);
    }
    report.healthy = problems.length === 0;
    return report;
  }
}

function oldestDue(rows: BacklogRow[]): BacklogRow | undefined {
  let oldest: BacklogRow | undefined;
  for (const row of rows) {
    if (row.oldestPendingAgeSeconds === null) continue;
    if (!oldest || row.oldestPendingAgeSeconds > (oldest.oldestPendingAgeSeconds ?? 0)) oldest = row;
  }
  return oldest;
}

function withTimeout<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(messages.healthTimeout(ms))), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

const round = (n: number) => Math.round(n * 10) / 10;
