/**
 * The known name a misspelled one most likely meant: the same name in another case, or one within
 * two edits (`publishTimout` → `publishTimeout`, `attempt` → `attempts`). `undefined` when none is close.
 */
export function closestName(given: string, known: readonly string[]): string | undefined {
  const lower = given.toLowerCase();
  const sameCase = known.find((name) => name.toLowerCase() === lower);
  if (sameCase) return sameCase;
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = editDistance(lower, name.toLowerCase());
    if (distance <= 2 && (!best || distance < best.distance)) best = { name, distance };
  }
  return best?.name;
}

/** Levenshtein distance (insertions, deletions, substitutions). */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length];
}
