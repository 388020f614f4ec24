export {
  type DrainOptions,
  type DrainResult,
  type FailedAttempt,
  type FailureOutcome,
  type InboxRunResult,
  type OutboxDrainResult,
  type OverridableModuleBuilder,
  QueueBoxTesting,
} from './queuebox-testing';
export { type PublishAttempt, RecordingPublisher, type SimulatedFailure } from './recording-publisher';
