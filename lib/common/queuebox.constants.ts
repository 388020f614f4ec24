/** Injection token of the options object given to `forRoot()` / returned by `forRootAsync()`'s factory. */
export const QUEUEBOX_MODULE_OPTIONS = 'QUEUEBOX:MODULE_OPTIONS';
/** Injection token of the validated options with every default filled in. */
export const QUEUEBOX_RESOLVED_OPTIONS = 'QUEUEBOX:RESOLVED_OPTIONS';
/** Injection token of the TypeORM `DataSource` QueueBox works on. */
export const QUEUEBOX_DATA_SOURCE = 'QUEUEBOX:DATA_SOURCE';
/** Injection token of the SQL dialect chosen from the DataSource's driver. */
export const QUEUEBOX_DIALECT = 'QUEUEBOX:DIALECT';

/** The name of the QueueBox that keeps class injection (`forRoot()` without `name`). */
export const DEFAULT_QUEUEBOX = 'default';

/** Injection token of this QueueBox's identity: its instance id, name and DataSource name (`QueueBoxIdentity`). */
export const QUEUEBOX_IDENTITY = 'QUEUEBOX:IDENTITY';

/**
 * Injection token, present in a tenant's own application context only (`QueueBoxTenants`), of
 * where its `@PullHandler({ tenants: true })` methods are found: the application's providers.
 */
export const QUEUEBOX_TENANT_HANDLERS = 'QUEUEBOX:TENANT_HANDLERS';

/**
 * Injection token, present in a tenant's own application context only, of the `QueueBoxRegistry`
 * of the application it is attached to: the one registry its services share with every other
 * QueueBox of the process.
 */
export const QUEUEBOX_APPLICATION_REGISTRY = 'QUEUEBOX:APPLICATION_REGISTRY';

/** Injection token of the HTTP receiver's validated options (present only when the receiver is enabled). */
export const QUEUEBOX_RECEIVER_OPTIONS = 'QUEUEBOX:RECEIVER_OPTIONS';

/** Default table names; each may be schema-qualified (`'messaging.queuebox_outbox'`). */
export const DEFAULT_TABLES = { outbox: 'queuebox_outbox', inbox: 'queuebox_inbox', instances: 'queuebox_instances' } as const;
