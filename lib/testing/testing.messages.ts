/** Every error text of `queuebox/testing`, in one place (the package's own live in `queuebox.messages.ts`). */
export const testingMessages = {
  workerRunning: (worker: string, option: string) =>
    `QueueBoxTesting cannot run the ${worker} while its background loop runs too (they would race for the same rows). Configure the app under test with "workers: false" (or "${option}: false"); for a whole app's module, QueueBoxTesting.overrideOptions(Test.createTestingModule({ imports: [AppModule] }), { workers: false, ... }).`,
  notQuiet: (what: string, batches: number) =>
    `QueueBoxTesting: the ${what} still had claimable rows after ${batches} batches. A message that fails with no backoff is retried until "maxAttempts"; raise "maxBatches" or give the failing publisher or handler an end.`,
  noPullHandler: (source: string, sources: string[]) =>
    `QueueBoxTesting: no @PullHandler(${JSON.stringify(source)}) in this app (its handlers: ${sources.length > 0 ? sources.map((s) => JSON.stringify(s)).join(', ') : 'none'}).`,
  notAQueueBoxApp: () =>
    'QueueBoxTesting.from(app) needs a Nest application or testing module that imports QueueBoxModule.forRoot() (or forRootAsync()).',
  simulatedFailure: (destination: string, messageId: string) =>
    `RecordingPublisher: simulated failure publishing message ${messageId} to "${destination}".`,
};
