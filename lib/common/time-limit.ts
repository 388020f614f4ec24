const ignore = () => undefined;

/**
 * `work` with a deadline: settles as `work` does, or at `timeoutMs` rejects with `timedOut()`,
 * after calling `onTimeout(error, settled)`, where `settled` resolves when `work` really ends
 * (work that ignores its aborted signal goes on running; its caller keeps its concurrency slot
 * until then).
 */
export function withinTimeout<T>(
  work: Promise<T>,
  timeoutMs: number,
  timedOut: () => Error,
  onTimeout: (error: Error, settled: Promise<void>) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      const error = timedOut();
      onTimeout(error, work.then(ignore, ignore));
      reject(error);
    }, timeoutMs);
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
