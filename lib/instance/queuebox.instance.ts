import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnModuleInit,
  Optional,
} from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { DataSource } from 'typeorm';
import { PartitionKeeper } from '../admin/partition-keeper.service';
import { RetentionService } from '../admin/retention.service';
import { followInitialization, type Initialization } from '../common/data-source-initialization';
import { describeError } from '../common/errors';
import { logContext } from '../common/log-context';
import { packageVersion } from '../common/package-version';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import { Waker } from '../common/wait';
import type { Dialect } from '../dialects/dialect';
import type { DeadInstanceRow } from '../dialects/dialect-rows';
import { QueueBoxStateError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { InboxRelay } from '../inbox/inbox.relay';
import { checkSchemaOnce } from '../migrations/schema-version';
import { WorkNotifications } from '../module/queuebox.notifications';
import type { ResolvedInstancesOptions, ResolvedQueueBoxOptions } from '../options/options.resolved';
import { OutboxPoller } from '../outbox/outbox.poller';
import { PullWorker } from '../pull/pull.worker';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxIdentity } from '../types/instance';
import { InstanceLiveness } from '../workers/instance-liveness';

const SETTLED: Promise<void> = Promise.resolve();

/** What health checks read about this instance's heartbeats. */
export interface InstanceStatus {
  id: string;
  /** Registered in the instances table and heartbeating. */
  registered: boolean;
  /** When a heartbeat last worked (local clock); undefined before the first. */
  lastHeartbeatAt?: Date;
  /** Consecutive heartbeats that failed (database down or unreachable). */
  failedBeats: number;
  /** How often another replica declared this instance dead (it paused or lost the database past `deadAfterMs`). */
  declaredDead: number;
  /** Dead instances whose leases this instance ended, since start. */
  deadInstancesEnded: number;
}

/**
 * This process in the instances table (migrations 006 and 009). It registers at start-up, before
 * any worker claims, and heartbeats every `instances.heartbeatMs` by the database clock; claims
 * write its id to `claimed_by`. Beside each heartbeat (never before it: a sweep can wait for
 * locks), a process that runs a worker sweeps: it declares dead every other instance silent for
 * longer than its `deadAfterMs` that renewed none of its leases within that time, ends the leases
 * not renewed within it in one statement, then runs the reclaim step at once: a killed replica's
 * keys move again in seconds, not after the 5-minute lease. A paused owner that comes back fails
 * its fence as after any expiry (its completions are lost claims; at-least-once, never two live
 * owners), and registers again. A row of its id that another live process beats (a copy of this
 * process) is left to that process: this one registers under a new id.
 *
 * It starts this QueueBox's work once registered: the heartbeat, the workers this process runs,
 * their notifications and retention. A DataSource initialized after start-up (TypeORM's
 * `manualInitialization`) is waited for: once its `initialize()` resolved, the instance checks the
 * schema, registers and starts the work, in that order (I13).
 *
 * At shutdown, once the workers stopped, it deregisters: what it still held (work abandoned after
 * `shutdownTimeoutMs`) is released at once, `pending` again with no attempt charged.
 */
