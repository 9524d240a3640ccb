import { Frame, Opcode } from "./types";

const MAGIC_0 = 0x4b; // 'K'
const MAGIC_1 = 0x56; // 'V'
export const HEADER_SIZE = 9;
export const MAX_VALUE = 64 * 1024 * 1024;

export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

export function encodeFrame(opcode: Opcode, key: Uint8Array = new Uint8Array(), value: Uint8Array = new Uint8Array()): Uint8Array {
  if (key.length > 0xffff) {
    throw new ProtocolError(`key of ${key.length} bytes is too long`);
  }
  if (value.length > MAX_VALUE) {
    throw new ProtocolError(`value of ${value.length} bytes is too long`);
  }
  const out = new Uint8Array(HEADER_SIZE + key.length + value.length);
  const view = new DataView(out.buffer);
  out[0] = MAGIC_0;
  out[1] = MAGIC_1;
  view.setUint8(2, opcode);
  view.setUint16(3, key.length, false);
  view.setUint32(5, value.length, false);
  out.set(key, HEADER_SIZE);
  out.set(value, HEADER_SIZE + key.length);
  return out;
}

/**
 * Incremental decoder: push bytes as they arrive, take whole frames out.
 */
export class FrameDecoder {
  private buffer: Uint8Array = new Uint8Array();

  push(chunk: Uint8Array): Frame[] {
    const merged = new Uint8Array(this.buffer.length + chunk.length);
    merged.set(this.buffer, 0);
    merged.set(chunk, this.buffer.length);
    this.buffer = merged;
    const frames: Frame[] = [];
    let offset = 0;
    while (this.buffer.length - offset >= HEADER_SIZE) {
      const view = new DataView(this.buffer.buffer, this.buffer.byteOffset + offset);
      if (this.buffer[offset] !== MAGIC_0 || this.buffer[offset + 1] !== MAGIC_1) {
        throw new ProtocolError(`bad magic at offset ${offset}`);
      }
      const opcode = view.getUint8(2) as Opcode;
      const keyLength = view.getUint16(3, false);
      const valueLength = view.getUint32(5, false);
      const end = offset + HEADER_SIZE + keyLength + valueLength;
      if (end > this.buffer.length) {
        break;
      }
      const keyStart = offset + HEADER_SIZE;
      frames.push({
        opcode,
        key: this.buffer.slice(keyStart, keyStart + keyLength),
        value: this.buffer.slice(keyStart + keyLength, end),
      });
      offset = end;
    }
    this.buffer = this.buffer.slice(offset);
    return frames;
  }

  get pending(): number {
    return this.buffer.length;
  }
}
