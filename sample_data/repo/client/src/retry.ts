import { RetryPolicy, DEFAULT_RETRY } from "./types";

export class RetryError extends Error {
  constructor(public readonly attempts: number, public readonly last: unknown) {
    super(`gave up after ${attempts} attempts`);
    this.name = "RetryError";
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Exponential backoff with full jitter: uniform(0, min(cap, base * 2^n)). */
export function backoffDelay(policy: RetryPolicy, attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(policy.capMs, policy.baseMs * Math.pow(2, attempt));
  return random() * ceiling;
}

export async function withRetry<T>(
  operation: (attempt: number) => Promise<T>,
  policy: RetryPolicy = DEFAULT_RETRY,
  isRetryable: (error: unknown) => boolean = () => true,
): Promise<T> {
  let last: unknown = undefined;
  for (let attempt = 0; attempt < policy.attempts; attempt++) {
    try {
      return await operation(attempt);
    } catch (error) {
      last = error;
      if (!isRetryable(error) || attempt === policy.attempts - 1) {
        break;
      }
      await sleep(backoffDelay(policy, attempt));
    }
  }
  throw new RetryError(policy.attempts, last);
}
