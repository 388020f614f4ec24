export type {
  DeadLetterFilter,
  DeadLetterIds,
  DeadLetterPage,
  DeadLetterSelection,
  RetentionResult,
} from './admin/admin.types';
export { createQueueBoxAdmin } from './admin/create-queuebox-admin';
export type { MessageFilter, MessagePage, MessagePageResult } from './admin/message-search';
export { QueueBoxAdmin } from './admin/queuebox.admin';
export { RetentionService } from './admin/retention.service';
export type { BackoffFunction, BackoffOptions, RetryBackoffOptions, RetryOption, RetryPolicy } from './common/backoff';
export { type Duration, parseDuration } from './common/duration';
export { decodeHeaderValue, encodeHeaderValue } from './common/header-value';
export { DEFAULT_QUEUEBOX, DEFAULT_TABLES, QUEUEBOX_DATA_SOURCE, QUEUEBOX_RESOLVED_OPTIONS } from './common/queuebox.constants';
export {
  canonicalSigningString,
  type SignatureCheck,
  type SignedRequest,
  signatureHeaders,
  signRequest,
  verifyRequestSignature,
  verifySignature,
} from './common/signature';
export { standardWebhookHeaders, verifyStandardWebhook } from './common/standard-webhooks';
export { type QueueBoxEntry, QueueBoxRegistry } from './core/queuebox.registry';
export type {
  AttemptRow,
  BacklogRow,
  BlockedKeyRow,
  ClaimRow,
  DeadLetterGroupRow,
  DeadLetterRow,
  InstanceRow,
  InstanceState,
  PauseRow,
  RowOwner,
  SkipHeadTarget,
  Throughput,
  ThroughputRow,
} from './dialects/dialect-rows';
export type { MessageHistory, MessagePlan, MessageRow, MessageState } from './dialects/message-rows';
export {
  ClaimLostError,
  DuplicateMessageIdError,
  HandlerTimeoutError,
  PermanentPublishError,
  PublishError,
  QueueBoxAdminError,
  QueueBoxConfigError,
  QueueBoxError,
  QueueBoxStateError,
  QueueBoxValidationError,
  SentRowsNotKeptError,
  TransactionLostError,
  TransactionRequiredError,
  UnknownSourceError,
} from './errors/queuebox.errors';
export {
  type DashboardActionEvent,
  type InboxEventMessage,
  type OutboxEventMessage,
  type QueueBoxEventListener,
  type QueueBoxEventMap,
  type QueueBoxEventName,
  QueueBoxEvents,
} from './events/queuebox.events';
export {
  DATABASE_WARNING_CODES,
  type DatabaseWarning,
  type DatabaseWarningCode,
  type DatabaseWarningSeverity,
  type DoctorReport,
} from './health/database-doctor';
export { QueueBoxDoctor } from './health/queuebox.doctor';
export { QueueBoxHealth, type QueueBoxHealthCheckOptions, type QueueBoxHealthReport } from './health/queuebox-health';
export { InboxRelay } from './inbox/inbox.relay';
export { InboxService } from './inbox/inbox.service';
export { InboxReceiver, type ReceivedRequest, type ReceiverAnswer } from './inbox/receiver/inbox-receiver';
export type { InboxReceiverOptions } from './inbox/receiver/inbox-receiver.options';
export { type InstanceStatus, QueueBoxInstance } from './instance/queuebox.instance';
export { LeaseService } from './lease/lease.service';
export { LeaseKeeper } from './lease/lease-keeper';
export { type QueueBoxCounter, QueueBoxMetrics } from './metrics/queuebox.metrics';
export {
  createQueueBoxAttemptsMigration,
  createQueueBoxClaimFunctionsMigration,
  createQueueBoxClaimPlansMigration,
  createQueueBoxClaimProbesMigration,
  createQueueBoxClaimsMigration,
  createQueueBoxInstancesMigration,
  createQueueBoxKeyCollationMigration,
  createQueueBoxKeyedClaimsMigration,
  createQueueBoxMigration,
  createQueueBoxMigrations,
  createQueueBoxOperationsMigration,
  createQueueBoxPausesMigration,
  createQueueBoxRateLimitsMigration,
  createQueueBoxRenewalsMigration,
  createQueueBoxUnkeyedClaimsMigration,
  QueueBoxAttempts1796688000000,
  QueueBoxClaimFunctions1796169600000,
  QueueBoxClaimPlans1796947200000,
  QueueBoxClaimProbes1796342400000,
  QueueBoxClaims1795996800000,
  QueueBoxInstances1796256000000,
  QueueBoxKeyCollation1796083200000,
  QueueBoxKeyedClaims1796860800000,
  QueueBoxMigrations,
  QueueBoxOperations1764633600000,
  QueueBoxPauses1796601600000,
  QueueBoxRateLimits1796428800000,
  QueueBoxRenewals1796515200000,
  QueueBoxSchema1764460800000,
  QueueBoxUnkeyedClaims1796774400000,
} from './migrations/queuebox.migration';
export { renderSchemaSql } from './migrations/schema-files';
export { QueueBoxModule } from './module/queuebox.module';
export type { QueueBoxModuleExtras } from './module/queuebox.module-definition';
export { WorkNotifications } from './module/queuebox.notifications';
export { type QueueBoxTenantOptions, QueueBoxTenants, QueueBoxTenantsModule } from './module/queuebox.tenants';
export {
  getInboxServiceToken,
  getLeaseServiceToken,
  getOutboxServiceToken,
  getPullClientToken,
  getQueueBoxAdminToken,
  getQueueBoxEventsToken,
  getQueueBoxHealthToken,
  getQueueBoxToken,
  InjectInbox,
  InjectLeaseService,
  InjectOutbox,
  InjectPullClient,
  InjectQueueBoxAdmin,
  InjectQueueBoxEvents,
  InjectQueueBoxHealth,
} from './module/queuebox.tokens';
export { OutboxPoller } from './outbox/outbox.poller';
export { OutboxService } from './outbox/outbox.service';
export {
  type ClientProxyEnvelope,
  type ClientProxyLike,
  ClientProxyPublisher,
  type ClientProxyPublisherOptions,
  type ClientProxyTransport,
} from './publishers/client-proxy.publisher';
export { HttpPublisher, type HttpPublisherOptions } from './publishers/http.publisher';
export { createLeaseService, createPullClient } from './pull/create-pull-client';
export { PullClient } from './pull/pull.client';
export { PullWorker } from './pull/pull.worker';
export {
  type PullBatchContext,
  type PullBatchHandlerMethod,
  type PullBatchHandlerOptions,
  type PullContext,
  PullHandler,
} from './pull/pull-handler.decorator';
export type { AdminComponent, Claim, ClaimComponent, InboxClaim, OutboxClaim, QueueTable } from './types/claims';
export type { InboxMessageInput, ReceiveResult, RelayRoute } from './types/inbox';
export type { QueueBoxIdentity, QueueBoxInstanceName } from './types/instance';
export type { InboxMessage, OutboundMessage } from './types/messages';
export type {
  DoctorOptions,
  InboxOptions,
  InstancesOptions,
  LoggingOptions,
  OutboxOptions,
  PublisherOption,
  PullHandlerOptions,
  PullOptions,
  QueueBoxModuleOptions,
  RelayOptions,
  RetentionOptions,
  SentRowsOption,
  WorkerOptions,
  WorkersOptions,
} from './types/options';
export type { EnqueueOptions, EnqueueResult, OutboxMessageInput, PublishBatchResult, Publisher } from './types/outbox';
export {
  CAUSATION_HEADER,
  IDEMPOTENCY_KEY_HEADER,
  KEY_HEADER,
  MESSAGE_ID_HEADER,
  REPLAY_COUNT_HEADER,
  REPLAYED_AT_HEADER,
  SIGNATURE_HEADER,
  SIGNED_HEADERS_HEADER,
  TIMESTAMP_HEADER,
  WEBHOOK_ID_HEADER,
  WEBHOOK_SIGNATURE_HEADER,
  WEBHOOK_TIMESTAMP_HEADER,
} from './wire-headers';
