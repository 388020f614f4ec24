export type { VerifyCheck, VerifyCheckName, VerifyCheckStatus } from '../cli/verify/verify.checks';
export {
  VERIFY_DEFECT_ENV,
  VERIFY_DEFECTS,
  VERIFY_SCENARIOS,
  type VerifyDefect,
  type VerifyOptions,
  type VerifyScenario,
} from '../cli/verify/verify.options';
export type { VerifyReport } from '../cli/verify/verify.report';
export { runVerify, VerifyInterruptedError, VerifyTablesInUseError } from '../cli/verify/verify.runner';
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
