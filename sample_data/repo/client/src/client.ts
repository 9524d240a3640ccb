import * as net from "net";
import { encodeFrame, FrameDecoder } from "./codec";
import { withRetry } from "./retry";
import { ClientOptions, DEFAULT_RETRY, Frame, Opcode, Result } from "./types";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

interface Pending {
  resolve: (frame: Frame) => void;
  reject: (error: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

/**
 * One TCP connection with in-order request pipelining: replies arrive in the order the
 * requests were written, so a FIFO queue of pending promises is enough to match them.
 */
class Connection {
  private socket: net.Socket;
  private decoder = new FrameDecoder();
  private queue: Pending[] = [];
  public closed = false;

  constructor(private options: ClientOptions) {
    this.socket = net.createConnection({ host: options.host, port: options.port });
    this.socket.on("data", (chunk: Buffer) => this.onData(chunk));
    this.socket.on("error", (error: Error) => this.failAll(error));
    this.socket.on("close", () => {
      this.closed = true;
      this.failAll(new Error("connection closed"));
    });
  }

  private onData(chunk: Buffer): void {
    let frames: Frame[];
    try {
      frames = this.decoder.push(new Uint8Array(chunk));
    } catch (error) {
      this.failAll(error as Error);
      this.socket.destroy();
      return;
    }
    for (const frame of frames) {
      const pending = this.queue.shift();
      if (!pending) {
        continue;
      }
      clearTimeout(pending.timer);
      pending.resolve(frame);
    }
  }

  private failAll(error: Error): void {
    const waiting = this.queue;
    this.queue = [];
    for (const pending of waiting) {
      clearTimeout(pending.timer);
      pending.reject(error);
    }
  }

  request(opcode: Opcode, key: Uint8Array, value?: Uint8Array): Promise<Frame> {
    return new Promise<Frame>((resolve, reject) => {
      const timeout = this.options.timeoutMs ?? 2000;
      const timer = setTimeout(() => {
        reject(new Error(`request timed out after ${timeout} ms`));
      }, timeout);
      this.queue.push({ resolve, reject, timer });
      this.socket.write(encodeFrame(opcode, key, value));
    });
  }

  close(): void {
    this.socket.end();
  }
}

export class KVClient {
  private connections: Connection[] = [];
  private next = 0;

  constructor(private options: ClientOptions) {
    const size = options.poolSize ?? 4;
    for (let i = 0; i < size; i++) {
      this.connections.push(new Connection(options));
    }
  }

  private pick(): Connection {
    for (let tries = 0; tries < this.connections.length; tries++) {
      const index = this.next++ % this.connections.length;
      const connection = this.connections[index];
      if (!connection.closed) {
        return connection;
      }
      this.connections[index] = new Connection(this.options);
      return this.connections[index];
    }
    throw new Error("no connection available");
  }

  async get(key: string): Promise<Result<string | null>> {
    const frame = await withRetry(() => this.pick().request(Opcode.Get, encoder.encode(key)), this.options.retry ?? DEFAULT_RETRY);
    switch (frame.opcode) {
      case Opcode.ReplyOk:
        return { ok: true, value: decoder.decode(frame.value) };
      case Opcode.ReplyMissing:
        return { ok: true, value: null };
      default:
        return { ok: false, error: decoder.decode(frame.value) };
    }
  }

  async set(key: string, value: string): Promise<Result<void>> {
    const frame = await withRetry(() => this.pick().request(Opcode.Set, encoder.encode(key), encoder.encode(value)), this.options.retry ?? DEFAULT_RETRY);
    if (frame.opcode === Opcode.ReplyOk) {
      return { ok: true, value: undefined };
    }
    return { ok: false, error: decoder.decode(frame.value) };
  }

  async delete(key: string): Promise<boolean> {
    const frame = await this.pick().request(Opcode.Delete, encoder.encode(key));
    return frame.opcode === Opcode.ReplyOk;
  }

  close(): void {
    for (const connection of this.connections) {
      connection.close();
    }
  }
}
