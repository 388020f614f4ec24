import { Injectable, Logger, type Type } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { nodeVersionSupported } from '../common/node-version';
import { supportedNodeVersions } from '../common/package-version';
import { DEFAULT_QUEUEBOX } from '../common/queuebox.constants';
import type { QueueBoxTables } from '../dialects/dialect';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';

/**
 * One QueueBox of the application: a `QueueBoxModule.forRoot()` (or `forRootAsync()`), or a tenant
 * attached at run time through `QueueBoxTenants`. Its services come from `get`.
 *
 * @example
 * const ledger = registry.get('ledger');
 * await ledgerDataSource.transaction((manager) => ledger.get(OutboxService).enqueue(manager, message));
 */
export interface QueueBoxEntry {
  /** Its name: `forRoot({ name })`, `default` unless given; a tenant's name. */
  readonly name: string;
  /** The DataSource its tables live in. */
  readonly dataSource: DataSource;
  /** What the instances table and messages call that DataSource: its TypeORM name, or the tenant's name. */
  readonly dataSourceName: string;
  readonly tables: QueueBoxTables;
  /** Attached at run time through `QueueBoxTenants` (it runs the `@PullHandler({ tenants: true })` handlers). */
  readonly tenant: boolean;
  /** One of its providers: `get(OutboxService)`, `get(QueueBoxHealth)`, `get(QueueBoxEvents)`... */
  get<T>(type: Type<T>): T;
}

type Change = 'added' | 'removed';

/** Whether this process said already that its Node.js is below the floor (once, however many applications it starts). */
let nodeFloorWarned = false;

/**
 * Warns once per process when `running` is outside `engines.node` (`supported`): npm's own warning
 * at install is easily lost among others, and nothing refuses to run. Called when the first
 * application's registry is made, so the warning is among its start-up logs.
 */
export function warnBelowNodeFloor(
  logger: Pick<Logger, 'warn'>,
  running: string = process.version,
  supported: string | undefined = supportedNodeVersions(),
): boolean {
  if (nodeFloorWarned || supported === undefined || nodeVersionSupported(running, supported)) return false;
  nodeFloorWarned = true;
  logger.warn(messages.nodeVersionUnsupported(running, supported));
  return true;
}

/**
 * Every QueueBox of the application, by name: how the Terminus indicator, the Prometheus exporter
 * and the dashboard reach each one, and how a QueueBox tells a transaction of another one's
 * DataSource. Refuses, at start-up, two QueueBoxes of one name (an ambiguous class injection) and
 * two on one DataSource that share an outbox or inbox table.
 */
@Injectable()
export class QueueBoxRegistry {
  private readonly logger = new Logger('QueueBox:Options');
  private readonly entries = new Map<string, QueueBoxEntry>();
  private readonly watchers = new Set<(change: Change, entry: QueueBoxEntry) => void>();

  constructor() {
    warnBelowNodeFloor(new Logger('QueueBox'));
  }

  add(entry: QueueBoxEntry): void {
    const taken = this.entries.get(entry.name);
    if (taken) throw new QueueBoxConfigError('name', messages.queueBoxNameTaken(entry.name, [taken.dataSourceName, entry.dataSourceName]));
    for (const other of this.entries.values()) {
      if (other.dataSource !== entry.dataSource) continue;
      const shared = (['outbox', 'inbox'] as const).find((table) => other.tables[table].qualified === entry.tables[table].qualified);
      if (shared) {
        throw new QueueBoxConfigError(
          `tables.${shared}`,
          messages.queueBoxTablesShared(other.name, entry.name, entry.dataSourceName, entry.tables[shared].qualified),
        );
      }
      if (other.tables.instances.qualified === entry.tables.instances.qualified) {
        this.logger.warn(messages.queueBoxInstancesTableShared(other.name, entry.name, entry.tables.instances.qualified));
      }
    }
    this.entries.set(entry.name, entry);
    for (const watcher of this.watchers) watcher('added', entry);
  }

  /** Removes `entry` if it is still the one registered under its name. */
  remove(entry: QueueBoxEntry): void {
    if (this.entries.get(entry.name) !== entry) return;
    this.entries.delete(entry.name);
    for (const watcher of this.watchers) watcher('removed', entry);
  }

  /** The QueueBox named `name` (`default` unless given); a `QueueBoxConfigError` listing the names when there is none. */
  get(name: string = DEFAULT_QUEUEBOX): QueueBoxEntry {
    const entry = this.entries.get(name);
    if (!entry) throw new QueueBoxConfigError('queuebox', messages.queueBoxUnknown(name, this.names()));
    return entry;
  }

  find(name: string): QueueBoxEntry | undefined {
    return this.entries.get(name);
  }

  /** Every QueueBox, by name (`default` first). */
  list(): QueueBoxEntry[] {
    return this.names().map((name) => this.entries.get(name) as QueueBoxEntry);
  }

  /** Every QueueBox's name, `default` first, then in alphabetical order. */
  names(): string[] {
    return [...this.entries.keys()].sort((a, b) => (a === DEFAULT_QUEUEBOX ? -1 : b === DEFAULT_QUEUEBOX ? 1 : a.localeCompare(b)));
  }

  /** The QueueBoxes whose tables live in `dataSource`. */
  on(dataSource: DataSource): QueueBoxEntry[] {
    return this.list().filter((entry) => entry.dataSource === dataSource);
  }

  /**
   * Calls `watcher` with every QueueBox registered now (`added`) and with each one added or
   * removed later (tenants come and go); returns the function that stops watching.
   */
  watch(watcher: (change: Change, entry: QueueBoxEntry) => void): () => void {
    for (const entry of this.entries.values()) watcher('added', entry);
    this.watchers.add(watcher);
    return () => this.watchers.delete(watcher);
  }
}