@Injectable()
export class QueueBoxInstance implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger: Logger;
  private readonly options: ResolvedInstancesOptions;
  private readonly timerName: string;
  private timer?: NodeJS.Timeout;
  private beating?: Promise<void>;
  private sweeping?: Promise<void>;
  private registered = false;
  /**
   * The heartbeat count this process last saw in its row, and how many heartbeats since then got
   * no answer (each may have committed): the row holds a count within that range unless another
   * process beats it too.
   */
  private beats = { seen: 0, inDoubt: 0 };
  private lastHeartbeatAt?: Date;
  private failedBeats = 0;
  private declaredDead = 0;
  private deadInstancesEnded = 0;
  private stopped = false;
  /** Set while the DataSource is not initialized: the start waits for it. */
  private initialization?: Initialization;
  private starting?: Promise<void>;
  private readonly startWaker = new Waker();
  private readonly schemaLogger: Logger;

  constructor(
    @Inject(QUEUEBOX_IDENTITY) private readonly instance: QueueBoxIdentity,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    private readonly events: QueueBoxEvents,
    private readonly outbox: OutboxPoller,
    private readonly relay: InboxRelay,
    private readonly pull: PullWorker,
    private readonly notifications: WorkNotifications,
    private readonly retention: RetentionService,
    private readonly partitions: PartitionKeeper,
    private readonly liveness: InstanceLiveness,
    @Optional() private readonly scheduler?: SchedulerRegistry,
  ) {
    this.logger = new Logger(logContext('QueueBox:Instance', instance.name));
    this.schemaLogger = new Logger(logContext('QueueBox:Schema', instance.name));
    this.options = rootOptions.instances;
    this.timerName = `queuebox:${instance.name}:heartbeat`;
    // From the start: an `initialize()` the application calls before `onModuleInit` is then known to run.
    if (!dataSource.isInitialized) this.initialization = followInitialization(dataSource, () => this.startWaker.wake());
  }

  /** This instance's id, as claims write it to `claimed_by` and `queuebox instances` lists it. */
  get id(): string {
    return this.instance.id;
  }

  get status(): InstanceStatus {
    return {
      id: this.instance.id,
      registered: this.registered,
      lastHeartbeatAt: this.lastHeartbeatAt,
      failedBeats: this.failedBeats,
      declaredDead: this.declaredDead,
      deadInstancesEnded: this.deadInstancesEnded,
    };
  }

  /**
   * Registers before any worker starts (Nest runs every `onModuleInit` before any
   * `onApplicationBootstrap`), after the schema check when the module could not run it (the
   * DataSource was initialized after the module was built). A DataSource not initialized yet is
   * left to `onApplicationBootstrap`.
   */
  async onModuleInit(): Promise<void> {
    if (this.initialization?.done() === false) return;
    this.initialization?.stop();
    this.initialization = undefined;
    await checkSchemaOnce(this.dataSource, this.rootOptions, this.dialect, this.schemaLogger);
    try {
      await this.register();
    } catch (error) {
      // Workers wait for the database too; the heartbeat registers once it answers.
      this.logger.error(messages.instanceRegisterFailed(describeError(error), this.options.heartbeatMs));
    }
  }

  /** Starts the work, or, for a DataSource not initialized at `onModuleInit`, waits for it in the background. */
  async onApplicationBootstrap(): Promise<void> {
    this.stopped = false;
    if (!this.initialization) return this.startWork();
    this.logger.log(messages.instanceWaitsForDataSource(this.instance.name, this.instance.dataSource));
    this.starting = this.startOnceInitialized();
  }

  /**
   * Once the DataSource's `initialize()` resolved: checks the schema, registers, then starts the
   * work. A step that fails is logged (once per distinct error) and the sequence runs again every
   * `heartbeatMs` (a check already passed is not run again); nothing claims before it registered.
   * Ends early at shutdown.
   */
  private async startOnceInitialized(): Promise<void> {
    const initialization = this.initialization as Initialization;
    let failure: string | undefined;
    while (!this.stopped) {
      if (initialization.done()) {
        try {
          await checkSchemaOnce(this.dataSource, this.rootOptions, this.dialect, this.schemaLogger);
          await this.register();
          if (this.stopped) break;
          this.logger.log(messages.instanceStartedLate(this.instance.name, this.instance.dataSource, this.instance.id));
          await this.startWork();
          break;
        } catch (error) {
          const text = describeError(error);
          if (text !== failure) {
            this.logger.error(messages.instanceStartFailed(this.instance.name, this.instance.dataSource, text, this.options.heartbeatMs));
          }
          failure = text;
        }
      }
      await this.startWaker.sleep(this.options.heartbeatMs);
    }
    initialization.stop();
  }

  /**
   * Heartbeats, then starts what this process runs: its workers, the notifications that wake them,
   * the partitions' upkeep (in the partitioned layout, in every process), retention. Each part starts once: a late start that failed half-way runs it again.
   */
  private async startWork(): Promise<void> {
    if (!this.timer) {
      this.timer = setInterval(() => this.tick(), this.options.heartbeatMs);
      this.timer.unref();
      this.scheduler?.addInterval(this.timerName, this.timer);
    }
    const workers = [this.outbox, this.relay, this.pull].filter((worker) => worker.enabled);
    await Promise.all([...workers.map((worker) => worker.start()), this.notifications.start()]);
    // Not awaited: its statements wait for a connection of the pool like any other, and the
    // partitions made ahead hold the inserts meanwhile; its failures are its own to log.
    void this.partitions.start();
    this.retention.startWithWorkers();
  }

  /**
   * Stops heartbeating once the workers stopped (it waits for them), then deregisters: what this
   * instance still holds (work abandoned after `shutdownTimeoutMs`) is released, `pending` again
   * with no attempt charged, for another replica to claim at once (I9).
   */
  async beforeApplicationShutdown(): Promise<void> {
    this.stopTimer();
    // A start after a late initialization that is under way ends first: it starts nothing more now.
    this.startWaker.wake();
    await this.starting;
    await Promise.all([this.outbox.stop(), this.relay.stop(), this.pull.stop()]);
    await this.beating;
    // Also when registration failed: what the workers claimed since is released all the same.
    if (!this.dataSource.isInitialized) return;
    await this.deregister();
  }

  private async deregister(): Promise<void> {
    const duplicates = this.outbox.publishesOutlivingShutdown();
    try {
      const released = await this.dialect.instanceDeregister({ id: this.instance.id });
      this.registered = false;
      this.events.emit('queuebox:instance-deregistered', { id: this.instance.id, released });
      if (released.outbox + released.inbox > 0) {
        this.logger.warn(messages.instanceDeregisteredReleased(released.outbox, released.inbox, duplicates));
      }
    } catch (error) {
      // The rows stay `processing`: recovered when a replica declares this instance dead, or at the lease's end.
      this.logger.error(messages.instanceDeregisterFailed(describeError(error), duplicates));
    }
  }

  /**
   * Every `heartbeatMs`: a heartbeat and, where a worker runs, a sweep, each on its own promise.
   * A sweep waits for row locks (a claimed row of a dead instance locked by an open transaction,
   * another replica's sweep); the heartbeat must never wait for it, or this live instance would
   * miss its heartbeats and be declared dead by a replica whose sweep is not blocked.
   */
  private tick(): void {
    void this.beat();
    void this.sweep();
  }

  /**
   * One heartbeat: registers again if another replica declared this instance dead. Runs on the
   * timer; tests call it to beat at a moment of their choosing. Concurrent calls share one beat.
   */
  beat(): Promise<void> {
    this.beating ??= this.beatOnce().finally(() => {
      this.beating = undefined;
    });
    return this.beating;
  }

  /**
   * One sweep, where a worker runs: ends the leases of the instances that stopped beating, then
   * runs the reclaim at once. Runs on the heartbeat's timer, never more than one at a time (a
   * sweep still waiting for a lock is not started again); tests call it to sweep at a moment of
   * their choosing.
   */
  sweep(): Promise<void> {
    // While this instance's own heartbeats fail the database is most likely out of reach: the
    // sweep would fail the same way, at every beat.
    if (this.stopped || !this.runsWorkers() || this.failedBeats > 0) return this.sweeping ?? SETTLED;
    this.sweeping ??= this.sweepOnce().finally(() => {
      this.sweeping = undefined;
    });
    return this.sweeping;
  }

  private async beatOnce(): Promise<void> {
    try {
      const { seen, inDoubt } = this.beats;
      // Through the pull worker's set-aside connection when it has one: a pool full of handler
      // transactions must not make a live instance miss its heartbeats.
      const beat = await this.pull.onRenewalConnection((manager) =>
        this.dialect.instanceHeartbeat({ id: this.instance.id, beats: { from: seen, to: seen + inDoubt }, manager }),
      );
      if (beat.kind === 'beat') {
        this.beats = { seen: beat.beats, inDoubt: 0 };
        this.liveness.beat();
      } else if (beat.kind === 'taken') {
        // Another live process beats this row: a copy of this one. Its leases and ours must part.
        this.takeNewId((newId) => messages.instanceIdShared(this.instance.id, newId));
        await this.register();
      } else {
        const wasRegistered = this.registered;
        if (wasRegistered) {
          this.declaredDead++;
          this.logger.warn(messages.instanceDeclaredDead(this.instance.id, this.options.deadAfterMs));
        }
        await this.register(wasRegistered);
      }
      if (this.failedBeats > 0) this.logger.log(messages.instanceHeartbeatBack(this.failedBeats));
      this.failedBeats = 0;
      this.lastHeartbeatAt = new Date();
    } catch (error) {
      this.failedBeats++;
      this.beats.inDoubt++;
      this.liveness.beatFailed();
      // Once per outage, and again when it lasts past `deadAfterMs` (other replicas may end our leases then).
      const silentMs = this.failedBeats * this.options.heartbeatMs;
      if (
        this.failedBeats === 1 ||
        (silentMs >= this.options.deadAfterMs && silentMs - this.options.heartbeatMs < this.options.deadAfterMs)
      ) {
        this.logger.error(messages.instanceHeartbeatFailed(describeError(error), silentMs, this.options.deadAfterMs));
      }
    }
  }

  private async sweepOnce(): Promise<void> {
    let dead: DeadInstanceRow[];
    try {
      dead = await this.dialect.instanceEndDead({ self: this.instance.id, unregisteredAfterMs: this.options.deadAfterMs });
    } catch (error) {
      // A sweep cut off by the shutdown (TypeORM closed the DataSource under it) is no news.
      if (!this.stopped) this.logger.error(messages.instanceEndDeadFailed(describeError(error)));
      return;
    }
    if (dead.length === 0) return;
    for (const found of dead) {
      this.deadInstancesEnded++;
      const registered = found.heartbeatAt !== null;
      this.events.emit('queuebox:instance-dead', {
        id: found.id,
        registered,
        host: found.host,
        pid: found.pid,
        dataSource: found.dataSource,
        lastHeartbeatAt: found.heartbeatAt,
        released: found.released,
      });
      const { outbox, inbox } = found.released;
      this.logger.warn(
        registered
          ? messages.instanceDead(found.id, found.host, found.pid, found.heartbeatAt, outbox, inbox)
          : messages.unregisteredInstanceClaimsEnded(found.id, outbox, inbox),
      );
    }
    if (!this.stopped) await this.reclaimNow();
  }

  /**
   * Registers this instance; `declaredDead`: again, after another replica declared it dead. A row
   * of its id that exists already is never taken over (it may be a live copy of this process's):
   * it registers under a new id instead, and says why.
   */
  private async register(declaredDead = false): Promise<void> {
    for (let tries = 1; ; tries++) {
      const registration = await this.dialect.instanceRegister({
        id: this.instance.id,
        host: hostname(),
        pid: process.pid,
        dataSource: this.instance.dataSource,
        version: packageVersion(),
        deadAfterMs: this.options.deadAfterMs,
      });
      if (registration.registered) break;
      // A new random id cannot be taken: a second refusal means something else answers for the table.
      if (tries === 3) throw new QueueBoxStateError(messages.instanceRegisterRefused(tries));
      const { host, pid, startedAt, heartbeatAgeMs } = registration.holder;
      const copy = host === hostname() && pid === process.pid;
      this.takeNewId((newId) => messages.instanceIdRegistered(this.instance.id, newId, host, pid, startedAt, heartbeatAgeMs, copy));
    }
    this.registered = true;
    this.beats = { seen: 0, inDoubt: 0 };
    this.lastHeartbeatAt = new Date();
    this.liveness.beat(declaredDead);
  }

  /**
   * Leaves the current id to the other process that uses it: claims from now on write the new one
   * (the dialect reads the id at each claim); claims made before keep the old one.
   */
  private takeNewId(log: (newId: string) => string): void {
    const newId = randomUUID();
    this.logger.warn(log(newId));
    this.instance.id = newId;
    this.registered = false;
  }

  /** The workers of this process take the released rows now (the outbox and relay reclaim; pull claims take them). */
  private async reclaimNow(): Promise<void> {
    await Promise.all([this.outbox, this.relay, this.pull].filter((worker) => worker.enabled).map((worker) => worker.reclaimNow()));
  }

  private runsWorkers(): boolean {
    return this.outbox.enabled || this.relay.enabled || this.pull.enabled;
  }

  private stopTimer(): void {
    this.stopped = true;
    if (!this.timer) return;
    clearInterval(this.timer);
    this.timer = undefined;
    if (this.scheduler?.doesExist('interval', this.timerName)) this.scheduler.deleteInterval(this.timerName);
  }
}
