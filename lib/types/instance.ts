/**
 * Who one QueueBox of this process is: made once per `QueueBoxModule.forRoot()` (or tenant) at
 * every start. Injected with the `QUEUEBOX_IDENTITY` token. ("Instance" names one thing: the
 * process's row in the instances table, `QueueBoxInstance`; this is the QueueBox's identity, whose
 * `id` that row carries.)
 */
export interface QueueBoxIdentity {
  /**
   * A random UUID, new at every start: what claims write to `claimed_by`, and its row in the
   * instances table. A new one when the instance finds another live process with this id (a
   * process cloned after start-up, a VM restored from a snapshot).
   */
  id: string;
  /** The QueueBox's name (`forRoot({ name })`, `default` unless given): its tokens, metrics label and logs. */
  name: string;
  /** What the instances table calls its DataSource: the TypeORM name (`default` for the default one), or the tenant's name. */
  dataSource: string;
  /** Attached at run time through `QueueBoxTenants`. */
  tenant: boolean;
}

/** @deprecated Since 0.2: `QueueBoxIdentity`. */
export type QueueBoxInstanceName = QueueBoxIdentity;
