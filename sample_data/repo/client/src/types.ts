// Shared types for the kvstore TypeScript client.

export enum Opcode {
  Get = 1,
  Set = 2,
  Delete = 3,
  Ping = 4,
  Stats = 5,
  ReplyOk = 0x80,
  ReplyMissing = 0x81,
  ReplyError = 0x82,
}

export interface Frame {
  opcode: Opcode;
  key: Uint8Array;
  value: Uint8Array;
}

export interface ClientOptions {
  host: string;
  port: number;
  /** Milliseconds before a request is abandoned. */
  timeoutMs?: number;
  /** How many sockets the pool keeps open. */
  poolSize?: number;
  retry?: RetryPolicy;
}

export interface RetryPolicy {
  attempts: number;
  baseMs: number;
  capMs: number;
}

export type Result<T> = { ok: true; value: T } | { ok: false; error: string };

export const DEFAULT_RETRY: RetryPolicy = { attempts: 4, baseMs: 25, capMs: 1000 };
