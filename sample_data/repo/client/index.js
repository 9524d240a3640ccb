// Plain JavaScript entry point for users without a TypeScript build step.
"use strict";

const net = require("net");

function encodeFrame(opcode, key = Buffer.alloc(0), value = Buffer.alloc(0)) {
  const header = Buffer.alloc(9);
  header.write("KV", 0, "ascii");
  header.writeUInt8(opcode, 2);
  header.writeUInt16BE(key.length, 3);
  header.writeUInt32BE(value.length, 5);
  return Buffer.concat([header, key, value]);
}

function ping(host, port, timeoutMs = 1000) {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error("ping timed out"));
    }, timeoutMs);
    socket.on("connect", () => socket.write(encodeFrame(4)));
    socket.on("data", (data) => {
      clearTimeout(timer);
      socket.end();
      resolve(data.length >= 9 && data.readUInt8(2) === 0x80);
    });
    socket.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

module.exports = { encodeFrame, ping };
